package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// HeaderLen is the size of every frame header on the wire.
const HeaderLen = 9

// MaxPayload is the hard ceiling on a frame's payload, whatever a peer announces. It keeps a
// hostile length field from making a receiver allocate more than this per frame.
const MaxPayload = 1 << 20

// Proto is the protocol version both sides must announce in HELLO. Version 3 added the
// compact DATA header (compact.go). Version 2 added the
// preamble's ack field, CODEC_ACK, CODEC_NACK and HELLO's max_coded.
const Proto = 3

// Type is a frame type.
type Type uint8

// Frame types; see SPEC.md.
const (
	TypeData         Type = 0x0
	TypeWindowUpdate Type = 0x1
	TypeRSTStream    Type = 0x2
	TypePing         Type = 0x3
	TypeGoAway       Type = 0x4
	TypeHello        Type = 0x5
	TypeCodecAck     Type = 0x6
	TypeCodecNack    Type = 0x7
)

func (t Type) String() string {
	switch t {
	case TypeData:
		return "DATA"
	case TypeWindowUpdate:
		return "WINDOW_UPDATE"
	case TypeRSTStream:
		return "RST_STREAM"
	case TypePing:
		return "PING"
	case TypeGoAway:
		return "GOAWAY"
	case TypeHello:
		return "HELLO"
	case TypeCodecAck:
		return "CODEC_ACK"
	case TypeCodecNack:
		return "CODEC_NACK"
	}
	return fmt.Sprintf("UNKNOWN(0x%x)", uint8(t))
}

// Flags are a frame's flag bits; their meaning depends on the type.
type Flags uint8

// Flag bits.
const (
	FlagStart Flags = 0x1 // DATA: first frame of a message, payload starts with a preamble
	FlagEnd   Flags = 0x2 // DATA: last frame of a message, payload ends with a trailer
	FlagAck   Flags = 0x1 // PING: this is the answer
)

// Has reports whether all bits of g are set in f.
func (f Flags) Has(g Flags) bool { return f&g == g }

// Errors returned by parsers. They are sentinels so callers classify them with errors.Is.
var (
	ErrShort         = errors.New("frame: short buffer")
	ErrFrameTooLarge = errors.New("frame: frame too large")
	ErrBadPayload    = errors.New("frame: malformed payload")
)

// Header is a decoded frame header.
type Header struct {
	Length   uint32 // payload length (24 bits on the wire)
	Type     Type
	Flags    Flags
	StreamID uint32 // 31 bits on the wire
}

func (h Header) String() string {
	return fmt.Sprintf("%s stream=%d flags=0x%x len=%d", h.Type, h.StreamID, uint8(h.Flags), h.Length)
}

// Append appends the encoded header to dst. Length must be at most MaxPayload and StreamID
// below 2^31; callers guarantee both, so this does not check.
func (h Header) Append(dst []byte) []byte {
	return append(dst,
		byte(h.Length>>16), byte(h.Length>>8), byte(h.Length),
		byte(h.Type), byte(h.Flags),
		byte(h.StreamID>>24)&0x7f, byte(h.StreamID>>16), byte(h.StreamID>>8), byte(h.StreamID))
}

// ParseHeader decodes a header from the first HeaderLen bytes of b. It rejects payload
// lengths above max (which itself is capped at MaxPayload).
func ParseHeader(b []byte, max uint32) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrShort
	}
	h := Header{
		Length:   uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]),
		Type:     Type(b[3]),
		Flags:    Flags(b[4]),
		StreamID: binary.BigEndian.Uint32(b[5:9]) & 0x7fffffff,
	}
	if max == 0 || max > MaxPayload {
		max = MaxPayload
	}
	if h.Length > max {
		return h, fmt.Errorf("%w: %d bytes > limit %d (%s)", ErrFrameTooLarge, h.Length, max, h.Type)
	}
	return h, nil
}

// Code is an RST_STREAM or GOAWAY error code.
type Code uint32

// Codes; see SPEC.md.
const (
	CodeNoError     Code = 0
	CodeProtocol    Code = 1
	CodeInternal    Code = 2
	CodeFlowControl Code = 3
	CodeRefused     Code = 4
	CodeCancel      Code = 5
	CodeChecksum    Code = 6
	CodeTooLarge    Code = 7
	CodeCodec       Code = 8
)

var codeNames = [...]string{"NO_ERROR", "PROTOCOL", "INTERNAL", "FLOW_CONTROL", "REFUSED", "CANCEL", "CHECKSUM", "TOO_LARGE", "CODEC"}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("CODE(%d)", uint32(c))
}

// MaxReason bounds the UTF-8 reason carried by RST_STREAM and GOAWAY.
const MaxReason = 256

// clipReason cuts s to MaxReason bytes at a UTF-8 character boundary, so the reason stays
// valid UTF-8 as SPEC.md requires.
func clipReason(s string) string {
	if len(s) <= MaxReason {
		return s
	}
	i := MaxReason
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
