package frame_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

func TestHeaderRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		h    frame.Header
		wire []byte
	}{
		{"zero", frame.Header{}, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"data start end", frame.Header{Length: 11, Type: frame.TypeData, Flags: frame.FlagStart | frame.FlagEnd, StreamID: 1},
			[]byte{0, 0, 11, 0, 3, 0, 0, 0, 1}},
		{"byte order", frame.Header{Length: 0x0a0b0c, Type: frame.TypeGoAway, Flags: 0x5a, StreamID: 0x01020304},
			[]byte{0x0a, 0x0b, 0x0c, 4, 0x5a, 1, 2, 3, 4}},
		{"max payload", frame.Header{Length: frame.MaxPayload, Type: frame.TypeData, StreamID: 3},
			[]byte{0x10, 0, 0, 0, 0, 0, 0, 0, 3}},
		{"max stream id", frame.Header{Length: 4, Type: frame.TypeWindowUpdate, StreamID: 1<<31 - 1},
			[]byte{0, 0, 4, 1, 0, 0x7f, 0xff, 0xff, 0xff}},
		{"unknown type all flags", frame.Header{Length: 1, Type: 0xff, Flags: 0xff, StreamID: 2},
			[]byte{0, 0, 1, 0xff, 0xff, 0, 0, 0, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.h.Append(nil)
			require.Equal(t, tt.wire, got)
			require.Len(t, got, frame.HeaderLen)

			h, err := frame.ParseHeader(got, 0)
			require.NoError(t, err)
			require.Equal(t, tt.h, h)

			// Append appends: an existing prefix is kept, trailing input bytes are not read.
			prefixed := tt.h.Append([]byte("xy"))
			require.Equal(t, append([]byte("xy"), tt.wire...), prefixed)
			h, err = frame.ParseHeader(append(got, 0xee, 0xee), 0)
			require.NoError(t, err)
			require.Equal(t, tt.h, h)
		})
	}
}

func TestHeaderMax24BitLength(t *testing.T) {
	// The wire has room for 2^24-1, far above MaxPayload: the header still decodes fully
	// (useful for logging), but the frame is rejected.
	want := frame.Header{Length: 1<<24 - 1, Type: frame.TypeData, Flags: frame.FlagEnd, StreamID: 9}
	wire := want.Append(nil)
	require.Equal(t, []byte{0xff, 0xff, 0xff, 0, 2, 0, 0, 0, 9}, wire)
	for _, limit := range []uint32{0, frame.MaxPayload, 1<<24 - 1, 1<<32 - 1} {
		h, err := frame.ParseHeader(wire, limit)
		require.ErrorIs(t, err, frame.ErrFrameTooLarge, "max=%d", limit)
		require.Equal(t, want, h, "max=%d", limit)
	}
}

func TestHeaderStreamIDTopBitMaskedOnAppend(t *testing.T) {
	h := frame.Header{Type: frame.TypePing, StreamID: 0xffffffff}
	wire := h.Append(nil)
	require.Equal(t, []byte{0, 0, 0, 3, 0, 0x7f, 0xff, 0xff, 0xff}, wire)
	got, err := frame.ParseHeader(wire, 0)
	require.NoError(t, err)
	require.Equal(t, uint32(0x7fffffff), got.StreamID)

	wire = frame.Header{StreamID: 1 << 31}.Append(nil)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0}, wire)
}

func TestHeaderReservedBitIgnoredOnParse(t *testing.T) {
	tests := []struct {
		wire   []byte
		stream uint32
	}{
		{[]byte{0, 0, 0, 0, 0, 0x80, 0, 0, 0}, 0},
		{[]byte{0, 0, 0, 0, 0, 0x80, 0, 0, 1}, 1},
		{[]byte{0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, 0x7fffffff},
		{[]byte{0, 0, 0, 0, 0, 0x81, 0x02, 0x03, 0x04}, 0x01020304},
	}
	for _, tt := range tests {
		h, err := frame.ParseHeader(tt.wire, 0)
		require.NoError(t, err, "%x", tt.wire)
		require.Equal(t, tt.stream, h.StreamID, "%x", tt.wire)
		// Re-encoding sends R as 0.
		cleared := append([]byte(nil), tt.wire...)
		cleared[5] &= 0x7f
		require.Equal(t, cleared, h.Append(nil))
	}
}

func TestHeaderLengthLimit(t *testing.T) {
	tests := []struct {
		name   string
		length uint32
		max    uint32
		ok     bool
	}{
		{"zero length", 0, 1, true},
		{"at max", 100, 100, true},
		{"above max", 101, 100, false},
		{"max 1", 2, 1, false},
		{"max 0 means MaxPayload: at", frame.MaxPayload, 0, true},
		{"max 0 means MaxPayload: above", frame.MaxPayload + 1, 0, false},
		{"max 0 small frame", 16 << 10, 0, true},
		{"max above ceiling is capped: at", frame.MaxPayload, frame.MaxPayload + 1000, true},
		{"max above ceiling is capped: above", frame.MaxPayload + 1, frame.MaxPayload + 1000, false},
		{"max uint32 is capped", 1<<24 - 1, 1<<32 - 1, false},
		{"announced 64KiB: at", 65536, 65536, true},
		{"announced 64KiB: above", 65537, 65536, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := frame.Header{Length: tt.length, Type: frame.TypeData, StreamID: 1}
			h, err := frame.ParseHeader(want.Append(nil), tt.max)
			require.Equal(t, want, h)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, frame.ErrFrameTooLarge), "got %v", err)
			require.False(t, errors.Is(err, frame.ErrShort))
			require.False(t, errors.Is(err, frame.ErrBadPayload))
		})
	}
}

func TestHeaderShort(t *testing.T) {
	full := frame.Header{Length: 1 << 20, Type: frame.TypeHello, StreamID: 7}.Append(nil)
	for n := 0; n < frame.HeaderLen; n++ {
		h, err := frame.ParseHeader(full[:n], 0)
		require.ErrorIs(t, err, frame.ErrShort, "len %d", n)
		require.False(t, errors.Is(err, frame.ErrFrameTooLarge))
		require.Equal(t, frame.Header{}, h)
	}
	_, err := frame.ParseHeader(nil, 0)
	require.ErrorIs(t, err, frame.ErrShort)
	// Short wins over a length that would also be too large.
	_, err = frame.ParseHeader([]byte{0xff, 0xff, 0xff, 0, 0, 0, 0, 0}, 1)
	require.ErrorIs(t, err, frame.ErrShort)
}

func TestErrorsAreDistinct(t *testing.T) {
	errs := []error{frame.ErrShort, frame.ErrFrameTooLarge, frame.ErrBadPayload}
	for i, a := range errs {
		for j, b := range errs {
			require.Equal(t, i == j, errors.Is(a, b), "%v vs %v", a, b)
		}
	}
}

func TestTypeString(t *testing.T) {
	tests := map[frame.Type]string{
		frame.TypeData:         "DATA",
		frame.TypeWindowUpdate: "WINDOW_UPDATE",
		frame.TypeRSTStream:    "RST_STREAM",
		frame.TypePing:         "PING",
		frame.TypeGoAway:       "GOAWAY",
		frame.TypeHello:        "HELLO",
		frame.TypeCodecAck:     "CODEC_ACK",
		frame.TypeCodecNack:    "CODEC_NACK",
		0x8:                    "UNKNOWN(0x8)",
		0xff:                   "UNKNOWN(0xff)",
	}
	for typ, want := range tests {
		require.Equal(t, want, typ.String())
	}
	// Wire values from SPEC.md.
	require.Equal(t, []frame.Type{0, 1, 2, 3, 4, 5, 6, 7}, []frame.Type{
		frame.TypeData, frame.TypeWindowUpdate, frame.TypeRSTStream,
		frame.TypePing, frame.TypeGoAway, frame.TypeHello, frame.TypeCodecAck, frame.TypeCodecNack,
	})
}

func TestHeaderString(t *testing.T) {
	h := frame.Header{Length: 11, Type: frame.TypeData, Flags: frame.FlagStart | frame.FlagEnd, StreamID: 5}
	require.Equal(t, "DATA stream=5 flags=0x3 len=11", h.String())
	require.Equal(t, "UNKNOWN(0x9) stream=0 flags=0x0 len=0", frame.Header{Type: 9}.String())
}

func TestFlags(t *testing.T) {
	require.Equal(t, frame.Flags(0x1), frame.FlagStart)
	require.Equal(t, frame.Flags(0x2), frame.FlagEnd)
	require.Equal(t, frame.Flags(0x1), frame.FlagAck)

	both := frame.FlagStart | frame.FlagEnd
	require.True(t, both.Has(frame.FlagStart))
	require.True(t, both.Has(frame.FlagEnd))
	require.True(t, both.Has(both))
	require.True(t, frame.FlagStart.Has(0), "no bits are always set")
	require.False(t, frame.FlagStart.Has(frame.FlagEnd))
	require.False(t, frame.FlagStart.Has(both), "Has needs all bits")
	require.False(t, frame.Flags(0).Has(frame.FlagAck))
}

func TestCodeString(t *testing.T) {
	want := []string{"NO_ERROR", "PROTOCOL", "INTERNAL", "FLOW_CONTROL", "REFUSED", "CANCEL", "CHECKSUM", "TOO_LARGE", "CODEC"}
	codes := []frame.Code{
		frame.CodeNoError, frame.CodeProtocol, frame.CodeInternal, frame.CodeFlowControl,
		frame.CodeRefused, frame.CodeCancel, frame.CodeChecksum, frame.CodeTooLarge, frame.CodeCodec,
	}
	for i, c := range codes {
		require.Equal(t, frame.Code(i), c, "SPEC.md code value")
		require.Equal(t, want[i], c.String())
	}
	require.Equal(t, "CODE(9)", frame.Code(9).String())
	require.Equal(t, "CODE(4294967295)", frame.Code(1<<32-1).String())
}
