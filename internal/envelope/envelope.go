// Package envelope is the head of every tunnel message: what the far gateway needs to
// rebuild an HTTP message byte for byte. The edge writes a [Request] in front of the
// request body, the origin a [Response] (or an [Error]) in front of the response body.
//
// It is a leaf package so that both the proxy, which writes and reads heads, and the token
// codec, which compresses them field by field, share one definition of the format.
//
// Layout of a tunnel message:
//
//	uvarint headLen | head (headLen bytes) | body ...
//
//	head := version=1 | kind | fields by kind (strings are uvarint length + bytes)
//	kind 'Q' request:  exchangeID upstream method target protoMinor flags [contentLength] fieldCount {name value}
//	kind 'R' response: status(uint16) reason protoMinor flags [contentLength] fieldCount {name value}
//	kind 'E' error:    status(uint16) cause message
//	kind 'U' resume:   exchangeID offset(uvarint) [instance]
//	kind 'C' continue: offset(uvarint)
//
// flags bit 0: the body length is known (contentLength follows); bit 1: the client asked
// for 100-continue. Header fields are the end-to-end fields in their original order and
// casing; hop-by-hop ones never travel. The body follows the head unchanged (de-chunked).
//
// Resume and continue collect an exchange whose tunnel connection died after the origin
// had its request (docs/operations.md, "What happens to an exchange when something
// fails"). The edge sends a resume head alone on a new stream: the exchange id and how
// many bytes of the response message (head included) it already has. The origin answers
// with a continue head followed by the response message's bytes from that offset, or
// with an error head when it holds no such exchange. The resume's optional instance is
// the one the origin named in the HELLO of the connection that carried the request (the
// origin process and when it set the connection up): an origin that is that process, and
// would still remember the exchange had it arrived since then, answers that the request
// never reached it ("not_run": the edge may send it again) instead of "not_held" (outcome
// unknown). When present it is not empty.
//
// An origin may also answer a request with an error head whose cause is "diverted": it
// sends the response over the edge's other tunnel (the TCP one beside a lossy UDP one),
// where the edge collects it with a resume at offset 0 (internal/tunnel/quic SPEC.md,
// "Large responses over TCP"). Edges that did not ask for it never get it.
//
// Exchange ids are opaque to the origin except for two marks. An edge may end an id with
// "~" and a key of the client connection ("<instance>-<n>~c<k>"): the client
// authenticated its connection (NTLM, Negotiate), and the origin keeps the upstream
// connection of the key's exchanges for that key alone (internal/proxy, connauth.go).
//
// One-way deliveries. A request whose exchange id starts with [OneWayPrefix] ("ow.") is a
// one-way message the edge acknowledged to its client from its durable spool and now
// delivers: the id is the message's, the same on every attempt, and the origin delivers
// it to the server at most once per id (its ledger). Its answer is the server's response,
// or an error head whose cause says why it was not delivered this time: "already_delivered"
// (the server took it before; the edge forgets it), "delivery_in_progress" (another
// attempt is running; try later), "delivery_in_doubt" (an earlier attempt's outcome is
// unknown; not sent again), "one_way_off" (the origin has no ledger).
package envelope

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/soapgw/soapgw/internal/httpwire"
)

// Version is the head format version, the head's first byte.
const Version = 1

// Head kinds, the head's second byte.
const (
	KindRequest  = 'Q'
	KindResponse = 'R'
	KindError    = 'E'
	KindResume   = 'U'
	KindContinue = 'C'
)

const (
	flagLengthKnown    = 1 << 0
	flagExpectContinue = 1 << 1
)

// OneWayPrefix starts the exchange id of a one-way delivery from an edge's spool.
const OneWayPrefix = "ow."

// IsOneWay reports whether an exchange id is a one-way delivery's.
func IsOneWay(exchangeID string) bool {
	return len(exchangeID) > len(OneWayPrefix) && exchangeID[:len(OneWayPrefix)] == OneWayPrefix
}

// ErrMalformed marks a head that does not parse: a bug or a version mismatch.
var ErrMalformed = errors.New("soapgw: malformed tunnel envelope")

// Request is what the edge tells the origin about a request.
type Request struct {
	ExchangeID    string
	Upstream      string
	Method        string
	Target        string
	ProtoMinor    int
	ContentLength int64 // -1: unknown (the client sent chunked)
	Expect        bool
	Header        httpwire.Header
}

// Response is what the origin tells the edge about a response.
type Response struct {
	Status        int
	Reason        string
	ProtoMinor    int
	ContentLength int64 // -1: unknown (chunked or close-delimited upstream)
	Header        httpwire.Header
}

// Error is an error the origin reports instead of a response; the edge renders it as a
// SOAP Fault in the client's SOAP version.
type Error struct {
	Status  int    // HTTP-semantic (502, 504, ...); the edge picks the status line (proxy.FaultStatus)
	Cause   string // stable, low-cardinality cause used in metrics and X-Soapgw-Error
	Message string // human-readable, names the cause
}

func (e *Error) Error() string { return e.Message }

// Resume asks the origin for the response to an exchange whose tunnel connection died,
// from byte Offset of the response message (its length-prefixed head included).
type Resume struct {
	ExchangeID string
	Offset     int64
	// Instance is what the origin named in the HELLO of the connection that carried the
	// request; "" leaves it out.
	Instance string
}

// Continue answers a Resume: the response message's bytes from Offset follow the head.
type Continue struct {
	Offset int64
}

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

// Append appends the length-prefixed head to b.
func (h *Request) Append(b []byte) []byte {
	b, start := reserveHead(b)
	b = append(b, Version, KindRequest)
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

// Append appends the length-prefixed head to b.
func (h *Response) Append(b []byte) []byte {
	b, start := reserveHead(b)
	b = append(b, Version, KindResponse)
	b = binary.BigEndian.AppendUint16(b, uint16(h.Status))
	b = appendString(b, h.Reason)
	b = append(b, byte(h.ProtoMinor))
	b = appendLength(b, 0, h.ContentLength)
	b = appendFields(b, h.Header)
	return finishHead(b, start)
}

// Append appends the length-prefixed head to b.
func (e *Error) Append(b []byte) []byte {
	b, start := reserveHead(b)
	b = append(b, Version, KindError)
	b = binary.BigEndian.AppendUint16(b, uint16(e.Status))
	b = appendString(b, e.Cause)
	b = appendString(b, e.Message)
	return finishHead(b, start)
}

// Append appends the length-prefixed head to b.
func (h *Resume) Append(b []byte) []byte {
	b, start := reserveHead(b)
	b = append(b, Version, KindResume)
	b = appendString(b, h.ExchangeID)
	b = binary.AppendUvarint(b, uint64(h.Offset))
	if h.Instance != "" {
		b = appendString(b, h.Instance)
	}
	return finishHead(b, start)
}

// Append appends the length-prefixed head to b.
func (h *Continue) Append(b []byte) []byte {
	b, start := reserveHead(b)
	b = append(b, Version, KindContinue)
	b = binary.AppendUvarint(b, uint64(h.Offset))
	return finishHead(b, start)
}

// Split cuts a whole tunnel message into its head (version, kind and fields, without the
// length prefix) and its body. It checks only the framing, not the fields.
func Split(msg []byte) (head, body []byte, err error) {
	n, k := binary.Uvarint(msg)
	if k <= 0 {
		return nil, nil, fmt.Errorf("%w: length prefix", ErrMalformed)
	}
	if n < 2 || n > uint64(len(msg)-k) {
		return nil, nil, fmt.Errorf("%w: head of %d bytes in a message of %d", ErrMalformed, n, len(msg))
	}
	return msg[k : k+int(n)], msg[k+int(n):], nil
}

// KindOf checks a head's version and returns its kind.
func KindOf(head []byte) (byte, error) {
	if len(head) < 2 {
		return 0, fmt.Errorf("%w: head of %d bytes", ErrMalformed, len(head))
	}
	if head[0] != Version {
		return 0, fmt.Errorf("%w: version %d, want %d", ErrMalformed, head[0], Version)
	}
	return head[1], nil
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
		r.err = fmt.Errorf("%w: %s", ErrMalformed, what)
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
			if i > 0 && c == 0 {
				break // not minimal: the head would not re-encode to the same bytes
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

// end fails a head with bytes left over: every byte of a head belongs to a field, which
// is what lets the token codec rebuild it exactly from the parsed fields.
func (r *headReader) end() {
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Sprintf("%d trailing bytes", len(r.b)))
	}
}

func newReader(head []byte, want byte, what string) (headReader, error) {
	kind, err := KindOf(head)
	if err != nil {
		return headReader{}, err
	}
	if kind != want {
		return headReader{}, fmt.Errorf("%w: kind %q where %s was expected", ErrMalformed, kind, what)
	}
	return headReader{b: string(head[2:])}, nil
}

// ParseRequest parses a request head (as returned by [Split]).
func ParseRequest(head []byte) (*Request, error) {
	rv, err := newReader(head, KindRequest, "a request")
	if err != nil {
		return nil, err
	}
	r := &rv // on the stack: newReader returns a value, not a pointer
	h := &Request{}
	h.ExchangeID = r.string("exchange id")
	h.Upstream = r.string("upstream")
	h.Method = r.string("method")
	h.Target = r.string("target")
	h.ProtoMinor = int(r.byte("proto"))
	var fl byte
	fl, h.ContentLength = r.length()
	h.Expect = fl&flagExpectContinue != 0
	if fl&^(flagLengthKnown|flagExpectContinue) != 0 {
		r.fail("unknown flags")
	}
	h.Header = r.fields()
	r.end()
	if r.err == nil && (h.Method == "" || h.Target == "") {
		r.fail("empty method or target")
	}
	return h, r.err
}

// ParseResponse parses a response head: either a response or a gateway error.
func ParseResponse(head []byte) (*Response, *Error, error) {
	kind, err := KindOf(head)
	if err != nil {
		return nil, nil, err
	}
	r := &headReader{b: string(head[2:])}
	switch kind {
	case KindResponse:
		h := &Response{}
		h.Status = r.uint16("status")
		h.Reason = r.string("reason")
		h.ProtoMinor = int(r.byte("proto"))
		var fl byte
		fl, h.ContentLength = r.length()
		if fl&^flagLengthKnown != 0 {
			r.fail("unknown flags")
		}
		h.Header = r.fields()
		r.end()
		if r.err == nil && (h.Status < 100 || h.Status > 999) {
			r.fail("status")
		}
		return h, nil, r.err
	case KindError:
		e := &Error{}
		e.Status = r.uint16("status")
		e.Cause = r.string("cause")
		e.Message = r.string("message")
		r.end()
		if r.err == nil && (e.Status < 400 || e.Status > 599) {
			r.fail("error status")
		}
		return nil, e, r.err
	}
	return nil, nil, fmt.Errorf("%w: kind %q where a response was expected", ErrMalformed, kind)
}

// maxOffset bounds a resume offset: no message is larger.
const maxOffset = 1 << 62

// ParseResume parses a resume head.
func ParseResume(head []byte) (*Resume, error) {
	rv, err := newReader(head, KindResume, "a resume")
	if err != nil {
		return nil, err
	}
	r := &rv // on the stack: newReader returns a value, not a pointer
	h := &Resume{ExchangeID: r.string("exchange id")}
	off := r.uvarint("offset")
	if r.err == nil && len(r.b) > 0 {
		if h.Instance = r.string("instance"); r.err == nil && h.Instance == "" {
			r.fail("empty instance")
		}
	}
	r.end()
	if r.err == nil && off > maxOffset {
		r.fail("offset")
	}
	if r.err == nil && h.ExchangeID == "" {
		r.fail("empty exchange id")
	}
	h.Offset = int64(off)
	return h, r.err
}

// ParseResumeAnswer parses the origin's answer to a resume: a continue head, or an error.
func ParseResumeAnswer(head []byte) (*Continue, *Error, error) {
	kind, err := KindOf(head)
	if err != nil {
		return nil, nil, err
	}
	if kind == KindError {
		_, e, err := ParseResponse(head)
		return nil, e, err
	}
	rv, err := newReader(head, KindContinue, "a continue or an error")
	if err != nil {
		return nil, nil, err
	}
	r := &rv // on the stack: newReader returns a value, not a pointer
	off := r.uvarint("offset")
	r.end()
	if r.err == nil && off > maxOffset {
		r.fail("offset")
	}
	return &Continue{Offset: int64(off)}, nil, r.err
}
