package frame

import (
	"encoding/binary"
	"fmt"
)

// Preamble opens a message (DATA with FlagStart).
type Preamble struct {
	Codec uint8  // codec id the message bytes are encoded with, 0..MaxCodecID; 0 = identity
	Epoch uint64 // codec state generation of a coded message; 0 for identity
	// Ack, when not 0, acknowledges that many coded messages the receiver of this frame
	// sent (see CODEC_ACK). It rides in the preamble to save a frame; it is control data
	// and does not count against the stream's window (AckLen tells how many bytes it took).
	Ack uint64
}

// MaxCodecID is the largest codec id: the preamble's top bit flags the ack field.
const MaxCodecID = 0x7f

// preambleAckBit in the preamble's first byte says an ack count follows the epoch.
const preambleAckBit = 0x80

// Append appends the encoded preamble to dst. Codec must be at most MaxCodecID; its top
// bit is not sent.
func (p Preamble) Append(dst []byte) []byte {
	c := p.Codec & MaxCodecID
	if p.Ack != 0 {
		c |= preambleAckBit
	}
	dst = append(dst, c)
	dst = binary.AppendUvarint(dst, p.Epoch)
	if p.Ack != 0 {
		dst = binary.AppendUvarint(dst, p.Ack)
	}
	return dst
}

// Len is the encoded size of p.
func (p Preamble) Len() int {
	return 1 + uvarintLen(p.Epoch) + p.AckLen()
}

// AckLen is how many of p's encoded bytes carry the ack count (0 without one). Flow
// control counts a START frame's payload less these bytes.
func (p Preamble) AckLen() int {
	if p.Ack == 0 {
		return 0
	}
	return uvarintLen(p.Ack)
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// ParsePreamble decodes a preamble and returns the bytes after it. An ack field that is
// present must count at least one message.
func ParsePreamble(b []byte) (Preamble, []byte, error) {
	if len(b) < 2 {
		return Preamble{}, nil, fmt.Errorf("%w: preamble truncated", ErrBadPayload)
	}
	p := Preamble{Codec: b[0] & MaxCodecID}
	v, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return Preamble{}, nil, fmt.Errorf("%w: preamble epoch", ErrBadPayload)
	}
	p.Epoch = v
	rest := b[1+n:]
	if b[0]&preambleAckBit != 0 {
		a, n := binary.Uvarint(rest)
		if n <= 0 {
			return Preamble{}, nil, fmt.Errorf("%w: preamble ack", ErrBadPayload)
		}
		if a == 0 {
			return Preamble{}, nil, fmt.Errorf("%w: preamble ack of 0 messages", ErrBadPayload)
		}
		p.Ack, rest = a, rest[n:]
	}
	return p, rest, nil
}

// TrailerLen is the size of the trailer that ends a message (DATA with FlagEnd).
const TrailerLen = 4

// AppendTrailer appends the trailer carrying the CRC-32C of the original message bytes.
func AppendTrailer(dst []byte, crc uint32) []byte {
	return binary.BigEndian.AppendUint32(dst, crc)
}

// ParseTrailer splits the trailer off the end of an END frame's payload.
func ParseTrailer(b []byte) (data []byte, crc uint32, err error) {
	if len(b) < TrailerLen {
		return nil, 0, fmt.Errorf("%w: trailer truncated", ErrBadPayload)
	}
	n := len(b) - TrailerLen
	return b[:n], binary.BigEndian.Uint32(b[n:]), nil
}

// AppendWindowUpdate appends a WINDOW_UPDATE payload.
func AppendWindowUpdate(dst []byte, incr uint32) []byte {
	return binary.BigEndian.AppendUint32(dst, incr)
}

// ParseWindowUpdate decodes a WINDOW_UPDATE payload. A zero or over-large increment is
// malformed: it would either do nothing or overflow the window.
func ParseWindowUpdate(b []byte) (uint32, error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("%w: window update of %d bytes", ErrBadPayload, len(b))
	}
	v := binary.BigEndian.Uint32(b)
	if v == 0 || v > 1<<31-1 {
		return 0, fmt.Errorf("%w: window increment %d", ErrBadPayload, v)
	}
	return v, nil
}

// AppendRST appends a RST_STREAM payload.
func AppendRST(dst []byte, code Code, reason string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(code))
	return append(dst, clipReason(reason)...)
}

// ParseRST decodes a RST_STREAM payload.
func ParseRST(b []byte) (Code, string, error) {
	if len(b) < 4 || len(b) > 4+MaxReason {
		return 0, "", fmt.Errorf("%w: rst of %d bytes", ErrBadPayload, len(b))
	}
	return Code(binary.BigEndian.Uint32(b)), string(b[4:]), nil
}

// AppendGoAway appends a GOAWAY payload.
func AppendGoAway(dst []byte, lastStream uint32, code Code, reason string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, lastStream&0x7fffffff)
	dst = binary.BigEndian.AppendUint32(dst, uint32(code))
	return append(dst, clipReason(reason)...)
}

// ParseGoAway decodes a GOAWAY payload.
func ParseGoAway(b []byte) (lastStream uint32, code Code, reason string, err error) {
	if len(b) < 8 || len(b) > 8+MaxReason {
		return 0, 0, "", fmt.Errorf("%w: goaway of %d bytes", ErrBadPayload, len(b))
	}
	return binary.BigEndian.Uint32(b) & 0x7fffffff, Code(binary.BigEndian.Uint32(b[4:])), string(b[8:]), nil
}

// PingLen is the size of a PING payload.
const PingLen = 8

// ParsePing decodes a PING payload.
func ParsePing(b []byte) (uint64, error) {
	if len(b) != PingLen {
		return 0, fmt.Errorf("%w: ping of %d bytes", ErrBadPayload, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// AppendPing appends a PING payload.
func AppendPing(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }

// AppendCodecAck appends a CODEC_ACK payload: count (at least 1) coded messages processed.
func AppendCodecAck(dst []byte, count uint64) []byte { return binary.AppendUvarint(dst, count) }

// ParseCodecAck decodes a CODEC_ACK payload: one uvarint count of at least 1, nothing after.
func ParseCodecAck(b []byte) (uint64, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) {
		return 0, fmt.Errorf("%w: codec ack of %d bytes", ErrBadPayload, len(b))
	}
	if v == 0 {
		return 0, fmt.Errorf("%w: codec ack of 0 messages", ErrBadPayload)
	}
	return v, nil
}

// AppendCodecNack appends a CODEC_NACK payload: the epoch of the rejected message and a
// UTF-8 reason (clipped to MaxReason bytes).
func AppendCodecNack(dst []byte, epoch uint64, reason string) []byte {
	dst = binary.AppendUvarint(dst, epoch)
	return append(dst, clipReason(reason)...)
}

// ParseCodecNack decodes a CODEC_NACK payload.
func ParseCodecNack(b []byte) (epoch uint64, reason string, err error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, "", fmt.Errorf("%w: codec nack epoch", ErrBadPayload)
	}
	if len(b)-n > MaxReason {
		return 0, "", fmt.Errorf("%w: codec nack of %d bytes", ErrBadPayload, len(b))
	}
	return v, string(b[n:]), nil
}
