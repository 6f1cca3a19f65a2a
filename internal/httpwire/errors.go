package httpwire

import (
	"io"
	"strconv"
)

// ErrorKind classifies a [ProtocolError]. Each kind is also a sentinel error, so callers
// test for a class with errors.Is(err, httpwire.ErrHeaderTooLarge) or switch on
// [ProtocolError.Kind] after errors.As. Kinds are constants: unlike errors.New sentinels
// they cannot be reassigned by accident.
type ErrorKind uint8

// The kinds of protocol error. The comments give the status an edge would typically answer.
const (
	// ErrMalformed: the message violates the HTTP/1.1 syntax or a framing rule meant
	// to prevent request smuggling (400 Bad Request).
	ErrMalformed ErrorKind = iota + 1
	// ErrHeaderTooLarge: the head, a trailer section or the number of field lines
	// exceeds [Limits] (431 Request Header Fields Too Large).
	ErrHeaderTooLarge
	// ErrUnsupportedVersion: a well-formed HTTP version other than 1.0 or 1.1
	// (505 HTTP Version Not Supported).
	ErrUnsupportedVersion
	// ErrBadContentLength: an invalid Content-Length value, or several that disagree (400).
	ErrBadContentLength
	// ErrUnsupportedTransferCoding: Transfer-Encoding other than a single "chunked"
	// (501 Not Implemented).
	ErrUnsupportedTransferCoding
	// ErrBodyTruncated: the connection ended before the end of the body (before
	// Content-Length bytes, or before the last chunk and its trailer section). Such
	// errors also match io.ErrUnexpectedEOF.
	ErrBodyTruncated
)

var kindText = [...]string{
	ErrMalformed:                 "malformed message",
	ErrHeaderTooLarge:            "header too large",
	ErrUnsupportedVersion:        "unsupported HTTP version",
	ErrBadContentLength:          "bad Content-Length",
	ErrUnsupportedTransferCoding: "unsupported transfer coding",
	ErrBodyTruncated:             "body truncated",
}

// String returns a short human-readable name of the kind.
func (k ErrorKind) String() string {
	if int(k) < len(kindText) && kindText[k] != "" {
		return kindText[k]
	}
	return "ErrorKind(" + strconv.Itoa(int(k)) + ")"
}

// Error makes every kind usable as a sentinel error.
func (k ErrorKind) Error() string { return "httpwire: " + k.String() }

// ProtocolError is the error returned for any message that this package refuses to
// parse. It matches its Kind with errors.Is, and unwraps to its cause (for example
// io.ErrUnexpectedEOF when the peer closed the connection in the middle of a message).
type ProtocolError struct {
	Kind   ErrorKind
	Detail string // what exactly was wrong; never contains more than a short quote of the input
	Err    error  // underlying cause, or nil
}

func (e *ProtocolError) Error() string {
	s := "httpwire: " + e.Kind.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause, if any.
func (e *ProtocolError) Unwrap() error { return e.Err }

// Is reports whether target is the ErrorKind of e.
func (e *ProtocolError) Is(target error) bool {
	k, ok := target.(ErrorKind)
	return ok && k == e.Kind
}

func protoErr(kind ErrorKind, detail string) *ProtocolError {
	return &ProtocolError{Kind: kind, Detail: detail}
}

// unexpectedEOFInHead is the error for a peer that closes the connection after it
// started to send a head: malformed, wrapping io.ErrUnexpectedEOF.
func unexpectedEOFInHead() error {
	return &ProtocolError{Kind: ErrMalformed, Detail: "connection closed in the middle of the message head", Err: io.ErrUnexpectedEOF}
}

func truncated(detail string) error {
	return &ProtocolError{Kind: ErrBodyTruncated, Detail: detail, Err: io.ErrUnexpectedEOF}
}

// quote returns a short, printable quote of untrusted input for error details.
func quote[T ~string | ~[]byte](s T) string {
	const max = 40
	if len(s) > max {
		return strconv.Quote(string(s[:max])) + "..."
	}
	return strconv.Quote(string(s))
}
