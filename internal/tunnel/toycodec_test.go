package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
)

// Toy codecs for the tunnel's tests; the tunnel must not import internal/codec.

const (
	deltaID   uint8 = 5
	reverseID uint8 = 6
	copyID    uint8 = 7
)

var errToyTooLarge = errors.New("toy codec: message too large")

// deltaCodec is a stateful codec: a payload is the message XORed with the previous message
// of the direction, after the message's sequence number in the epoch and its length. A
// decoder fed messages in another order than its encoder fails on the sequence number, and
// one whose state is off produces garbage the CRC-32C catches.
type deltaCodec struct{}

func (deltaCodec) ID() uint8                                  { return deltaID }
func (deltaCodec) Format() uint32                             { return 1 }
func (deltaCodec) NewEncoder() (MessageEncoder, error)        { return &deltaEncoder{}, nil }
func (deltaCodec) NewDecoder(max int) (MessageDecoder, error) { return &deltaDecoder{max: max}, nil }

type deltaEncoder struct {
	seq  uint64
	prev []byte
}

func (e *deltaEncoder) Encode(dst, msg []byte) ([]byte, error) {
	dst = binary.AppendUvarint(dst, e.seq)
	dst = binary.AppendUvarint(dst, uint64(len(msg)))
	for i, b := range msg {
		if i < len(e.prev) {
			b ^= e.prev[i]
		}
		dst = append(dst, b)
	}
	e.seq++
	e.prev = append(e.prev[:0], msg...)
	return dst, nil
}

type deltaDecoder struct {
	seq  uint64
	prev []byte
	max  int
}

func (d *deltaDecoder) Decode(dst, p []byte) ([]byte, error) {
	seq, n := binary.Uvarint(p)
	if n <= 0 {
		return dst, errors.New("delta: bad sequence number")
	}
	if seq != d.seq {
		return dst, fmt.Errorf("delta: message %d out of order, expected %d", seq, d.seq)
	}
	p = p[n:]
	l, n := binary.Uvarint(p)
	if n <= 0 {
		return dst, errors.New("delta: bad length")
	}
	if l > uint64(d.max) { // checked before anything is allocated
		return dst, fmt.Errorf("%w: %d bytes > %d", errToyTooLarge, l, d.max)
	}
	p = p[n:]
	if uint64(len(p)) != l {
		return dst, fmt.Errorf("delta: %d bytes for a message of %d", len(p), l)
	}
	start := len(dst)
	for i, b := range p {
		if i < len(d.prev) {
			b ^= d.prev[i]
		}
		dst = append(dst, b)
	}
	d.seq++
	d.prev = append(d.prev[:0], dst[start:]...)
	return dst, nil
}

// reverseCodec is a stateless codec: the payload is the message backwards.
type reverseCodec struct{}

func (reverseCodec) ID() uint8                                  { return reverseID }
func (reverseCodec) Format() uint32                             { return 1 }
func (reverseCodec) NewEncoder() (MessageEncoder, error)        { return reverseCoder{}, nil }
func (reverseCodec) NewDecoder(max int) (MessageDecoder, error) { return reverseCoder{max}, nil }

type reverseCoder struct{ max int }

func (reverseCoder) Encode(dst, msg []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, msg...)
	slices.Reverse(dst[start:])
	return dst, nil
}

func (c reverseCoder) Decode(dst, p []byte) ([]byte, error) {
	if len(p) > c.max {
		return dst, errToyTooLarge
	}
	return reverseCoder{}.Encode(dst, p)
}

// copyCodec is the cheapest possible codec (the payload is the message), for benchmarks.
type copyCodec struct{}

func (copyCodec) ID() uint8                                  { return copyID }
func (copyCodec) Format() uint32                             { return 1 }
func (copyCodec) NewEncoder() (MessageEncoder, error)        { return copyCoder{}, nil }
func (copyCodec) NewDecoder(max int) (MessageDecoder, error) { return copyCoder{max}, nil }

type copyCoder struct{ max int }

func (copyCoder) Encode(dst, msg []byte) ([]byte, error) { return append(dst, msg...), nil }
func (c copyCoder) Decode(dst, p []byte) ([]byte, error) {
	if len(p) > c.max {
		return dst, errToyTooLarge
	}
	return append(dst, p...), nil
}

// fault says what a faultCodec does to one message.
type fault int

const (
	faultNone          fault = iota
	faultDecodeError         // the decoder returns an error
	faultCorruptOutput       // the decoder returns a wrong message (CRC-32C mismatch)
	faultCorruptState        // the decoder succeeds but its state goes wrong: the next message decodes to garbage
	faultEncodeError         // the encoder returns an error (after changing its state)
)

// faultCodec is deltaCodec with faults injected on chosen messages, counted over every
// encoder (or decoder) the codec made, from 1.
type faultCodec struct {
	onDecode map[int]fault
	onEncode map[int]fault
	decoded  atomic.Int64
	encoded  atomic.Int64
	newDecs  atomic.Int64 // decoders made: one per receive epoch that saw a message
}

func (c *faultCodec) ID() uint8      { return deltaID }
func (c *faultCodec) Format() uint32 { return 1 }

func (c *faultCodec) NewEncoder() (MessageEncoder, error) {
	return &faultEncoder{c: c, inner: &deltaEncoder{}}, nil
}

func (c *faultCodec) NewDecoder(max int) (MessageDecoder, error) {
	c.newDecs.Add(1)
	return &faultDecoder{c: c, inner: &deltaDecoder{max: max}}, nil
}

type faultEncoder struct {
	c     *faultCodec
	inner *deltaEncoder
}

func (e *faultEncoder) Encode(dst, msg []byte) ([]byte, error) {
	n := int(e.c.encoded.Add(1))
	out, err := e.inner.Encode(dst, msg)
	if e.c.onEncode[n] == faultEncodeError {
		return dst, fmt.Errorf("injected encode fault on message %d", n)
	}
	return out, err
}

type faultDecoder struct {
	c     *faultCodec
	inner *deltaDecoder
}

func (d *faultDecoder) Decode(dst, p []byte) ([]byte, error) {
	n := int(d.c.decoded.Add(1))
	out, err := d.inner.Decode(dst, p)
	if err != nil {
		return out, err
	}
	switch d.c.onDecode[n] {
	case faultDecodeError:
		return dst, fmt.Errorf("injected decode fault on message %d", n)
	case faultCorruptOutput:
		if len(out) > len(dst) {
			out[len(dst)] ^= 0x55
		} else {
			out = append(out, 'x')
		}
	case faultCorruptState:
		d.inner.prev = append(d.inner.prev, 0xff)
		for i := range d.inner.prev {
			d.inner.prev[i] ^= 0x0f
		}
	}
	return out, nil
}

// preferDelta codes every message with deltaCodec when the peer decodes it.
var preferDelta = Prefer(0, deltaID)

// codecConfig is a session config with the toy codecs and delta as the encoding.
func codecConfig(node string, maxCoded int) *Config {
	return &Config{
		Node:            node,
		Codecs:          []MessageCodec{deltaCodec{}, reverseCodec{}},
		Encoding:        preferDelta,
		MaxCodedMessage: maxCoded,
		CodecName:       toyCodecName,
	}
}

func toyCodecName(id uint8) string {
	switch id {
	case deltaID:
		return "delta"
	case reverseID:
		return "reverse"
	case copyID:
		return "copy"
	case flateID:
		return "flate"
	}
	return ""
}

// gateConn holds every Write while closed, as a peer that stops reading would: sendLoop
// then sits in a write and whatever is queued after stays in the ring.
type gateConn struct {
	net.Conn
	mu      sync.Mutex
	open    chan struct{}
	blocked atomic.Int32
}

func newGateConn(c net.Conn) *gateConn {
	g := &gateConn{Conn: c, open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gateConn) Write(b []byte) (int, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	g.blocked.Add(1)
	<-open
	g.blocked.Add(-1)
	return g.Conn.Write(b)
}

func (g *gateConn) pause() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gateConn) resume() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}
