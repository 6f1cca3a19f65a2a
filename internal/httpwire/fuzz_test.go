package httpwire_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
)

// bigLimits lets a re-encoded head (which may grow: ": " separators, one more field)
// through whatever the original's size was.
var bigLimits = httpwire.Limits{MaxHeaderBytes: 1 << 24, MaxHeaderFields: 1 << 20}

// requireOnlyProtocolErrors checks that, reading from memory, the only errors are io.EOF
// and *ProtocolError.
func requireOnlyProtocolErrors(t *testing.T, err error) {
	t.Helper()
	var pe *httpwire.ProtocolError
	if !errors.Is(err, io.EOF) && !errors.As(err, &pe) {
		t.Fatalf("unexpected error type %T: %v", err, err)
	}
}

// reframe returns h without its framing fields, plus a Content-Length for n bytes.
func reframe(h httpwire.Header, n int) httpwire.Header {
	h = h.Clone().Del("Content-Length").Del("Transfer-Encoding")
	return append(h, httpwire.Field{Name: "Content-Length", Value: strconv.Itoa(n)})
}

func FuzzReadRequest(f *testing.F) {
	for _, tc := range validRequests {
		f.Add([]byte(tc.raw), false)
		f.Add([]byte(tc.raw), true)
	}
	for _, s := range []string{
		"", "\r\n", "GET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
		dotnetRequest + chunkedRequest,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, small bool) {
		size := 4096
		if small {
			size = 16
		}
		req, err := httpwire.ReadRequest(bufio.NewReaderSize(bytes.NewReader(data), size), httpwire.Limits{})
		if err != nil {
			requireOnlyProtocolErrors(t, err)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			requireOnlyProtocolErrors(t, err)
			return
		}
		if req.Chunked {
			require.EqualValues(t, -1, req.ContentLength)
		} else {
			require.EqualValues(t, len(body), req.ContentLength)
		}

		h := reframe(req.Header, len(body))
		wire := httpwire.AppendRequestHead(nil, req.Method, req.Target, req.ProtoMinor, h)
		wire = append(wire, body...)
		again, err := httpwire.ReadRequest(bufio.NewReader(bytes.NewReader(wire)), bigLimits)
		require.NoError(t, err, "re-encoded: %q", wire)
		againBody, err := io.ReadAll(again.Body)
		require.NoError(t, err)
		require.Equal(t, req.Method, again.Method)
		require.Equal(t, req.Target, again.Target)
		require.Equal(t, req.ProtoMinor, again.ProtoMinor)
		require.Equal(t, h, again.Header)
		require.Equal(t, body, againBody)
		require.Equal(t, req.Close, again.Close)
		require.Equal(t, req.ExpectContinue, again.ExpectContinue)
	})
}

func FuzzReadResponse(f *testing.F) {
	for _, tc := range validResponses {
		f.Add([]byte(tc.raw), tc.method == "HEAD")
	}
	for _, s := range []string{
		"", "HTTP/1.1 200 OK\r\n\r\n", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;a=b\r\nx\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		method := "POST"
		if head {
			method = "HEAD"
		}
		resp, err := httpwire.ReadResponse(bufio.NewReader(bytes.NewReader(data)), method, httpwire.Limits{})
		if err != nil {
			requireOnlyProtocolErrors(t, err)
			return
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			requireOnlyProtocolErrors(t, err)
			return
		}
		if resp.ContentLength >= 0 {
			require.EqualValues(t, len(body), resp.ContentLength)
		}

		h := reframe(resp.Header, len(body))
		wire := httpwire.AppendResponseHead(nil, resp.ProtoMinor, resp.StatusCode, resp.Reason, h)
		wire = append(wire, body...)
		again, err := httpwire.ReadResponse(bufio.NewReader(bytes.NewReader(wire)), method, bigLimits)
		require.NoError(t, err, "re-encoded: %q", wire)
		againBody, err := io.ReadAll(again.Body)
		require.NoError(t, err)
		require.Equal(t, resp.ProtoMinor, again.ProtoMinor)
		require.Equal(t, resp.StatusCode, again.StatusCode)
		require.Equal(t, resp.Reason, again.Reason)
		require.Equal(t, h, again.Header)
		require.Equal(t, body, againBody)
	})
}

// FuzzChunkedBody decodes arbitrary bytes as a chunked body; whatever decodes must
// survive a round trip through NewChunkedWriter, chunk boundaries set by the fuzzer.
func FuzzChunkedBody(f *testing.F) {
	for _, s := range []string{
		"0\r\n\r\n", "3\r\nabc\r\n0\r\n\r\n", "4;name=value\r\nWiki\r\n0;x\r\nT: 1\r\n\r\n",
		"1\r\na\r\n1\r\nb\r\n0\r\n\r\n", "3\nabc\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	const head = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		raw := append([]byte(head), data...)
		req, err := httpwire.ReadRequest(bufio.NewReaderSize(bytes.NewReader(raw), 16), httpwire.Limits{})
		require.NoError(t, err)
		body, err := io.ReadAll(req.Body)
		if err != nil {
			requireOnlyProtocolErrors(t, err)
			return
		}
		var enc bytes.Buffer
		enc.WriteString(head)
		cw := httpwire.NewChunkedWriter(&enc)
		n := max(int(step), 1)
		for rest := body; len(rest) > 0; {
			k := min(n, len(rest))
			_, err := cw.Write(rest[:k])
			require.NoError(t, err)
			rest = rest[k:]
		}
		require.NoError(t, cw.Close())
		again, err := httpwire.ReadRequest(bufio.NewReader(&enc), httpwire.Limits{})
		require.NoError(t, err)
		againBody, err := io.ReadAll(again.Body)
		require.NoError(t, err)
		require.Equal(t, body, againBody)
	})
}
