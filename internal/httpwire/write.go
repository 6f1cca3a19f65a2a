package httpwire

import (
	"errors"
	"fmt"
	"io"
	"strconv"
)

// AppendRequestHead appends "METHOD SP target SP HTTP/1.x CRLF", one "Name: Value CRLF"
// per field in order, and the empty line that ends the head. Nothing is validated or
// escaped: pass values obtained from ReadRequest, or constants.
func AppendRequestHead(dst []byte, method, target string, protoMinor int, h Header) []byte {
	dst = append(dst, method...)
	dst = append(dst, ' ')
	dst = append(dst, target...)
	dst = append(dst, " HTTP/1."...)
	dst = strconv.AppendInt(dst, int64(protoMinor), 10)
	dst = append(dst, "\r\n"...)
	return appendFields(dst, h)
}

// AppendResponseHead appends "HTTP/1.x SP code SP reason CRLF", the fields and the empty
// line. The code is written with three digits (it must be within 0-999); the reason is
// written byte-exact, so an empty one gives "HTTP/1.1 200 \r\n". Nothing is validated.
func AppendResponseHead(dst []byte, protoMinor, code int, reason string, h Header) []byte {
	dst = append(dst, "HTTP/1."...)
	dst = strconv.AppendInt(dst, int64(protoMinor), 10)
	dst = append(dst, ' ')
	if 0 <= code && code <= 999 {
		dst = append(dst, byte('0'+code/100), byte('0'+code/10%10), byte('0'+code%10))
	} else {
		dst = strconv.AppendInt(dst, int64(code), 10)
	}
	dst = append(dst, ' ')
	dst = append(dst, reason...)
	dst = append(dst, "\r\n"...)
	return appendFields(dst, h)
}

// appendFields writes the fields as "Name: Value\r\n" ("Name:\r\n" for an empty value,
// so that no trailing whitespace is sent) and the final empty line.
func appendFields(dst []byte, h Header) []byte {
	for _, f := range h {
		dst = append(dst, f.Name...)
		dst = append(dst, ':')
		if f.Value != "" {
			dst = append(dst, ' ')
			dst = append(dst, f.Value...)
		}
		dst = append(dst, "\r\n"...)
	}
	return append(dst, "\r\n"...)
}

// ErrWriteAfterClose is returned by a chunked writer's Write after Close.
var ErrWriteAfterClose = errors.New("httpwire: write to closed chunked writer")

// NewChunkedWriter returns a writer of HTTP/1.1 chunked encoding onto w. Each non-empty
// Write becomes one chunk (zero-length writes are no-ops, since a zero-size chunk ends
// the body); Close writes the last chunk "0\r\n\r\n" with no trailer and does not close
// w. Each chunk costs three Writes on w, so w should be buffered.
func NewChunkedWriter(w io.Writer) io.WriteCloser {
	return &chunkedWriter{w: w}
}

type chunkedWriter struct {
	w      io.Writer
	closed bool
	buf    [18]byte // 16 hex digits + CRLF; also holds the CRLF after the data
}

func (cw *chunkedWriter) Write(p []byte) (int, error) {
	if cw.closed {
		return 0, ErrWriteAfterClose
	}
	if len(p) == 0 {
		return 0, nil
	}
	hdr := strconv.AppendUint(cw.buf[:0], uint64(len(p)), 16)
	hdr = append(hdr, '\r', '\n')
	if _, err := cw.w.Write(hdr); err != nil {
		return 0, fmt.Errorf("httpwire: writing chunk size: %w", err)
	}
	n, err := cw.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return n, fmt.Errorf("httpwire: writing chunk data: %w", err)
	}
	if _, err := cw.w.Write(append(cw.buf[:0], '\r', '\n')); err != nil {
		return n, fmt.Errorf("httpwire: writing chunk end: %w", err)
	}
	return n, nil
}

// Close writes the last chunk. Calling it again does nothing.
func (cw *chunkedWriter) Close() error {
	if cw.closed {
		return nil
	}
	cw.closed = true
	if _, err := cw.w.Write(append(cw.buf[:0], "0\r\n\r\n"...)); err != nil {
		return fmt.Errorf("httpwire: writing last chunk: %w", err)
	}
	return nil
}
