package frame

import (
	"encoding/binary"
	"fmt"
	"io"
)

// A compact DATA header (protocol version 3) replaces the 9-byte header of a small DATA
// frame with 3 bytes in the common case. A tunnel exchange is usually one small DATA
// frame each way, so on a slow link the header is a real share of it: with a coded
// 30-byte message the full header is a quarter of the frame.
//
// The first byte of a full header is the top byte of a 24-bit length capped at 1 MiB, so
// its top bit is never set; a first byte with the top bit set starts a compact header:
//
//	byte 0: 1 S E L L L L L   S = START, E = END, L = length bits 12..8
//	byte 1: length bits 7..0
//	then:   stream id − the stream id of the previous compact header in this direction
//	        of the connection (0 before the first), zigzag varint (1 byte for a delta
//	        within ±63, at most 5)
//
// Consecutive frames mostly belong to the newest stream or one near it, so the delta is
// small. Only DATA frames of at most MaxCompactLength payload bytes with no flags but
// START and END have a compact form; senders may always use the full header.
const (
	compactBit   = 0x80
	compactStart = 0x40
	compactEnd   = 0x20
	// MaxCompactLength is the largest payload a compact header can describe.
	MaxCompactLength = 1<<13 - 1
	// maxDeltaLen bounds the varint: a delta between two 31-bit ids fits in 5 bytes.
	maxDeltaLen = 5
)

// IsCompact reports whether a frame whose first byte is b0 has a compact header.
func IsCompact(b0 byte) bool { return b0&compactBit != 0 }

// Compactable reports whether h has a compact form.
func (h Header) Compactable() bool {
	return h.Type == TypeData && h.Length <= MaxCompactLength && h.Flags&^(FlagStart|FlagEnd) == 0 &&
		h.StreamID != 0
}

// AppendCompact appends the compact header of h, which must be Compactable, given the
// stream id of the previous compact header sent in this direction.
func (h Header) AppendCompact(dst []byte, prev uint32) []byte {
	b0 := byte(compactBit) | byte(h.Length>>8)&0x1f
	if h.Flags.Has(FlagStart) {
		b0 |= compactStart
	}
	if h.Flags.Has(FlagEnd) {
		b0 |= compactEnd
	}
	dst = append(dst, b0, byte(h.Length))
	return binary.AppendVarint(dst, int64(h.StreamID)-int64(prev))
}

// ReadCompact decodes the rest of a compact header whose first byte b0 was already read,
// given the stream id of the previous compact header received. It returns the header and
// how many bytes it read after b0. A stream id outside 1..2^31-1 is malformed; a length
// above max is ErrFrameTooLarge.
func ReadCompact(b0 byte, r io.ByteReader, prev uint32, max uint32) (Header, int, error) {
	b1, err := r.ReadByte()
	if err != nil {
		return Header{}, 0, err
	}
	n := 1
	var u uint64
	for shift := 0; ; shift += 7 {
		if n > maxDeltaLen {
			return Header{}, n, fmt.Errorf("%w: compact header stream delta too long", ErrBadPayload)
		}
		c, err := r.ReadByte()
		if err != nil {
			return Header{}, n, err
		}
		n++
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			if c == 0 && shift > 0 {
				// Overlong: one encoding per delta keeps parsing and fuzzing simple.
				return Header{}, n, fmt.Errorf("%w: compact header stream delta not minimal", ErrBadPayload)
			}
			break
		}
	}
	delta := int64(u>>1) ^ -int64(u&1) // zigzag
	id := int64(prev) + delta
	if id < 1 || id > 1<<31-1 {
		return Header{}, n, fmt.Errorf("%w: compact header stream id %d", ErrBadPayload, id)
	}
	h := Header{Length: uint32(b0&0x1f)<<8 | uint32(b1), Type: TypeData, StreamID: uint32(id)}
	if b0&compactStart != 0 {
		h.Flags |= FlagStart
	}
	if b0&compactEnd != 0 {
		h.Flags |= FlagEnd
	}
	if max == 0 || max > MaxPayload {
		max = MaxPayload
	}
	if h.Length > max {
		return h, n, fmt.Errorf("%w: %d bytes > limit %d (%s)", ErrFrameTooLarge, h.Length, max, h.Type)
	}
	return h, n, nil
}
