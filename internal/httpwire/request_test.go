package httpwire_test

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
)

// readAll reads a request and its whole body from raw.
func readRequest(raw string, lim httpwire.Limits) (*httpwire.Request, string, error) {
	br := bufio.NewReader(strings.NewReader(raw))
	req, err := httpwire.ReadRequest(br, lim)
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(req.Body)
	return req, string(body), err
}

const axisRequest = "POST /axis/services/EchoService HTTP/1.0\r\n" +
	"Content-Type: text/xml; charset=utf-8\r\n" +
	"Accept: application/soap+xml, application/dime, multipart/related, text/*\r\n" +
	"User-Agent: Axis/1.4\r\n" +
	"Host: localhost:8080\r\n" +
	"Cache-Control: no-cache\r\n" +
	"Pragma: no-cache\r\n" +
	"SOAPAction: \"\"\r\n" +
	"Content-Length: 11\r\n" +
	"\r\n" +
	"<soap:Env/>"

const dotnetRequest = "POST /Calc/Service.asmx HTTP/1.1\r\n" +
	"User-Agent: Mozilla/4.0 (compatible; MSIE 6.0; MS Web Services Client Protocol 4.0.30319.42000)\r\n" +
	"Content-Type: text/xml; charset=utf-8\r\n" +
	"SOAPAction: \"http://tempuri.org/Add\"\r\n" +
	"Host: calc.example:80\r\n" +
	"Content-Length: 4\r\n" +
	"Expect: 100-continue\r\n" +
	"Connection: Keep-Alive\r\n" +
	"\r\n" +
	"<a/>"

const chunkedRequest = "POST /ws HTTP/1.1\r\n" +
	"Host: ws\r\n" +
	"Transfer-Encoding: chunked\r\n" +
	"Trailer: X-Checksum\r\n" +
	"\r\n" +
	"4;name=value\r\nWiki\r\n" +
	"5 ; ext ; other=\"quoted\tstr\"\r\npedia\r\n" +
	"E\r\n in\r\n\r\nchunks.\r\n" +
	"0;last\r\n" +
	"X-Checksum: abc\r\n" +
	"X-Other:1\r\n" +
	"\r\n"

type wantRequest struct {
	method, target string
	minor          int
	header         httpwire.Header
	contentLength  int64
	chunked        bool
	expect         bool
	close          bool
	body           string
}

var validRequests = []struct {
	name string
	raw  string
	want wantRequest
}{
	{
		name: "Axis 1 HTTP/1.0 POST",
		raw:  axisRequest,
		want: wantRequest{
			method: "POST", target: "/axis/services/EchoService", minor: 0,
			header: httpwire.Header{
				{"Content-Type", "text/xml; charset=utf-8"},
				{"Accept", "application/soap+xml, application/dime, multipart/related, text/*"},
				{"User-Agent", "Axis/1.4"},
				{"Host", "localhost:8080"},
				{"Cache-Control", "no-cache"},
				{"Pragma", "no-cache"},
				{"SOAPAction", `""`},
				{"Content-Length", "11"},
			},
			contentLength: 11, close: true, body: "<soap:Env/>",
		},
	},
	{
		name: "HTTP/1.0 keep-alive",
		raw:  "POST /x HTTP/1.0\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nhi",
		want: wantRequest{
			method: "POST", target: "/x",
			header:        httpwire.Header{{"Connection", "Keep-Alive"}, {"Content-Length", "2"}},
			contentLength: 2, body: "hi",
		},
	},
	{
		name: ".NET HTTP/1.1 with Expect 100-continue",
		raw:  dotnetRequest,
		want: wantRequest{
			method: "POST", target: "/Calc/Service.asmx", minor: 1,
			header: httpwire.Header{
				{"User-Agent", "Mozilla/4.0 (compatible; MSIE 6.0; MS Web Services Client Protocol 4.0.30319.42000)"},
				{"Content-Type", "text/xml; charset=utf-8"},
				{"SOAPAction", `"http://tempuri.org/Add"`},
				{"Host", "calc.example:80"},
				{"Content-Length", "4"},
				{"Expect", "100-continue"},
				{"Connection", "Keep-Alive"},
			},
			contentLength: 4, expect: true, body: "<a/>",
		},
	},
	{
		name: "chunked with extensions and trailers",
		raw:  chunkedRequest,
		want: wantRequest{
			method: "POST", target: "/ws", minor: 1,
			header: httpwire.Header{
				{"Host", "ws"}, {"Transfer-Encoding", "chunked"}, {"Trailer", "X-Checksum"},
			},
			contentLength: -1, chunked: true, body: "Wikipedia in\r\n\r\nchunks.",
		},
	},
	{
		name: "chunked, mixed-case coding, empty list elements, upper-case hex, leading zeros",
		raw: "POST / HTTP/1.1\r\nTransfer-Encoding: , Chunked ,\r\n\r\n" +
			"A\r\n0123456789\r\n0000000000000002\r\nab\r\n0\r\n\r\n",
		want: wantRequest{
			method: "POST", target: "/", minor: 1,
			header:        httpwire.Header{{"Transfer-Encoding", ", Chunked ,"}},
			contentLength: -1, chunked: true, body: "0123456789ab",
		},
	},
	{
		name: "GET ?wsdl",
		raw:  "GET /Calc/Service.asmx?wsdl HTTP/1.1\r\nHost: calc.example\r\nAccept: */*\r\n\r\n",
		want: wantRequest{
			method: "GET", target: "/Calc/Service.asmx?wsdl", minor: 1,
			header: httpwire.Header{{"Host", "calc.example"}, {"Accept", "*/*"}},
		},
	},
	{
		name: "gSOAP with Connection close",
		raw: "POST /gsoap HTTP/1.1\r\nHost: g:8080\r\nUser-Agent: gSOAP/2.8\r\n" +
			"Content-Type: text/xml; charset=utf-8\r\nContent-Length: 3\r\nConnection: close\r\nSOAPAction: \"\"\r\n\r\nabc",
		want: wantRequest{
			method: "POST", target: "/gsoap", minor: 1,
			header: httpwire.Header{
				{"Host", "g:8080"}, {"User-Agent", "gSOAP/2.8"}, {"Content-Type", "text/xml; charset=utf-8"},
				{"Content-Length", "3"}, {"Connection", "close"}, {"SOAPAction", `""`},
			},
			contentLength: 3, close: true, body: "abc",
		},
	},
	{
		name: "leading empty lines, bare LF terminators",
		raw:  "\r\n\n\r\nPOST /x HTTP/1.1\nHost: h\nContent-Length: 2\n\nhi",
		want: wantRequest{
			method: "POST", target: "/x", minor: 1,
			header:        httpwire.Header{{"Host", "h"}, {"Content-Length", "2"}},
			contentLength: 2, body: "hi",
		},
	},
	{
		name: "OWS trimming, empty values, odd casing, CTL in value",
		raw:  "M-SEARCH * HTTP/1.1\r\nsoapaction:\r\nX-A:  \t v  v \t \r\nX-b:x\r\nX-Ctl: a\x01b\x7f\r\n\r\n",
		want: wantRequest{
			method: "M-SEARCH", target: "*", minor: 1,
			header: httpwire.Header{{"soapaction", ""}, {"X-A", "v  v"}, {"X-b", "x"}, {"X-Ctl", "a\x01b\x7f"}},
		},
	},
	{
		name: "identical duplicate Content-Length, leading zeros",
		raw:  "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 003\r\n\r\nabc",
		want: wantRequest{
			method: "POST", target: "/", minor: 1,
			header:        httpwire.Header{{"Content-Length", "3"}, {"Content-Length", "003"}},
			contentLength: 3, body: "abc",
		},
	},
	{
		name: "Content-Length zero",
		raw:  "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
		want: wantRequest{
			method: "POST", target: "/", minor: 1,
			header: httpwire.Header{{"Content-Length", "0"}},
		},
	},
	{
		name: "HTTP/1.0 Expect ignored, keep-alive with close wins",
		raw:  "POST / HTTP/1.0\r\nExpect: 100-continue\r\nConnection: keep-alive, close\r\n\r\n",
		want: wantRequest{
			method: "POST", target: "/",
			header: httpwire.Header{{"Expect", "100-continue"}, {"Connection", "keep-alive, close"}},
			close:  true,
		},
	},
	{
		name: "raw UTF-8 and absolute-form target",
		raw:  "GET http://h/caf\xc3\xa9?q=%20 HTTP/1.1\r\n\r\n",
		want: wantRequest{method: "GET", target: "http://h/caf\xc3\xa9?q=%20", minor: 1, header: httpwire.Header{}},
	},
}

func TestReadRequestValid(t *testing.T) {
	for _, tc := range validRequests {
		t.Run(tc.name, func(t *testing.T) {
			req, body, err := readRequest(tc.raw, httpwire.Limits{})
			require.NoError(t, err)
			w := tc.want
			if w.header == nil {
				w.header = httpwire.Header{}
			}
			require.Equal(t, w.method, req.Method)
			require.Equal(t, w.target, req.Target)
			require.Equal(t, 1, req.ProtoMajor)
			require.Equal(t, w.minor, req.ProtoMinor)
			require.Equal(t, w.header, req.Header)
			require.Equal(t, w.contentLength, req.ContentLength)
			require.Equal(t, w.chunked, req.Chunked)
			require.Equal(t, w.expect, req.ExpectContinue)
			require.Equal(t, w.close, req.Close)
			require.Equal(t, w.body, body)
			// EOF is sticky.
			n, err := req.Body.Read(make([]byte, 1))
			require.Zero(t, n)
			require.ErrorIs(t, err, io.EOF)
		})
	}
}

// TestReadRequestSmallBuffer reads every valid request through the smallest bufio buffer
// and one byte at a time, so that lines never fit in the buffer.
func TestReadRequestSmallBuffer(t *testing.T) {
	for _, tc := range validRequests {
		t.Run(tc.name, func(t *testing.T) {
			want, wantBody, err := readRequest(tc.raw, httpwire.Limits{})
			require.NoError(t, err)
			br := bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(tc.raw)), 16)
			req, err := httpwire.ReadRequest(br, httpwire.Limits{})
			require.NoError(t, err)
			body, err := io.ReadAll(iotest.OneByteReader(req.Body))
			require.NoError(t, err)
			require.Equal(t, wantBody, string(body))
			require.Equal(t, want.Header, req.Header)
			require.Equal(t, want.Target, req.Target)
		})
	}
}

func TestReadRequestRejected(t *testing.T) {
	const h11 = "POST / HTTP/1.1\r\n"
	for _, tc := range []struct {
		name string
		raw  string
		kind httpwire.ErrorKind
	}{
		{"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", httpwire.ErrMalformed},
		{"tab before colon", "GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", httpwire.ErrMalformed},
		{"obs-fold", "GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", httpwire.ErrMalformed},
		{"obs-fold tab", "GET / HTTP/1.1\r\nX: a\r\n\tfolded\r\n\r\n", httpwire.ErrMalformed},
		{"first field line folded", "GET / HTTP/1.1\r\n X: a\r\n\r\n", httpwire.ErrMalformed},
		{"no colon", "GET / HTTP/1.1\r\nNoColon\r\n\r\n", httpwire.ErrMalformed},
		{"empty name", "GET / HTTP/1.1\r\n: v\r\n\r\n", httpwire.ErrMalformed},
		{"non-token name", "GET / HTTP/1.1\r\nX(y): v\r\n\r\n", httpwire.ErrMalformed},
		{"non-ASCII name", "GET / HTTP/1.1\r\nX-\xc3\x9c: v\r\n\r\n", httpwire.ErrMalformed},
		{"NUL in value", "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", httpwire.ErrMalformed},
		{"bare CR in value", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", httpwire.ErrMalformed},
		{"bare CR ending value", "GET / HTTP/1.1\r\nX: a\r\r\n\r\n", httpwire.ErrMalformed},
		{"bare CR in request line", "GET /\r HTTP/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"bare CR as line end", "GET / HTTP/1.1\rX: y\r\n\r\n", httpwire.ErrMalformed},
		{"double space", "GET  / HTTP/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"trailing space", "GET / HTTP/1.1 \r\n\r\n", httpwire.ErrMalformed},
		{"leading space", " GET / HTTP/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"tab separator", "GET\t/ HTTP/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"space in target", "GET /a b HTTP/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"HTTP/0.9", "GET /\r\n\r\n", httpwire.ErrMalformed},
		{"no version", "GET / \r\n\r\n", httpwire.ErrMalformed},
		{"lower-case version", "GET / http/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"garbage version", "GET / HTTP/1.x\r\n\r\n", httpwire.ErrMalformed},
		{"long version", "GET / HTTP/1.10\r\n\r\n", httpwire.ErrMalformed},
		{"HTTP/2.0 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", httpwire.ErrUnsupportedVersion},
		{"HTTP/1.2", "GET / HTTP/1.2\r\n\r\n", httpwire.ErrUnsupportedVersion},
		{"HTTP/0.9 with version", "GET / HTTP/0.9\r\n\r\n", httpwire.ErrUnsupportedVersion},
		{"bad method", "G@T / HTTP/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"empty method", " / HTTP/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"empty target", "GET  HTTP/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"NUL in target", "GET /a\x00 HTTP/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"DEL in target", "GET /a\x7f HTTP/1.1\r\n\r\n", httpwire.ErrMalformed},
		{"CL negative", h11 + "Content-Length: -1\r\n\r\n", httpwire.ErrBadContentLength},
		{"CL plus", h11 + "Content-Length: +1\r\n\r\n", httpwire.ErrBadContentLength},
		{"CL hex", h11 + "Content-Length: 0x10\r\n\r\n", httpwire.ErrBadContentLength},
		{"CL inner space", h11 + "Content-Length: 1 2\r\n\r\n", httpwire.ErrBadContentLength},
		{"CL list", h11 + "Content-Length: 1,1\r\n\r\n", httpwire.ErrBadContentLength},
		{"CL empty", h11 + "Content-Length:\r\n\r\n", httpwire.ErrBadContentLength},
		{"CL 2^62", h11 + "Content-Length: 4611686018427387904\r\n\r\n", httpwire.ErrBadContentLength},
		{"CL overflow", h11 + "Content-Length: 99999999999999999999999\r\n\r\n", httpwire.ErrBadContentLength},
		{"CL conflicting", h11 + "Content-Length: 1\r\nContent-Length: 2\r\n\r\nab", httpwire.ErrBadContentLength},
		{"TE and CL", h11 + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", httpwire.ErrMalformed},
		{"CL and TE lower-case", h11 + "content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n", httpwire.ErrMalformed},
		{"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", httpwire.ErrMalformed},
		{"TE gzip in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: gzip\r\n\r\n", httpwire.ErrMalformed},
		{"TE gzip", h11 + "Transfer-Encoding: gzip\r\n\r\n", httpwire.ErrUnsupportedTransferCoding},
		{"TE gzip, chunked", h11 + "Transfer-Encoding: gzip, chunked\r\n\r\n", httpwire.ErrUnsupportedTransferCoding},
		{"TE gzip then chunked fields", h11 + "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", httpwire.ErrUnsupportedTransferCoding},
		{"TE chunked, gzip", h11 + "Transfer-Encoding: chunked, gzip\r\n\r\n", httpwire.ErrUnsupportedTransferCoding},
		{"TE identity", h11 + "Transfer-Encoding: identity\r\n\r\n", httpwire.ErrUnsupportedTransferCoding},
		{"TE chunked with parameter", h11 + "Transfer-Encoding: chunked;q=1\r\n\r\n", httpwire.ErrUnsupportedTransferCoding},
		{"TE chunked twice", h11 + "Transfer-Encoding: chunked, chunked\r\n\r\n", httpwire.ErrMalformed},
		{"TE chunked in two fields", h11 + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", httpwire.ErrMalformed},
		{"TE empty", h11 + "Transfer-Encoding:\r\n\r\n", httpwire.ErrMalformed},
		{"TE only commas", h11 + "Transfer-Encoding: , ,\r\n\r\n", httpwire.ErrMalformed},
		{"two Host fields", "GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", httpwire.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readRequest(tc.raw, httpwire.Limits{})
			require.ErrorIs(t, err, tc.kind)
			var pe *httpwire.ProtocolError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.kind, pe.Kind)
		})
	}
}

func TestReadRequestBodyErrors(t *testing.T) {
	const chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, tc := range []struct {
		name     string
		raw      string
		wantBody string // bytes delivered before the error
		kind     httpwire.ErrorKind
	}{
		{"CL body short", "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", "abc", httpwire.ErrBodyTruncated},
		{"CL body empty", "POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\n", "", httpwire.ErrBodyTruncated},
		{"no final CRLF", chunked + "3\r\nabc\r\n0\r\n", "abc", httpwire.ErrBodyTruncated},
		{"final CR only", chunked + "3\r\nabc\r\n0\r\n\r", "abc", httpwire.ErrBodyTruncated},
		{"EOF in trailer", chunked + "0\r\nX-T: 1\r\n", "", httpwire.ErrBodyTruncated},
		{"no last chunk", chunked + "3\r\nabc\r\n", "abc", httpwire.ErrBodyTruncated},
		{"EOF in chunk data", chunked + "5\r\nabc", "abc", httpwire.ErrBodyTruncated},
		{"EOF after chunk data", chunked + "3\r\nabc", "abc", httpwire.ErrBodyTruncated},
		{"EOF after chunk data CR", chunked + "3\r\nabc\r", "abc", httpwire.ErrBodyTruncated},
		{"EOF in size line", chunked + "3", "", httpwire.ErrBodyTruncated},
		{"empty body", chunked, "", httpwire.ErrBodyTruncated},
		{"bad size", chunked + "g\r\nabc\r\n", "", httpwire.ErrMalformed},
		{"empty size", chunked + "\r\n", "", httpwire.ErrMalformed},
		{"negative size", chunked + "-1\r\n", "", httpwire.ErrMalformed},
		{"17 hex digits", chunked + "00000000000000001\r\nx\r\n0\r\n\r\n", "", httpwire.ErrMalformed},
		{"size 2^62", chunked + "4000000000000000\r\n", "", httpwire.ErrMalformed},
		{"size overflow", chunked + "ffffffffffffffff\r\n", "", httpwire.ErrMalformed},
		{"size then garbage", chunked + "3x\r\nabc\r\n", "", httpwire.ErrMalformed},
		{"bare LF size line", chunked + "3\nabc\r\n0\r\n\r\n", "", httpwire.ErrMalformed},
		{"bare LF in extension", chunked + "3;a\nabc\r\n0\r\n\r\n", "", httpwire.ErrMalformed},
		{"bare CR in extension", chunked + "3;a\rb\r\nabc\r\n0\r\n\r\n", "", httpwire.ErrMalformed},
		{"CTL in extension", chunked + "3;a\x01\r\nabc\r\n0\r\n\r\n", "", httpwire.ErrMalformed},
		{"data not followed by CRLF", chunked + "3\r\nabcd\r\n0\r\n\r\n", "abc", httpwire.ErrMalformed},
		{"data followed by LF", chunked + "3\r\nabc\n0\r\n\r\n", "abc", httpwire.ErrMalformed},
		{"bad trailer field", chunked + "0\r\nBad Name: 1\r\n\r\n", "", httpwire.ErrMalformed},
		{"trailer obs-fold", chunked + "0\r\nX: 1\r\n 2\r\n\r\n", "", httpwire.ErrMalformed},
		{"trailer bare LF", chunked + "0\r\nX: 1\n\r\n", "", httpwire.ErrMalformed},
		{"trailer bare LF end", chunked + "0\r\nX: 1\r\n\n", "", httpwire.ErrMalformed},
		{"chunk line too long", chunked + "1;" + strings.Repeat("e", 5000) + "\r\nx\r\n0\r\n\r\n", "", httpwire.ErrMalformed},
		{"too much overhead", chunked + strings.Repeat("1;"+strings.Repeat("e", 1000)+"\r\nx\r\n", 20) + "0\r\n\r\n", strings.Repeat("x", 16), httpwire.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tc.raw))
			req, err := httpwire.ReadRequest(br, httpwire.Limits{})
			require.NoError(t, err)
			body, err := io.ReadAll(req.Body)
			require.ErrorIs(t, err, tc.kind)
			require.Equal(t, tc.wantBody, string(body))
			if tc.kind == httpwire.ErrBodyTruncated {
				require.ErrorIs(t, err, io.ErrUnexpectedEOF)
			}
			// The error is sticky.
			n, err2 := req.Body.Read(make([]byte, 8))
			require.Zero(t, n)
			require.Equal(t, err, err2)
		})
	}
}

func TestReadRequestEOF(t *testing.T) {
	for _, raw := range []string{"", "\r\n", "\n\r\n"} {
		_, err := httpwire.ReadRequest(bufio.NewReader(strings.NewReader(raw)), httpwire.Limits{})
		require.Equal(t, io.EOF, err, "%q: clean EOF must be plain io.EOF", raw)
	}
	for _, raw := range []string{"G", "GET / HTTP/1.1", "GET / HTTP/1.1\r\n", "GET / HTTP/1.1\r\nHost: a\r\n", "\r\nGET", "GET / HTTP/1.1\r\n\r"} {
		_, err := httpwire.ReadRequest(bufio.NewReader(strings.NewReader(raw)), httpwire.Limits{})
		require.ErrorIs(t, err, httpwire.ErrMalformed, "%q", raw)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "%q", raw)
	}
}

var errNetwork = errors.New("network down")

func TestReadRequestIOError(t *testing.T) {
	// An I/O error is wrapped, not turned into a protocol error.
	for _, raw := range []string{"", "GET / HT"} {
		r := io.MultiReader(strings.NewReader(raw), iotest.ErrReader(errNetwork))
		_, err := httpwire.ReadRequest(bufio.NewReader(r), httpwire.Limits{})
		require.ErrorIs(t, err, errNetwork)
		var pe *httpwire.ProtocolError
		require.False(t, errors.As(err, &pe))
	}
	for _, raw := range []string{
		"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: y",
	} {
		r := io.MultiReader(strings.NewReader(raw), iotest.ErrReader(errNetwork))
		req, err := httpwire.ReadRequest(bufio.NewReaderSize(r, 16), httpwire.Limits{})
		require.NoError(t, err)
		_, err = io.ReadAll(req.Body)
		require.ErrorIs(t, err, errNetwork, "%q", raw)
		_, err2 := req.Body.Read(make([]byte, 1))
		require.Equal(t, err, err2, "sticky")
	}
}

func TestReadRequestPipelined(t *testing.T) {
	raw := dotnetRequest + chunkedRequest + "GET /svc?wsdl HTTP/1.1\r\nHost: a\r\n\r\n" + axisRequest
	br := bufio.NewReader(strings.NewReader(raw))
	want := []struct{ target, body string }{
		{"/Calc/Service.asmx", "<a/>"},
		{"/ws", "Wikipedia in\r\n\r\nchunks."},
		{"/svc?wsdl", ""},
		{"/axis/services/EchoService", "<soap:Env/>"},
	}
	for _, w := range want {
		req, err := httpwire.ReadRequest(br, httpwire.Limits{})
		require.NoError(t, err)
		require.Equal(t, w.target, req.Target)
		body, err := io.ReadAll(req.Body)
		require.NoError(t, err)
		require.Equal(t, w.body, string(body))
	}
	_, err := httpwire.ReadRequest(br, httpwire.Limits{})
	require.Equal(t, io.EOF, err)
}

func TestReadRequestLimits(t *testing.T) {
	// A head of exactly n bytes: "GET / HTTP/1.1\r\n" (16) + "X: <pad>\r\n" + "\r\n" (2).
	head := func(n int) string {
		return "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", n-16-5-2) + "\r\n\r\n"
	}
	require.Len(t, head(100), 100)
	fields := func(n int) string {
		return "GET / HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", n) + "\r\n"
	}
	for _, tc := range []struct {
		name string
		raw  string
		lim  httpwire.Limits
		ok   bool
	}{
		{"bytes at limit", head(100), httpwire.Limits{MaxHeaderBytes: 100}, true},
		{"bytes over limit", head(101), httpwire.Limits{MaxHeaderBytes: 100}, false},
		{"leading empty lines count", "\n" + head(99), httpwire.Limits{MaxHeaderBytes: 100}, true},
		{"leading empty lines over", "\r\n" + head(99), httpwire.Limits{MaxHeaderBytes: 100}, false},
		{"endless empty lines", strings.Repeat("\r\n", 1000), httpwire.Limits{MaxHeaderBytes: 100}, false},
		{"default bytes at limit", head(64 << 10), httpwire.Limits{}, true},
		{"default bytes over limit", head(64<<10 + 1), httpwire.Limits{}, false},
		{"negative means default", head(64<<10 + 1), httpwire.Limits{MaxHeaderBytes: -1}, false},
		{"endless line", "GET /" + strings.Repeat("a", 1<<20), httpwire.Limits{}, false},
		{"fields at limit", fields(10), httpwire.Limits{MaxHeaderFields: 10}, true},
		{"fields over limit", fields(11), httpwire.Limits{MaxHeaderFields: 10}, false},
		{"default fields at limit", fields(256), httpwire.Limits{}, true},
		{"default fields over limit", fields(257), httpwire.Limits{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readRequest(tc.raw, tc.lim)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, httpwire.ErrHeaderTooLarge)
			}
		})
	}
}

func TestReadRequestTrailerLimits(t *testing.T) {
	const chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"
	lim := httpwire.Limits{MaxHeaderBytes: 200, MaxHeaderFields: 3}
	for _, tc := range []struct {
		name    string
		trailer string
		ok      bool
	}{
		{"fields at limit", strings.Repeat("X: y\r\n", 3), true},
		{"fields over limit", strings.Repeat("X: y\r\n", 4), false},
		{"bytes at limit", "X: " + strings.Repeat("a", 200-2-5) + "\r\n", true},
		{"bytes over limit", "X: " + strings.Repeat("a", 200-2-5+1) + "\r\n", false},
		{"long line beyond buffer", "X: " + strings.Repeat("a", 1000) + "\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(chunked+tc.trailer+"\r\n"), 16)
			req, err := httpwire.ReadRequest(br, lim)
			require.NoError(t, err)
			_, err = io.ReadAll(req.Body)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, httpwire.ErrHeaderTooLarge)
			}
		})
	}
}

// TestHeadRoundTrip parses each valid request, keeps its end-to-end fields, writes the
// head again and parses it: the fields must come back byte-exact and in order.
func TestHeadRoundTrip(t *testing.T) {
	for _, tc := range validRequests {
		t.Run(tc.name, func(t *testing.T) {
			req, _, err := readRequest(tc.raw, httpwire.Limits{})
			require.NoError(t, err)
			fwd := httpwire.EndToEnd(req.Header)
			wire := httpwire.AppendRequestHead(nil, req.Method, req.Target, req.ProtoMinor, fwd)
			again, err := httpwire.ReadRequest(bufio.NewReader(strings.NewReader(string(wire))), httpwire.Limits{})
			require.NoError(t, err)
			require.Equal(t, req.Method, again.Method)
			require.Equal(t, req.Target, again.Target)
			require.Equal(t, req.ProtoMinor, again.ProtoMinor)
			require.Equal(t, fwd, again.Header)
			for _, f := range again.Header {
				require.False(t, httpwire.IsHopByHop(f.Name), f.Name)
			}
		})
	}
}
