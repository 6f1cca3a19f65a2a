package codec

import (
	"errors"
	"fmt"
	"io"
	"slices"
)

// Message codecs.
//
// A tunnel connection keeps one Encoder and one Decoder per codec and direction, and
// feeds them the messages of that direction in wire order. Stateless codecs (identity,
// gzip, zstd) encode every message on its own; stateful ones (zstd-stream) rely on that
// order, so a payload lost or reordered breaks every later message of the direction.
//
// Payload layout of every codec but identity (whose payload is the message itself):
//
//	mode (1 byte) | body
//
//	mode 0 (stored):     body is the message, unchanged
//	mode 1 (compressed): body is the codec's compressed form (zstd-stream: uvarint of the
//	                     decoded length, then the bytes flushed by the stream encoder)
//
// Encoders fall back to the stored form when the compressed one would be larger, so a
// payload is never more than [MaxExpansion] bytes longer than its message.

// Payload mode bytes.
const (
	modeStored     = 0
	modeCompressed = 1
)

// MaxExpansion is the most a payload may exceed its message's length.
const MaxExpansion = 16

// DefaultMaxMessage is the decoded-size cap used when [Limits.MaxMessage] is not positive.
const DefaultMaxMessage = 64 << 20

// ErrTooLarge is returned (possibly wrapped) by a Decoder when a message would decode to
// more than [Limits.MaxMessage] bytes.
var ErrTooLarge = errors.New("codec: decoded message too large")

// ErrCorrupt is returned (possibly wrapped) by a Decoder for a payload that is not a valid
// encoding.
var ErrCorrupt = errors.New("codec: corrupt payload")

// Encoder encodes the messages of one direction, in order. Not safe for concurrent use.
type Encoder interface {
	// Encode appends the payload for msg to dst and returns the extended slice.
	Encode(dst, msg []byte) ([]byte, error)
}

// Decoder decodes the payloads of one direction, in order. Not safe for concurrent use.
// It never panics on hostile input; after an error a stateful Decoder keeps failing.
type Decoder interface {
	// Decode appends the message of payload to dst and returns the extended slice.
	Decode(dst, payload []byte) ([]byte, error)
}

// Codec makes encoders and decoders of one kind.
type Codec interface {
	ID() ID
	Name() string
	// Format identifies the wire format and whatever both ends must share to use it (a
	// zstd dictionary, the token codec's model): gateways use a codec together only if
	// they announce the same Format in the tunnel handshake.
	Format() uint32
	NewEncoder() (Encoder, error)
	NewDecoder(limits Limits) (Decoder, error)
}

// Limits bound what a Decoder accepts.
type Limits struct {
	// MaxMessage caps a decoded message (decompression-bomb guard); <= 0 means
	// DefaultMaxMessage.
	MaxMessage int
}

func (l Limits) max() int {
	if l.MaxMessage <= 0 {
		return DefaultMaxMessage
	}
	return l.MaxMessage
}

var registry = func() []Codec {
	cs, err := Set(Options{})
	if err != nil {
		panic(err) // the defaults are valid
	}
	return cs
}()

// Registry returns the implemented codecs with their default options, by id.
func Registry() []Codec { return slices.Clone(registry) }

// Lookup returns the default codec for id.
func Lookup(id ID) (Codec, bool) {
	for _, c := range registry {
		if c.ID() == id {
			return c, true
		}
	}
	return nil, false
}

// identity: the payload is the message.

type identityCodec struct{}

func (identityCodec) ID() ID                       { return Identity }
func (identityCodec) Name() string                 { return Identity.String() }
func (identityCodec) Format() uint32               { return 1 }
func (identityCodec) NewEncoder() (Encoder, error) { return identityEncoder{}, nil }
func (identityCodec) NewDecoder(l Limits) (Decoder, error) {
	return identityDecoder{max: l.max()}, nil
}

type identityEncoder struct{}

func (identityEncoder) Encode(dst, msg []byte) ([]byte, error) { return append(dst, msg...), nil }

type identityDecoder struct{ max int }

func (d identityDecoder) Decode(dst, payload []byte) ([]byte, error) {
	if len(payload) > d.max {
		return dst, ErrTooLarge
	}
	return append(dst, payload...), nil
}

// appendStored appends the stored form of msg.
// splitMode checks a payload's mode byte. For a stored payload it returns the message
// itself (stored, bounded by max); for a compressed one the body that follows the byte.
// Every decoder starts with it, so the stored form and its size cap are checked once.
func splitMode(payload []byte, max int, name string) (body []byte, stored bool, err error) {
	if len(payload) == 0 {
		return nil, false, fmt.Errorf("%w: empty %s payload", ErrCorrupt, name)
	}
	body = payload[1:]
	switch payload[0] {
	case modeStored:
		if len(body) > max {
			return nil, false, ErrTooLarge
		}
		return body, true, nil
	case modeCompressed:
		return body, false, nil
	}
	return nil, false, fmt.Errorf("%w: %s mode %d", ErrCorrupt, name, payload[0])
}

func appendStored(dst, msg []byte) []byte {
	dst = append(dst, modeStored)
	return append(dst, msg...)
}

// sliceWriter is an io.Writer appending to b.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// sliceReader is an io.Reader over b. It deliberately has no Len or Bytes method, so
// libraries do not take their whole-buffer shortcuts with it.
type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func (r *sliceReader) ReadByte() (byte, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, nil
}
