package httpwire

import (
	"bufio"
	"io"
)

// Response is an HTTP/1.x response head as received, plus its decoded body.
type Response struct {
	ProtoMajor int // always 1
	ProtoMinor int // 0 or 1
	StatusCode int // 100-999
	Reason     string
	// Header holds every field as received, in order, hop-by-hop ones included.
	// obs-fold continuation lines are folded into the previous value with one SP.
	Header Header
	// ContentLength is the length of the body: 0 for a response without body (HEAD,
	// 1xx, 204, 304, 2xx to CONNECT) whatever its Content-Length field says, -1 when
	// unknown (chunked or close-delimited).
	ContentLength int64
	Chunked       bool // the body is chunked
	// Close reports that the connection cannot be reused after this response:
	// "Connection: close", HTTP/1.0 without "Connection: keep-alive", a close-delimited
	// body, 101 Switching Protocols or a 2xx answer to CONNECT.
	Close bool
	// Body yields the decoded body and then io.EOF; see [Request.Body].
	Body io.Reader
}

type responseAlloc struct {
	resp Response
	body body
}

// ReadResponse reads one response to a request with the given method (compared
// case-sensitively, as methods are). 1xx interim responses are returned as is, with an
// empty Body, so the caller can skip them and call ReadResponse again. HEAD responses,
// 1xx, 204 and 304 have no body. Without Content-Length or chunked, the body runs until
// EOF and Close is true.
//
// A connection closed cleanly before the first byte of the response yields plain
// io.EOF. Protocol violations yield a *[ProtocolError].
func ReadResponse(br *bufio.Reader, method string, lim Limits) (*Response, error) {
	head, nfields, err := readHead(br, lim, "response")
	if err != nil {
		return nil, err
	}
	line, rest, err := cutLine(head)
	if err != nil {
		return nil, err
	}
	a := &responseAlloc{}
	r := &a.resp
	if r.ProtoMinor, r.StatusCode, r.Reason, err = parseStatusLine(line); err != nil {
		return nil, err
	}
	r.ProtoMajor = 1
	if r.Header, err = parseFields(rest, nfields, true); err != nil {
		return nil, err
	}
	f, err := scanFraming(r.Header)
	if err != nil {
		return nil, err
	}
	// Checked even when the response has no body: a message that breaks these rules
	// says the peer's framing cannot be trusted (RFC 9112 §6.1).
	if err := checkFraming(&f, r.ProtoMinor); err != nil {
		return nil, err
	}
	r.Close = f.connClose || r.ProtoMinor == 0 && !f.connKeepAlive
	a.body = body{br: br, lim: lim}
	code := r.StatusCode
	connect2xx := method == "CONNECT" && code >= 200 && code < 300
	switch {
	case method == "HEAD" || code < 200 || code == 204 || code == 304 || connect2xx:
		// RFC 9112 §6.3 items 1 and 2.
		r.ContentLength = 0
		a.body.mode = bodyEmpty
		if code == 101 || connect2xx {
			r.Close = true // the connection now carries another protocol
		}
	case f.chunked:
		r.Chunked = true
		r.ContentLength = -1
		a.body.mode = bodyChunked
	case f.contentLength >= 0:
		r.ContentLength = f.contentLength
		a.body.mode, a.body.n = bodyLength, f.contentLength
	default:
		r.ContentLength = -1
		r.Close = true
		a.body.mode = bodyUntilEOF
	}
	r.Body = &a.body
	return r, nil
}

// parseStatusLine parses `HTTP-version SP 3DIGIT SP reason-phrase` (RFC 9112 §4), also
// accepting a missing SP and reason. The reason is kept byte-exact, spaces included; it
// may contain HTAB, SP, visible characters and obs-text.
func parseStatusLine(line string) (minor, code int, reason string, err error) {
	if len(line) < 12 || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return 0, 0, "", protoErr(ErrMalformed, "bad status line "+quote(line))
	}
	if minor, err = parseVersion(line[:8]); err != nil {
		return 0, 0, "", err
	}
	d := line[9:12]
	if !isDigit(d[0]) || !isDigit(d[1]) || !isDigit(d[2]) || d[0] == '0' {
		return 0, 0, "", protoErr(ErrMalformed, "bad status code "+quote(d))
	}
	code = int(d[0]-'0')*100 + int(d[1]-'0')*10 + int(d[2]-'0')
	if len(line) > 12 {
		reason = line[13:]
	}
	for i := 0; i < len(reason); i++ {
		if c := reason[i]; c < ' ' && c != '\t' || c == 0x7f {
			return 0, 0, "", protoErr(ErrMalformed, "control character in reason phrase")
		}
	}
	return minor, code, reason, nil
}
