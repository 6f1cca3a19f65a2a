package httpwire

import (
	"bufio"
	"io"
	"strings"
)

// Request is an HTTP/1.x request head as received, plus its decoded body.
type Request struct {
	Method     string // byte-exact (methods are case-sensitive)
	Target     string // request-target, byte-exact
	ProtoMajor int    // always 1
	ProtoMinor int    // 0 or 1
	// Header holds every field as received, in order, hop-by-hop ones included; use
	// [EndToEnd] for the fields to forward.
	Header Header
	// ContentLength is the length of the body: 0 when the request has no body, -1 when
	// unknown (chunked).
	ContentLength int64
	Chunked       bool // the body is chunked (Transfer-Encoding: chunked)
	// ExpectContinue reports "Expect: 100-continue" on an HTTP/1.1 request: the client
	// may wait for a "100 Continue" interim response before it sends the body.
	ExpectContinue bool
	// Close reports that the connection must be closed after this exchange: HTTP/1.0
	// without "Connection: keep-alive", or "Connection: close".
	Close bool
	// Body yields the decoded (de-chunked) body and then io.EOF; it is empty when the
	// request has none. It reads from the connection's bufio.Reader: read it to io.EOF
	// before the next ReadRequest on the same reader. After an error, every Read returns
	// that error.
	Body io.Reader
}

type requestAlloc struct {
	req  Request
	body body
}

// ReadRequest reads one request head from br and returns the request with a Body that
// reads the rest of the message from br. A connection closed cleanly before the first
// byte of a request yields plain io.EOF. Protocol violations yield a *[ProtocolError].
func ReadRequest(br *bufio.Reader, lim Limits) (*Request, error) {
	head, nfields, err := readHead(br, lim, "request")
	if err != nil {
		return nil, err
	}
	line, rest, err := cutLine(head)
	if err != nil {
		return nil, err
	}
	a := &requestAlloc{} // one allocation for the Request and its body reader
	r := &a.req
	if r.Method, r.Target, r.ProtoMinor, err = parseRequestLine(line); err != nil {
		return nil, err
	}
	r.ProtoMajor = 1
	if r.Header, err = parseFields(rest, nfields, false); err != nil {
		return nil, err
	}
	f, err := scanFraming(r.Header)
	if err != nil {
		return nil, err
	}
	if err := checkFraming(&f, r.ProtoMinor); err != nil {
		return nil, err
	}
	if f.hosts > 1 {
		// RFC 9112 §3.2: several Host fields let two parsers route one request differently.
		return nil, protoErr(ErrMalformed, "more than one Host field")
	}
	r.Chunked = f.chunked
	r.ExpectContinue = f.expectContinue && r.ProtoMinor == 1
	r.Close = f.connClose || r.ProtoMinor == 0 && !f.connKeepAlive
	a.body = body{br: br, lim: lim}
	switch {
	case f.chunked:
		r.ContentLength = -1
		a.body.mode = bodyChunked
	case f.contentLength > 0:
		r.ContentLength = f.contentLength
		a.body.mode, a.body.n = bodyLength, f.contentLength
	default:
		// RFC 9112 §6.3: a request with neither Content-Length nor Transfer-Encoding
		// has no body.
		r.ContentLength = 0
		a.body.mode = bodyEmpty
	}
	r.Body = &a.body
	return r, nil
}

// parseRequestLine parses `method SP request-target SP HTTP-version` (RFC 9112 §3):
// single spaces, a token method, a non-empty target without whitespace or control
// characters. Bytes >= 0x80 are allowed in the target: legacy clients send raw UTF-8,
// and they cannot confuse framing.
func parseRequestLine(line string) (method, target string, minor int, err error) {
	method, rest, ok := strings.Cut(line, " ")
	if !ok {
		return "", "", 0, protoErr(ErrMalformed, "bad request line "+quote(line))
	}
	target, version, ok := strings.Cut(rest, " ")
	if !ok {
		return "", "", 0, protoErr(ErrMalformed, "bad request line "+quote(line))
	}
	if !isToken(method) {
		return "", "", 0, protoErr(ErrMalformed, "invalid method "+quote(method))
	}
	if target == "" {
		return "", "", 0, protoErr(ErrMalformed, "empty request target")
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c == 0x7f {
			return "", "", 0, protoErr(ErrMalformed, "invalid byte in request target "+quote(target))
		}
	}
	if minor, err = parseVersion(version); err != nil {
		return "", "", 0, err
	}
	return method, target, minor, nil
}

// TargetForm is the form of a request-target (RFC 9112 §3.2).
type TargetForm int

// The four request-target forms.
const (
	OriginForm    TargetForm = iota // "/path?query": what a client sends to a server
	AbsoluteForm                    // "http://host/path": what a client sends to a forward proxy
	AuthorityForm                   // "host:port": CONNECT's target
	AsteriskForm                    // "*": OPTIONS for the whole server
)

func (f TargetForm) String() string {
	return [...]string{"origin-form", "absolute-form", "authority-form", "asterisk-form"}[f]
}

// Form classifies the request's target.
func (r *Request) Form() TargetForm {
	switch t := r.Target; {
	case strings.HasPrefix(t, "/"):
		return OriginForm
	case t == "*":
		return AsteriskForm
	case strings.Contains(t, "://"):
		return AbsoluteForm
	}
	return AuthorityForm
}
