package frame

import (
	"encoding/binary"
	"fmt"
)

// Preamble opens a message (DATA with FlagStart).
type Preamble struct {
	Codec uint8  // codec id the message bytes are encoded with; 0 = identity
	Epoch uint64 // dictionary generation for stateful codecs; 0 for stateless ones
}

// Append appends the encoded preamble to dst.
func (p Preamble) Append(dst []byte) []byte {
	dst = append(dst, p.Codec)
	return binary.AppendUvarint(dst, p.Epoch)
}

// Len is the encoded size of p.
func (p Preamble) Len() int {
	n := 2
	for v := p.Epoch; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// ParsePreamble decodes a preamble and returns the bytes after it.
func ParsePreamble(b []byte) (Preamble, []byte, error) {
	if len(b) < 2 {
		return Preamble{}, nil, fmt.Errorf("%w: preamble truncated", ErrBadPayload)
	}
	p := Preamble{Codec: b[0]}
	v, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return Preamble{}, nil, fmt.Errorf("%w: preamble epoch", ErrBadPayload)
	}
	p.Epoch = v
	return p, b[1+n:], nil
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
