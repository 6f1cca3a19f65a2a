package httpwire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

type bodyMode uint8

const (
	bodyEmpty    bodyMode = iota // no body: io.EOF at once
	bodyLength                   // exactly n bytes (Content-Length)
	bodyChunked                  // chunked transfer coding
	bodyUntilEOF                 // close-delimited (responses only)
)

type chunkState uint8

const (
	chunkSize    chunkState = iota // expecting a chunk-size line
	chunkData                      // n bytes of chunk data left
	chunkDataEnd                   // expecting the CRLF after chunk data
	chunkTrailer                   // expecting the trailer section
	chunkDone                      // the body is complete
)

const (
	// maxChunkLine bounds a chunk-size line with its extensions.
	maxChunkLine = 4096
	// maxChunkOverhead bounds the non-data bytes (chunk extensions, tiny chunks) a peer
	// can make us read beyond 16 bytes per chunk plus the data itself; the same defence
	// net/http adopted for CVE-2023-39326.
	maxChunkOverhead = 16 << 10
)

// body is the Body of a Request or Response. It reads exactly the body's bytes from the
// connection's bufio.Reader, no more, so that the next message on a persistent
// connection starts where it should. The first error is sticky.
type body struct {
	br     *bufio.Reader
	mode   bodyMode
	state  chunkState
	n      int64 // bytes left: of the body (bodyLength) or of the current chunk
	excess int64 // chunk overhead not yet paid for by data
	lim    Limits
	err    error
	line   []byte // collects chunk lines longer than br's buffer (rare)
}

func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	var (
		n   int
		err error
	)
	switch b.mode {
	case bodyEmpty:
		err = io.EOF
	case bodyLength:
		n, err = b.readLength(p)
	case bodyChunked:
		n, err = b.readChunked(p)
	case bodyUntilEOF:
		n, err = b.br.Read(p)
		if err != nil && !errors.Is(err, io.EOF) {
			err = fmt.Errorf("httpwire: reading body: %w", err)
		}
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

func (b *body) readLength(p []byte) (int, error) {
	if b.n == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.br.Read(p)
	b.n -= int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return n, truncated(fmt.Sprintf("connection closed with %d bytes of Content-Length left", b.n))
		}
		return n, fmt.Errorf("httpwire: reading body: %w", err)
	}
	return n, nil
}

func (b *body) readChunked(p []byte) (int, error) {
	for {
		switch b.state {
		case chunkSize:
			if err := b.readChunkSize(); err != nil {
				return 0, err
			}
		case chunkData:
			if int64(len(p)) > b.n {
				p = p[:b.n]
			}
			n, err := b.br.Read(p)
			b.n -= int64(n)
			if b.n == 0 {
				b.state = chunkDataEnd
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					return n, truncated("connection closed in chunk data")
				}
				return n, fmt.Errorf("httpwire: reading chunked body: %w", err)
			}
			return n, nil
		case chunkDataEnd:
			if err := b.readCRLF(); err != nil {
				return 0, err
			}
			b.state = chunkSize
		case chunkTrailer:
			if err := b.readTrailer(); err != nil {
				return 0, err
			}
			b.state = chunkDone
		default: // chunkDone
			return 0, io.EOF
		}
	}
}

// readCRLF consumes the CRLF that must follow chunk data. Unlike the head, chunked
// framing requires CRLF: lenient line endings inside bodies are a known smuggling vector
// (CVE-2025-22871).
func (b *body) readCRLF() error {
	for _, want := range [2]byte{'\r', '\n'} {
		c, err := b.br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return truncated("connection closed after chunk data")
			}
			return fmt.Errorf("httpwire: reading chunked body: %w", err)
		}
		if c != want {
			return protoErr(ErrMalformed, "chunk data not followed by CRLF")
		}
	}
	return nil
}

func (b *body) readChunkSize() error {
	line, err := b.readLine(maxChunkLine, "chunk-size line too long")
	if err != nil {
		return err
	}
	size, err := parseChunkSize(line)
	if err != nil {
		return err
	}
	// Charge the line to the overhead account; every chunk may use 16 bytes plus twice
	// its data size for free.
	b.excess += int64(len(line)) + 2
	b.excess = max(0, b.excess-16-size)
	b.excess = max(0, b.excess-size)
	if b.excess > maxChunkOverhead {
		return protoErr(ErrMalformed, "too much chunk overhead (extensions or tiny chunks)")
	}
	b.n = size
	if size == 0 {
		b.state = chunkTrailer
	} else {
		b.state = chunkData
	}
	return nil
}

// readTrailer reads the trailer section after the last chunk: field lines checked for
// syntax and discarded, up to the empty line.
func (b *body) readTrailer() error {
	maxBytes, maxFields := b.lim.maxHeaderBytes(), b.lim.maxHeaderFields()
	total, fields := 0, 0
	for {
		line, err := b.readLine(maxBytes-total, "trailer section too large")
		if err != nil {
			return err
		}
		total += len(line) + 2
		if len(line) == 0 {
			return nil
		}
		if fields++; fields > maxFields {
			return protoErr(ErrHeaderTooLarge, fmt.Sprintf("trailer section has more than %d fields", maxFields))
		}
		if isOWS(line[0]) {
			return protoErr(ErrMalformed, "obs-fold in trailer section")
		}
		if _, err := checkFieldLine(string(line)); err != nil { // trailers are rare: the copy is fine
			return err
		}
	}
}

// readLine reads a CRLF-terminated line of at most max bytes (terminator included) and
// returns it without the CRLF. The slice is valid until the next read.
func (b *body) readLine(max int, tooLong string) ([]byte, error) {
	line, err := b.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		b.line = append(b.line[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) && len(b.line) <= max {
			line, err = b.br.ReadSlice('\n')
			b.line = append(b.line, line...)
		}
		line = b.line
	}
	if len(line) > max {
		kind := ErrMalformed
		if b.state == chunkTrailer {
			kind = ErrHeaderTooLarge
		}
		return nil, protoErr(kind, tooLong)
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, truncated("connection closed before the end of the chunked body")
		}
		return nil, fmt.Errorf("httpwire: reading chunked body: %w", err)
	}
	n := len(line)
	if n < 2 || line[n-2] != '\r' {
		return nil, protoErr(ErrMalformed, "chunked body line not terminated by CRLF")
	}
	line = line[:n-2]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, protoErr(ErrMalformed, "bare CR in chunked body line")
	}
	return line, nil
}

// parseChunkSize parses `chunk-size [ BWS ";" chunk-ext ]` (RFC 9112 §7.1). Extensions
// are ignored but must not contain control characters other than HTAB.
func parseChunkSize(line []byte) (int64, error) {
	var n uint64
	i := 0
	for ; i < len(line); i++ {
		d, ok := unhex(line[i])
		if !ok {
			break
		}
		if i == 16 {
			return 0, protoErr(ErrMalformed, "chunk size longer than 16 hex digits")
		}
		n = n<<4 | uint64(d)
	}
	if i == 0 {
		return 0, protoErr(ErrMalformed, "missing chunk size in "+quote(line))
	}
	if n >= maxLength {
		return 0, protoErr(ErrMalformed, "chunk size too large")
	}
	ext := trimOWS(line[i:]) // BWS before ";", and tolerated at the end
	if len(ext) > 0 && ext[0] != ';' {
		return 0, protoErr(ErrMalformed, "invalid chunk-size line "+quote(line))
	}
	for _, c := range ext {
		if c < ' ' && c != '\t' || c == 0x7f {
			return 0, protoErr(ErrMalformed, "control character in chunk extension")
		}
	}
	return int64(n), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
