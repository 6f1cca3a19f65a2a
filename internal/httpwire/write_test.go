package httpwire_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
)

func TestAppendRequestHead(t *testing.T) {
	h := httpwire.Header{{"Host", "h"}, {"SOAPAction", `""`}, {"X-Empty", ""}, {"soapaction", "dup"}}
	got := httpwire.AppendRequestHead([]byte("prefix|"), "POST", "/svc?x=1", 1, h)
	require.Equal(t, "prefix|POST /svc?x=1 HTTP/1.1\r\nHost: h\r\nSOAPAction: \"\"\r\nX-Empty:\r\nsoapaction: dup\r\n\r\n", string(got))
	got = httpwire.AppendRequestHead(nil, "GET", "/", 0, nil)
	require.Equal(t, "GET / HTTP/1.0\r\n\r\n", string(got))
}

func TestAppendResponseHead(t *testing.T) {
	for _, tc := range []struct {
		minor, code int
		reason      string
		h           httpwire.Header
		want        string
	}{
		{1, 200, "OK", httpwire.Header{{"Content-Length", "0"}}, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{1, 200, "", nil, "HTTP/1.1 200 \r\n\r\n"},
		{0, 500, "Internal Server Error  ", nil, "HTTP/1.0 500 Internal Server Error  \r\n\r\n"},
		{1, 100, "Continue", nil, "HTTP/1.1 100 Continue\r\n\r\n"},
		{1, 7, "x", nil, "HTTP/1.1 007 x\r\n\r\n"},
	} {
		require.Equal(t, tc.want, string(httpwire.AppendResponseHead(nil, tc.minor, tc.code, tc.reason, tc.h)))
	}
}

func TestChunkedWriter(t *testing.T) {
	var buf bytes.Buffer
	cw := httpwire.NewChunkedWriter(&buf)
	for _, s := range []string{"hello", "", "world!", strings.Repeat("z", 0x1a2)} {
		n, err := cw.Write([]byte(s))
		require.NoError(t, err)
		require.Equal(t, len(s), n)
	}
	require.NoError(t, cw.Close())
	require.NoError(t, cw.Close(), "Close is idempotent")
	want := "5\r\nhello\r\n6\r\nworld!\r\n1a2\r\n" + strings.Repeat("z", 0x1a2) + "\r\n0\r\n\r\n"
	require.Equal(t, want, buf.String())

	_, err := cw.Write([]byte("late"))
	require.ErrorIs(t, err, httpwire.ErrWriteAfterClose)

	// What the writer produces, the reader decodes.
	raw := "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + buf.String()
	req, body, err := readRequest(raw, httpwire.Limits{})
	require.NoError(t, err)
	require.True(t, req.Chunked)
	require.Equal(t, "helloworld!"+strings.Repeat("z", 0x1a2), body)
}

// failWriter fails after accepting n bytes.
type failWriter struct{ n int }

var errDisk = errors.New("write failed")

func (w *failWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		n := w.n
		w.n = 0
		return n, errDisk
	}
	w.n -= len(p)
	return len(p), nil
}

func TestChunkedWriterErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int
		wantN int
	}{
		{"size line", 1, 0}, // "3\r\n" fails
		{"data", 4, 1},      // "3\r\n" passes, then 1 byte of data
		{"data end", 6, 3},  // size line and data pass, the CRLF fails
	} {
		t.Run(tc.name, func(t *testing.T) {
			cw := httpwire.NewChunkedWriter(&failWriter{n: tc.limit})
			n, err := cw.Write([]byte("abc"))
			require.ErrorIs(t, err, errDisk)
			require.Equal(t, tc.wantN, n)
		})
	}
	cw := httpwire.NewChunkedWriter(&failWriter{n: 0})
	require.ErrorIs(t, cw.Close(), errDisk)
}

func TestChunkedWriterShortWrite(t *testing.T) {
	cw := httpwire.NewChunkedWriter(shortWriter{})
	_, err := cw.Write([]byte("abc"))
	require.ErrorIs(t, err, io.ErrShortWrite)
}

// shortWriter accepts all of small writes and half of others, without an error.
type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) {
	if len(p) <= 2 || bytes.HasSuffix(p, []byte("\r\n")) {
		return len(p), nil
	}
	return len(p) / 2, nil
}

// TestChunkedWriterThroughBufio checks the intended use: chunks into a bufio.Writer.
func TestChunkedWriterThroughBufio(t *testing.T) {
	var out bytes.Buffer
	bw := bufio.NewWriter(&out)
	cw := httpwire.NewChunkedWriter(bw)
	_, err := io.Copy(cw, strings.NewReader(strings.Repeat("x", 100000)))
	require.NoError(t, err)
	require.NoError(t, cw.Close())
	require.NoError(t, bw.Flush())
	_, body, err := readRequest("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"+out.String(), httpwire.Limits{})
	require.NoError(t, err)
	require.Len(t, body, 100000)
}
