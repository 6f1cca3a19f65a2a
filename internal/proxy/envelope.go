package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/soapgw/soapgw/internal/httpwire"
)

// The envelope is the head of every tunnel message: what the far gateway needs to rebuild
// the HTTP message byte for byte. The body follows it unchanged (de-chunked), up to the
// end of the tunnel message. Layout:
//
//	uvarint headLen | head (headLen bytes) | body ...
//
//	head := version=1 | kind | fields by kind (strings are uvarint length + bytes)
//	kind 'Q' request:  exchangeID upstream method target protoMinor flags [contentLength] fieldCount {name value}
//	kind 'R' response: status(uint16) reason protoMinor flags [contentLength] fieldCount {name value}
//	kind 'E' error:    status(uint16) cause message
//
// flags bit 0: the body length is known (contentLength follows); bit 1: the client asked
// for 100-continue. Header fields are the end-to-end fields in their original order and
// casing; hop-by-hop ones never travel.
const envelopeVersion = 1

const (
	kindRequest  = 'Q'
	kindResponse = 'R'
	kindError    = 'E'

	flagLengthKnown    = 1 << 0
	flagExpectContinue = 1 << 1
)

// errBadEnvelope marks a head that does not parse: a bug or a version mismatch.
var errBadEnvelope = errors.New("soapgw: malformed tunnel envelope")

// requestHead is what the edge tells the origin about a request.
type requestHead struct {
	ExchangeID    string
	Upstream      string
	Method        string
	Target        string
	ProtoMinor    int
	ContentLength int64 // -1: unknown (the client sent chunked)
	Expect        bool
	Header        httpwire.Header
}

// responseHead is what the origin tells the edge about a response.
type responseHead struct {
	Status        int
	Reason        string
	ProtoMinor    int
	ContentLength int64 // -1: unknown (chunked or close-delimited upstream)
	Header        httpwire.Header
}

// gatewayError is an error the origin reports instead of a response; the edge renders it
// as a SOAP Fault in the client's SOAP version.
type gatewayError struct {
	Status  int
	Cause   string // stable, low-cardinality cause used in metrics and X-Soapgw-Error
	Message string // human-readable, names the cause
}

func (e *gatewayError) Error() string { return e.Message }

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendFields(b []byte, h httpwire.Header) []byte {
	b = binary.AppendUvarint(b, uint64(len(h)))
	for _, f := range h {
		b = appendString(b, f.Name)
		b = appendString(b, f.Value)
	}
	return b
}

func appendLength(b []byte, flags byte, n int64) []byte {
	if n >= 0 {
		flags |= flagLengthKnown
	}
	b = append(b, flags)
	if n >= 0 {
		b = binary.AppendUvarint(b, uint64(n))
	}
	return b
}

// maxLenPrefix is the room reserved in front of a head for its uvarint length, so the
// head is encoded once, in place, and the prefix is written when its length is known.
const maxLenPrefix = binary.MaxVarintLen32

// reserveHead appends the room for the length prefix and returns where the head starts.
func reserveHead(b []byte) ([]byte, int) {
	start := len(b)
	return append(b, make([]byte, maxLenPrefix)...), start
}

// finishHead writes the length prefix of the head that starts at start and closes the
// gap left by the reservation, keeping whatever b held before start.
func finishHead(b []byte, start int) []byte {
	head := start + maxLenPrefix
	n := len(b) - head
	var tmp [maxLenPrefix]byte
	k := binary.PutUvarint(tmp[:], uint64(n))
	copy(b[start:], tmp[:k])
	copy(b[start+k:], b[head:])
	return b[:start+k+n]
}

func (h *requestHead) append(b []byte) []byte {
	b, start := reserveHead(b)
	b = append(b, envelopeVersion, kindRequest)
	b = appendString(b, h.ExchangeID)
	b = appendString(b, h.Upstream)
	b = appendString(b, h.Method)
	b = appendString(b, h.Target)
	b = append(b, byte(h.ProtoMinor))
	var fl byte
	if h.Expect {
		fl |= flagExpectContinue
	}
	b = appendLength(b, fl, h.ContentLength)
	b = appendFields(b, h.Header)
	return finishHead(b, start)
}

func (h *responseHead) append(b []byte) []byte {
	b, start := reserveHead(b)
	b = append(b, envelopeVersion, kindResponse)
	b = binary.BigEndian.AppendUint16(b, uint16(h.Status))
	b = appendString(b, h.Reason)
	b = append(b, byte(h.ProtoMinor))
	b = appendLength(b, 0, h.ContentLength)
	b = appendFields(b, h.Header)
	return finishHead(b, start)
}

func (e *gatewayError) append(b []byte) []byte {
	b, start := reserveHead(b)
	b = append(b, envelopeVersion, kindError)
	b = binary.BigEndian.AppendUint16(b, uint16(e.Status))
	b = appendString(b, e.Cause)
	b = appendString(b, e.Message)
	return finishHead(b, start)
}

// headReader parses a head; every read is bounds-checked. The head is converted to one
// string up front and every field is a substring of it: one allocation per message
// instead of two per header field.
type headReader struct {
	b   string
	err error
}

func (r *headReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errBadEnvelope, what)
	}
}

func (r *headReader) byte(what string) byte {
	if r.err != nil || len(r.b) < 1 {
		r.fail(what)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *headReader) uint16(what string) int {
	if r.err != nil || len(r.b) < 2 {
		r.fail(what)
		return 0
	}
	v := uint16(r.b[0])<<8 | uint16(r.b[1])
	r.b = r.b[2:]
	return int(v)
}

func (r *headReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	var v uint64
	for i := 0; i < len(r.b) && i < binary.MaxVarintLen64; i++ {
		c := r.b[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				break // overflows 64 bits
			}
			r.b = r.b[i+1:]
			return v | uint64(c)<<(7*i)
		}
		v |= uint64(c&0x7f) << (7 * i)
	}
	r.fail(what)
	return 0
}

func (r *headReader) string(what string) string {
	n := r.uvarint(what)
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail(what)
		return ""
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *headReader) length() (flags byte, n int64) {
	flags = r.byte("flags")
	n = -1
	if flags&flagLengthKnown != 0 {
		v := r.uvarint("content length")
		if v > 1<<62 {
			r.fail("content length")
		}
		n = int64(v)
	}
	return flags, n
}

func (r *headReader) fields() httpwire.Header {
	n := r.uvarint("field count")
	if r.err != nil || n > uint64(len(r.b))/2 {
		r.fail("field count")
		return nil
	}
	h := make(httpwire.Header, 0, n)
	for range n {
		name := r.string("field name")
		value := r.string("field value")
		if r.err != nil {
			return nil
		}
		h = append(h, httpwire.Field{Name: name, Value: value})
	}
	return h
}

// readHead reads the length-prefixed head from br, refusing heads over max bytes.
func readHead(br *bufio.Reader, max int) (kind byte, r *headReader, err error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return 0, nil, truncated(err, "length prefix")
	}
	if n < 2 || n > uint64(max) {
		return 0, nil, fmt.Errorf("%w: head of %d bytes (limit %d)", errBadEnvelope, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return 0, nil, truncated(err, "head")
	}
	if b[0] != envelopeVersion {
		return 0, nil, fmt.Errorf("%w: version %d, want %d", errBadEnvelope, b[0], envelopeVersion)
	}
	return b[1], &headReader{b: string(b[2:])}, nil
}

// truncated classifies an error met while reading a head. A message that ends early or
// an impossible length is a malformed envelope; any other error (stream reset, checksum,
// timeout) is kept as it is so callers can still tell retryable and timeout errors apart.
func truncated(err error, where string) error {
	// Compared with ==, not errors.Is: a clean end of the message is io.EOF itself, while
	// a session that died wraps io.EOF in its cause and must stay a tunnel error.
	switch {
	case err == io.EOF && where == "length prefix":
		return fmt.Errorf("%w: empty message", errBadEnvelope)
	case err == io.EOF, err == io.ErrUnexpectedEOF:
		return fmt.Errorf("%w: message ends inside its %s", errBadEnvelope, where)
	case err == errOverflow:
		return fmt.Errorf("%w: %s overflows", errBadEnvelope, where)
	}
	return err
}

// errOverflow is what encoding/binary returns for a uvarint over 64 bits; it exports no
// sentinel, so the value is captured once.
var errOverflow = func() error {
	_, err := binary.ReadUvarint(bytes.NewReader(bytes.Repeat([]byte{0xff}, 11)))
	return err
}()

func parseRequestHead(kind byte, r *headReader) (*requestHead, error) {
	if kind != kindRequest {
		return nil, fmt.Errorf("%w: kind %q where a request was expected", errBadEnvelope, kind)
	}
	h := &requestHead{}
	h.ExchangeID = r.string("exchange id")
	h.Upstream = r.string("upstream")
	h.Method = r.string("method")
	h.Target = r.string("target")
	h.ProtoMinor = int(r.byte("proto"))
	var fl byte
	fl, h.ContentLength = r.length()
	h.Expect = fl&flagExpectContinue != 0
	h.Header = r.fields()
	if r.err == nil && (h.Method == "" || h.Target == "") {
		r.fail("empty method or target")
	}
	return h, r.err
}

// parseResponseHead returns either a response head or a gateway error from the origin.
func parseResponseHead(kind byte, r *headReader) (*responseHead, *gatewayError, error) {
	switch kind {
	case kindResponse:
		h := &responseHead{}
		h.Status = r.uint16("status")
		h.Reason = r.string("reason")
		h.ProtoMinor = int(r.byte("proto"))
		_, h.ContentLength = r.length()
		h.Header = r.fields()
		if r.err == nil && (h.Status < 100 || h.Status > 999) {
			r.fail("status")
		}
		return h, nil, r.err
	case kindError:
		e := &gatewayError{}
		e.Status = r.uint16("status")
		e.Cause = r.string("cause")
		e.Message = r.string("message")
		if r.err == nil && (e.Status < 400 || e.Status > 599) {
			r.fail("error status")
		}
		return nil, e, r.err
	}
	return nil, nil, fmt.Errorf("%w: kind %q where a response was expected", errBadEnvelope, kind)
}
