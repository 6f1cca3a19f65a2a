package httpwire_test

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
)

type wantResponse struct {
	minor, code   int
	reason        string
	header        httpwire.Header
	contentLength int64
	chunked       bool
	close         bool
	body          string
}

var validResponses = []struct {
	name   string
	method string
	raw    string
	want   wantResponse
}{
	{
		name: "Content-Length", method: "POST",
		raw: "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\nContent-Length: 5\r\n\r\nhello",
		want: wantResponse{
			minor: 1, code: 200, reason: "OK",
			header:        httpwire.Header{{"Content-Type", "text/xml; charset=utf-8"}, {"Content-Length", "5"}},
			contentLength: 5, body: "hello",
		},
	},
	{
		name: "SOAP fault 500 with odd reason", method: "POST",
		raw: "HTTP/1.1 500 Internal Server Error  \r\nX-AspNet-Version: 4.0.30319\r\nContent-Length: 3\r\n\r\n<f>",
		want: wantResponse{
			minor: 1, code: 500, reason: "Internal Server Error  ",
			header:        httpwire.Header{{"X-AspNet-Version", "4.0.30319"}, {"Content-Length", "3"}},
			contentLength: 3, body: "<f>",
		},
	},
	{
		name: "chunked with trailer", method: "POST",
		raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n1\r\nd\r\n0\r\nX-T: 1\r\n\r\n",
		want: wantResponse{
			minor: 1, code: 200, reason: "OK",
			header:        httpwire.Header{{"Transfer-Encoding", "chunked"}},
			contentLength: -1, chunked: true, body: "abcd",
		},
	},
	{
		name: "close-delimited HTTP/1.0", method: "POST",
		raw: "HTTP/1.0 200 OK\r\nContent-Type: text/xml\r\n\r\n<r>\r\n</r>",
		want: wantResponse{
			minor: 0, code: 200, reason: "OK",
			header:        httpwire.Header{{"Content-Type", "text/xml"}},
			contentLength: -1, close: true, body: "<r>\r\n</r>",
		},
	},
	{
		name: "close-delimited HTTP/1.1", method: "GET",
		raw: "HTTP/1.1 200 OK\r\n\r\nxyz",
		want: wantResponse{
			minor: 1, code: 200, reason: "OK", header: httpwire.Header{},
			contentLength: -1, close: true, body: "xyz",
		},
	},
	{
		name: "HTTP/1.0 keep-alive", method: "POST",
		raw: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
		want: wantResponse{
			minor: 0, code: 200, reason: "OK",
			header:        httpwire.Header{{"Connection", "keep-alive"}, {"Content-Length", "2"}},
			contentLength: 2, body: "ok",
		},
	},
	{
		name: "HTTP/1.0 without keep-alive", method: "POST",
		raw: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
		want: wantResponse{
			minor: 0, code: 200, reason: "OK", header: httpwire.Header{{"Content-Length", "2"}},
			contentLength: 2, close: true, body: "ok",
		},
	},
	{
		name: "Connection close", method: "POST",
		raw: "HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n",
		want: wantResponse{
			minor: 1, code: 200, reason: "OK",
			header: httpwire.Header{{"Connection", "Close"}, {"Content-Length", "0"}}, close: true,
		},
	},
	{
		name: "HEAD with Content-Length", method: "HEAD",
		raw:  "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n",
		want: wantResponse{minor: 1, code: 200, reason: "OK", header: httpwire.Header{{"Content-Length", "1234"}}},
	},
	{
		name: "HEAD with chunked", method: "HEAD",
		raw:  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
		want: wantResponse{minor: 1, code: 200, reason: "OK", header: httpwire.Header{{"Transfer-Encoding", "chunked"}}},
	},
	{
		name: "204", method: "POST",
		raw:  "HTTP/1.1 204 No Content\r\nDate: x\r\n\r\n",
		want: wantResponse{minor: 1, code: 204, reason: "No Content", header: httpwire.Header{{"Date", "x"}}},
	},
	{
		name: "304 with Content-Length", method: "GET",
		raw:  "HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n",
		want: wantResponse{minor: 1, code: 304, reason: "Not Modified", header: httpwire.Header{{"Content-Length", "99"}}},
	},
	{
		name: "100 Continue", method: "POST",
		raw:  "HTTP/1.1 100 Continue\r\n\r\n",
		want: wantResponse{minor: 1, code: 100, reason: "Continue", header: httpwire.Header{}},
	},
	{
		name: "101 Switching Protocols", method: "GET",
		raw: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		want: wantResponse{
			minor: 1, code: 101, reason: "Switching Protocols",
			header: httpwire.Header{{"Upgrade", "websocket"}, {"Connection", "Upgrade"}}, close: true,
		},
	},
	{
		name: "2xx to CONNECT", method: "CONNECT",
		raw:  "HTTP/1.1 200 Connection established\r\n\r\n",
		want: wantResponse{minor: 1, code: 200, reason: "Connection established", header: httpwire.Header{}, close: true},
	},
	{
		name: "empty reason with SP", method: "POST",
		raw:  "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n",
		want: wantResponse{minor: 1, code: 200, header: httpwire.Header{{"Content-Length", "0"}}},
	},
	{
		name: "no reason, bare LF, leading empty line", method: "POST",
		raw:  "\r\nHTTP/1.1 404\nContent-Length: 0\n\n",
		want: wantResponse{minor: 1, code: 404, header: httpwire.Header{{"Content-Length", "0"}}},
	},
	{
		name: "reason with obs-text and tab", method: "POST",
		raw:  "HTTP/1.1 599 Fehler\tb\xc3\xa4d\r\nContent-Length: 0\r\n\r\n",
		want: wantResponse{minor: 1, code: 599, reason: "Fehler\tb\xc3\xa4d", header: httpwire.Header{{"Content-Length", "0"}}},
	},
	{
		name: "obs-fold replaced by one SP", method: "POST",
		raw: "HTTP/1.1 200 OK\r\nX-Long: part1\r\n   part2 \r\n\tpart3\r\nX-Empty:\r\n  later\r\nX-Blank: v\r\n \t \r\nContent-Length: 0\r\n\r\n",
		want: wantResponse{
			minor: 1, code: 200, reason: "OK",
			header: httpwire.Header{
				{"X-Long", "part1 part2 part3"}, {"X-Empty", "later"}, {"X-Blank", "v"}, {"Content-Length", "0"},
			},
		},
	},
}

func readResponse(raw, method string) (*httpwire.Response, string, error) {
	br := bufio.NewReader(strings.NewReader(raw))
	resp, err := httpwire.ReadResponse(br, method, httpwire.Limits{})
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

func TestReadResponseValid(t *testing.T) {
	for _, tc := range validResponses {
		t.Run(tc.name, func(t *testing.T) {
			resp, body, err := readResponse(tc.raw, tc.method)
			require.NoError(t, err)
			w := tc.want
			require.Equal(t, 1, resp.ProtoMajor)
			require.Equal(t, w.minor, resp.ProtoMinor)
			require.Equal(t, w.code, resp.StatusCode)
			require.Equal(t, w.reason, resp.Reason)
			require.Equal(t, w.header, resp.Header)
			require.Equal(t, w.contentLength, resp.ContentLength)
			require.Equal(t, w.chunked, resp.Chunked)
			require.Equal(t, w.close, resp.Close)
			require.Equal(t, w.body, body)

			// Write it back (byte-exact reason) and parse it again.
			wire := httpwire.AppendResponseHead(nil, resp.ProtoMinor, resp.StatusCode, resp.Reason, resp.Header)
			again, err := httpwire.ReadResponse(bufio.NewReader(strings.NewReader(string(wire))), "HEAD", httpwire.Limits{})
			require.NoError(t, err)
			require.Equal(t, resp.StatusCode, again.StatusCode)
			require.Equal(t, resp.Reason, again.Reason)
			require.Equal(t, resp.Header, again.Header)
		})
	}
}

func TestReadResponseInterimThenFinal(t *testing.T) {
	raw := "HTTP/1.1 100 Continue\r\n\r\n" +
		"HTTP/1.1 102 Processing\r\nX: 1\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n<ok>" +
		"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n" + // answer to HEAD: no body follows
		"HTTP/1.1 204 No Content\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"
	br := bufio.NewReader(strings.NewReader(raw))
	for _, w := range []struct {
		method string
		code   int
		body   string
	}{
		{"POST", 100, ""}, {"POST", 102, ""}, {"POST", 200, "<ok>"},
		{"HEAD", 200, ""}, {"DELETE", 204, ""}, {"POST", 200, "ab"},
	} {
		resp, err := httpwire.ReadResponse(br, w.method, httpwire.Limits{})
		require.NoError(t, err)
		require.Equal(t, w.code, resp.StatusCode)
		require.False(t, resp.Close)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, w.body, string(body))
	}
	_, err := httpwire.ReadResponse(br, "POST", httpwire.Limits{})
	require.Equal(t, io.EOF, err)
}

func TestReadResponseRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  string
		kind httpwire.ErrorKind
	}{
		{"two-digit code", "HTTP/1.1 20 OK\r\n\r\n", httpwire.ErrMalformed},
		{"four-digit code", "HTTP/1.1 2000 OK\r\n\r\n", httpwire.ErrMalformed},
		{"code below 100", "HTTP/1.1 099 Odd\r\n\r\n", httpwire.ErrMalformed},
		{"letters in code", "HTTP/1.1 2x0 OK\r\n\r\n", httpwire.ErrMalformed},
		{"no code", "HTTP/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"double space", "HTTP/1.1  200 OK\r\n\r\n", httpwire.ErrMalformed},
		{"lower-case name", "http/1.1 200 OK\r\n\r\n", httpwire.ErrMalformed},
		{"not HTTP", "ICY 200 OK\r\n\r\n", httpwire.ErrMalformed},
		{"HTTP/2.0", "HTTP/2.0 200 OK\r\n\r\n", httpwire.ErrUnsupportedVersion},
		{"HTTP/1.2", "HTTP/1.2 200 OK\r\n\r\n", httpwire.ErrUnsupportedVersion},
		{"CTL in reason", "HTTP/1.1 200 O\x01K\r\n\r\n", httpwire.ErrMalformed},
		{"NUL in reason", "HTTP/1.1 200 \x00\r\n\r\n", httpwire.ErrMalformed},
		{"bare CR in reason", "HTTP/1.1 200 O\rK\r\n\r\n", httpwire.ErrMalformed},
		{"first line folded", "HTTP/1.1 200 OK\r\n X: 1\r\n\r\n", httpwire.ErrMalformed},
		{"NUL in fold", "HTTP/1.1 200 OK\r\nX: 1\r\n \x00\r\n\r\n", httpwire.ErrMalformed},
		{"space before colon", "HTTP/1.1 200 OK\r\nX : 1\r\n\r\n", httpwire.ErrMalformed},
		{"TE and CL", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", httpwire.ErrMalformed},
		{"TE in HTTP/1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", httpwire.ErrMalformed},
		{"TE gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", httpwire.ErrUnsupportedTransferCoding},
		{"bad CL", "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", httpwire.ErrBadContentLength},
		{"bad CL on 204", "HTTP/1.1 204 No Content\r\nContent-Length: -1\r\n\r\n", httpwire.ErrBadContentLength},
		{"conflicting CL", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", httpwire.ErrBadContentLength},
		{"too many fields", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: 1\r\n", 300) + "\r\n", httpwire.ErrHeaderTooLarge},
		{"EOF in head", "HTTP/1.1 200 OK\r\nX: 1\r\n", httpwire.ErrMalformed},
		{"truncated CL body", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab", httpwire.ErrBodyTruncated},
		{"truncated chunked body", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n", httpwire.ErrBodyTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readResponse(tc.raw, "POST")
			require.ErrorIs(t, err, tc.kind)
		})
	}
}

func TestReadResponseEOF(t *testing.T) {
	_, err := httpwire.ReadResponse(bufio.NewReader(strings.NewReader("")), "POST", httpwire.Limits{})
	require.Equal(t, io.EOF, err)
	_, err = httpwire.ReadResponse(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\n")), "POST", httpwire.Limits{})
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.ErrorIs(t, err, httpwire.ErrMalformed)
}
