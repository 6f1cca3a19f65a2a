package xmltok

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Options configures an Encoder or a Decoder. Both ends of a direction
// must use the same DictBytes.
type Options struct {
	// DictBytes is the state budget per direction; default
	// DefaultDictBytes. The dynamic dictionary may hold DictBytes/4 (sum
	// of entry sizes, each entry counted as len+32 like HPACK); the match
	// history's record ring grows up to DictBytes/4 bytes and its value
	// arena up to DictBytes/8, each rounded down to a power of two, as
	// the traffic needs them. Both ends must use the same value.
	DictBytes int
	// MaxMessage caps a decoded message; <=0 means 64 MiB. Decode returns
	// an error wrapping ErrTooLarge past it.
	MaxMessage int
}

// DefaultDictBytes is the default DictBytes. With it, an Encoder and a
// Decoder together hold 0.2-0.75 MiB after warm-up on each family of
// the corpus but the DataSet responses (1.2 MiB: a 256 KiB record ring
// and a 128 KiB value arena per end, which predict a 430 KB DataSet from
// any of the three before it); docs/codecs.md, "State per connection".
const DefaultDictBytes = 1 << 20

// ErrCorrupt is wrapped by every error about a payload that is not a
// valid encoding for the decoder's state.
var ErrCorrupt = errors.New("xmltok: corrupt payload")

// ErrTooLarge is wrapped when a payload decodes to more than MaxMessage.
var ErrTooLarge = errors.New("xmltok: decoded message too large")

// MaxExpansion bounds the overhead of a payload: Encode never returns
// more than len(msg)+MaxExpansion bytes (in fact at most len(msg)+1).
const MaxExpansion = 8

const (
	defaultMaxMessage = 64 << 20

	modeCoded  = 0x00 // range-coded token stream follows
	modeStored = 0x01 // the message follows verbatim
	modeRaw    = 0x02 // uvarint n, n-byte raw section (secrets, blobs), range-coded stream
)

// Encoder encodes the messages of one direction of a connection. Not
// safe for concurrent use.
type Encoder struct {
	m   *model
	c   coder
	raw []byte
}

// NewEncoder returns an Encoder with a fresh model.
func NewEncoder(o Options) *Encoder { return &Encoder{m: newModel(o)} }

// Encode appends the payload for msg to dst. It never fails: a message
// the model cannot shrink goes out stored, one byte longer than itself.
func (e *Encoder) Encode(dst, msg []byte) []byte {
	start := len(dst)
	dst = append(dst, modeCoded)
	e.c.initEnc(dst, e.raw[:0], false)
	e.m.encode(&e.c, msg)
	out := e.c.finish()
	e.raw = e.c.raw
	e.c = coder{}
	if n := len(e.raw); n > 0 {
		// The raw section (secrets, blob chunks) goes ahead of the
		// range-coded stream.
		var hdr [binary.MaxVarintLen64]byte
		h := binary.PutUvarint(hdr[:], uint64(n))
		rc := len(out) - start - 1
		out = slices.Grow(out, h+n)[:len(out)+h+n]
		copy(out[start+1+h+n:], out[start+1:start+1+rc])
		out[start] = modeRaw
		copy(out[start+1:], hdr[:h])
		copy(out[start+1+h:], e.raw)
	}
	if len(out)-start > len(msg)+1 {
		// The model has learned from msg already; the decoder replays
		// the same encoding on the stored bytes to learn the same.
		out = append(out[:start], modeStored)
		out = append(out, msg...)
	}
	return out
}

// Digest returns a hash of the encoder's model state. It equals the
// matching Decoder's Digest after both have seen the same messages.
func (e *Encoder) Digest() uint64 { return e.m.digest() }

// Decoder decodes the payloads of one direction of a connection. After
// an error its state is undefined: discard it and start both ends anew.
// Not safe for concurrent use.
type Decoder struct {
	m   *model
	c   coder
	max int
}

// NewDecoder returns a Decoder with a fresh model.
func NewDecoder(o Options) *Decoder {
	max := o.MaxMessage
	if max <= 0 {
		max = defaultMaxMessage
	}
	return &Decoder{m: newModel(o), max: max}
}

// Decode appends the message encoded in payload to dst.
func (d *Decoder) Decode(dst, payload []byte) ([]byte, error) {
	if len(payload) == 0 {
		return dst, fmt.Errorf("%w: empty payload", ErrCorrupt)
	}
	switch payload[0] {
	case modeStored:
		raw := payload[1:]
		if len(raw) > d.max {
			return dst, fmt.Errorf("%w: stored message of %d bytes, limit %d", ErrTooLarge, len(raw), d.max)
		}
		d.c.initEnc(nil, nil, true)
		d.m.encode(&d.c, raw)
		d.c = coder{}
		return append(dst, raw...), nil
	case modeCoded, modeRaw:
		rc, raw := payload[1:], []byte(nil)
		if payload[0] == modeRaw {
			n, h := binary.Uvarint(rc)
			if h <= 0 || n == 0 || n > uint64(len(rc)-h) {
				return dst, fmt.Errorf("%w: bad raw section length", ErrCorrupt)
			}
			raw, rc = rc[h:h+int(n)], rc[h+int(n):]
		}
		d.c.initDec(rc, raw)
		out, err := d.m.decode(&d.c, dst, d.max)
		d.c = coder{}
		return out, err
	}
	return dst, fmt.Errorf("%w: unknown payload mode 0x%02x", ErrCorrupt, payload[0])
}

// Digest returns a hash of the decoder's model state; see Encoder.Digest.
func (d *Decoder) Digest() uint64 { return d.m.digest() }
