package httpwire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Limits bound the resources a peer can make the parser spend on one message head.
// The zero value means the defaults.
type Limits struct {
	// MaxHeaderBytes bounds the bytes of a head as read from the connection: leading empty
	// lines, start line, field lines and the empty line that ends the head, terminators
	// included. It also bounds the trailer section of a chunked body. Default 64 KiB.
	MaxHeaderBytes int
	// MaxHeaderFields bounds the number of field lines (obs-fold continuation lines
	// included) of a head, and of a trailer section. Default 256.
	MaxHeaderFields int
}

// Default limits, used for zero or negative [Limits] fields.
const (
	DefaultMaxHeaderBytes  = 64 << 10
	DefaultMaxHeaderFields = 256
)

func (l Limits) maxHeaderBytes() int {
	if l.MaxHeaderBytes <= 0 {
		return DefaultMaxHeaderBytes
	}
	return l.MaxHeaderBytes
}

func (l Limits) maxHeaderFields() int {
	if l.MaxHeaderFields <= 0 {
		return DefaultMaxHeaderFields
	}
	return l.MaxHeaderFields
}

// headBufs recycles the buffers that collect a head before it becomes one string.
var headBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

const maxPooledHead = 64 << 10

// readHead reads one message head from br. It skips leading empty lines and returns the
// start line and the field lines as one string, every line still terminated by "\n" or
// "\r\n", without the empty line that ends the head, plus the number of field lines.
// Parsing then slices that string, so every Field of a message shares one allocation.
//
// A clean io.EOF before any line other than empty ones is returned as is: the peer
// closed an idle keep-alive connection. EOF later is a malformed message wrapping
// io.ErrUnexpectedEOF. Other read errors are wrapped with context.
func readHead(br *bufio.Reader, lim Limits, what string) (head string, fields int, err error) {
	maxBytes, maxFields := lim.maxHeaderBytes(), lim.maxHeaderFields()
	bp := headBufs.Get().(*[]byte)
	buf := (*bp)[:0]
	defer func() {
		if cap(buf) <= maxPooledHead {
			*bp = buf[:0]
			headBufs.Put(bp)
		}
	}()
	total := 0     // bytes consumed from br
	lineStart := 0 // offset in buf of the line being read
	lines := 0     // complete non-empty lines in buf
	for {
		frag, rerr := br.ReadSlice('\n')
		total += len(frag)
		if total > maxBytes {
			return "", 0, protoErr(ErrHeaderTooLarge, fmt.Sprintf("%s head exceeds %d bytes", what, maxBytes))
		}
		buf = append(buf, frag...)
		switch {
		case rerr == nil:
		case errors.Is(rerr, bufio.ErrBufferFull):
			continue // the line is longer than br's buffer: keep collecting it
		case errors.Is(rerr, io.EOF):
			if lines == 0 && len(buf) == lineStart {
				return "", 0, io.EOF
			}
			return "", 0, unexpectedEOFInHead()
		default:
			return "", 0, fmt.Errorf("httpwire: reading %s head: %w", what, rerr)
		}
		// buf[lineStart:] is one complete line, ending in '\n'.
		if n := len(buf) - lineStart; n == 1 || n == 2 && buf[lineStart] == '\r' {
			if lines == 0 {
				// RFC 9112 §2.2: ignore empty lines before the start line.
				buf = buf[:lineStart]
				continue
			}
			return string(buf[:lineStart]), lines - 1, nil
		}
		lines++
		if lines-1 > maxFields {
			return "", 0, protoErr(ErrHeaderTooLarge, fmt.Sprintf("%s head has more than %d field lines", what, maxFields))
		}
		lineStart = len(buf)
	}
}

// cutLine splits the first line off s, which must end with '\n'. The line is returned
// without its terminator ("\n" or "\r\n"); a CR anywhere else in it is an error, since
// some implementations treat a bare CR as a line break (RFC 9112 §2.2).
func cutLine(s string) (line, rest string, err error) {
	i := strings.IndexByte(s, '\n')
	line, rest = s[:i], s[i+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if strings.IndexByte(line, '\r') >= 0 {
		return "", "", protoErr(ErrMalformed, "bare CR in "+quote(line))
	}
	return line, rest, nil
}

// parseVersion parses "HTTP/1.0" or "HTTP/1.1" and returns the minor version.
// HTTP-name is case-sensitive (RFC 9112 §2.3).
func parseVersion(v string) (minor int, err error) {
	if len(v) != 8 || v[:5] != "HTTP/" || v[6] != '.' || !isDigit(v[5]) || !isDigit(v[7]) {
		return 0, protoErr(ErrMalformed, "bad HTTP version "+quote(v))
	}
	if v[5] != '1' || v[7] > '1' {
		return 0, protoErr(ErrUnsupportedVersion, quote(v))
	}
	return int(v[7] - '0'), nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// checkFieldLine validates a field line (RFC 9112 §5): a token name, a colon with no
// whitespace before it, and a value free of NUL (CR and LF cannot occur: the caller has
// split lines and rejected bare CRs). It returns the colon index. Other control
// characters are let through, as legacy stacks emit them and they cannot split a message.
func checkFieldLine(line string) (colon int, err error) {
	colon = strings.IndexByte(line, ':')
	if colon < 0 {
		return 0, protoErr(ErrMalformed, "field line without colon "+quote(line))
	}
	if !isToken(line[:colon]) {
		return 0, protoErr(ErrMalformed, "invalid field name "+quote(line[:colon]))
	}
	if strings.IndexByte(line[colon+1:], 0) >= 0 {
		return 0, protoErr(ErrMalformed, "NUL in value of field "+quote(line[:colon]))
	}
	return colon, nil
}

// parseFields parses the field lines in s (each terminated by "\n" or "\r\n"); n is
// their count. With fold, an obs-fold continuation line is appended to the previous
// value with a single SP (RFC 9112 §5.2, allowed in responses); otherwise it is an error.
func parseFields(s string, n int, fold bool) (Header, error) {
	h := make(Header, 0, n)
	for s != "" {
		line, rest, err := cutLine(s)
		if err != nil {
			return nil, err
		}
		s = rest
		if isOWS(line[0]) { // cutLine never returns an empty line here: readHead ended the head there
			if !fold || len(h) == 0 {
				return nil, protoErr(ErrMalformed, "obs-fold line folding")
			}
			if err := checkFoldLine(line); err != nil {
				return nil, err
			}
			if cont := trimOWS(line); cont != "" {
				if f := &h[len(h)-1]; f.Value == "" {
					f.Value = cont
				} else {
					f.Value = f.Value + " " + cont
				}
			}
			continue
		}
		colon, err := checkFieldLine(line)
		if err != nil {
			return nil, err
		}
		h = append(h, Field{Name: line[:colon], Value: trimOWS(line[colon+1:])})
	}
	return h, nil
}

func checkFoldLine(line string) error {
	if strings.IndexByte(line, 0) >= 0 {
		return protoErr(ErrMalformed, "NUL in obs-fold line")
	}
	return nil
}

// maxLength is the exclusive upper bound of a Content-Length or chunk size: 2^62 keeps
// every sum and product of lengths in int64 and is far beyond any real message.
const maxLength = 1 << 62

// parseContentLength parses 1*DIGIT, with no sign, no spaces and no list syntax.
func parseContentLength(v string) (int64, error) {
	if v == "" {
		return 0, protoErr(ErrBadContentLength, "empty value")
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !isDigit(c) {
			return 0, protoErr(ErrBadContentLength, "not a decimal number: "+quote(v))
		}
		n = n*10 + int64(c-'0')
		if n >= maxLength {
			return 0, protoErr(ErrBadContentLength, "too large: "+quote(v))
		}
	}
	return n, nil
}

// framing is what the fields of a head say about the message's framing and connection.
type framing struct {
	contentLength  int64 // -1: no Content-Length field
	hasTE          bool  // a Transfer-Encoding field is present
	teCodings      int   // number of transfer codings listed
	teChunked      int   // how many of them are "chunked"
	teLastChunked  bool  // the last coding is "chunked"
	chunked        bool  // set by checkFraming: Transfer-Encoding is exactly "chunked"
	connClose      bool  // Connection lists "close"
	connKeepAlive  bool  // Connection lists "keep-alive"
	expectContinue bool  // Expect lists "100-continue"
	hosts          int   // number of Host fields
}

// scanFraming inspects, in one pass, the fields that decide framing and persistence.
func scanFraming(h Header) (framing, error) {
	f := framing{contentLength: -1}
	for i := range h {
		name, v := h[i].Name, h[i].Value
		switch len(name) {
		case 4:
			if equalFold(name, "Host") {
				f.hosts++
			}
		case 6:
			if equalFold(name, "Expect") && listHas(v, "100-continue") {
				f.expectContinue = true
			}
		case 10:
			if equalFold(name, "Connection") {
				f.connClose = f.connClose || listHas(v, "close")
				f.connKeepAlive = f.connKeepAlive || listHas(v, "keep-alive")
			}
		case 14:
			if equalFold(name, "Content-Length") {
				n, err := parseContentLength(v)
				if err != nil {
					return f, err
				}
				if f.contentLength >= 0 && n != f.contentLength {
					return f, protoErr(ErrBadContentLength, "conflicting Content-Length fields")
				}
				f.contentLength = n
			}
		case 17:
			if equalFold(name, "Transfer-Encoding") {
				f.hasTE = true
				for rest := v; rest != ""; {
					var elem string
					if j := strings.IndexByte(rest, ','); j >= 0 {
						elem, rest = rest[:j], rest[j+1:]
					} else {
						elem, rest = rest, ""
					}
					if elem = trimOWS(elem); elem == "" {
						continue // RFC 9110 §5.6.1: empty list elements are ignored
					}
					f.teCodings++
					f.teLastChunked = equalFold(elem, "chunked")
					if f.teLastChunked {
						f.teChunked++
					}
				}
			}
		}
	}
	return f, nil
}

// checkFraming applies the anti-smuggling rules shared by requests and responses
// (RFC 9112 §6.1, §6.3) and sets f.chunked: no Transfer-Encoding in HTTP/1.0, never both
// Transfer-Encoding and Content-Length, and the only supported coding is one "chunked".
// The smuggling checks come first so that they decide the error kind.
func checkFraming(f *framing, minor int) error {
	switch {
	case !f.hasTE:
		return nil
	case minor == 0:
		return protoErr(ErrMalformed, "Transfer-Encoding in an HTTP/1.0 message")
	case f.contentLength >= 0:
		return protoErr(ErrMalformed, "both Transfer-Encoding and Content-Length")
	case f.teCodings == 0:
		return protoErr(ErrMalformed, "empty Transfer-Encoding")
	case f.teChunked > 1:
		return protoErr(ErrMalformed, "chunked applied more than once")
	case f.teCodings > 1 || !f.teLastChunked:
		return protoErr(ErrUnsupportedTransferCoding, "only a single \"chunked\" coding is supported")
	}
	f.chunked = true
	return nil
}
