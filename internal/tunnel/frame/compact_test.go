package frame

import (
	"bufio"
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompactRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		h    Header
		prev uint32
		want []byte // the encoded header
	}{
		{"first frame of stream 1", Header{Type: TypeData, Flags: FlagStart | FlagEnd, StreamID: 1, Length: 30}, 0, []byte{0xe0, 30, 2}},
		{"next request stream", Header{Type: TypeData, Flags: FlagStart | FlagEnd, StreamID: 3, Length: 300}, 1, []byte{0xe1, 0x2c, 4}},
		{"middle frame, same stream", Header{Type: TypeData, StreamID: 7, Length: MaxCompactLength}, 7, []byte{0x9f, 0xff, 0}},
		{"older stream", Header{Type: TypeData, Flags: FlagEnd, StreamID: 5, Length: 0}, 9, []byte{0xa0, 0, 7}},
		{"largest id from 0", Header{Type: TypeData, StreamID: 1<<31 - 1, Length: 1}, 0, []byte{0x80, 1, 0xfe, 0xff, 0xff, 0xff, 0x0f}},
		{"smallest id from the largest", Header{Type: TypeData, StreamID: 1, Length: 1}, 1<<31 - 1, []byte{0x80, 1, 0xfb, 0xff, 0xff, 0xff, 0x0f}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.True(t, tt.h.Compactable())
			b := tt.h.AppendCompact(nil, tt.prev)
			require.Equal(t, tt.want, b)
			require.True(t, IsCompact(b[0]))
			got, n, err := ReadCompact(b[0], bytes.NewReader(b[1:]), tt.prev, 0)
			require.NoError(t, err)
			require.Equal(t, len(b)-1, n)
			require.Equal(t, tt.h, got)
		})
	}
}

func TestCompactable(t *testing.T) {
	require.False(t, Header{Type: TypeData, StreamID: 1, Length: MaxCompactLength + 1}.Compactable(), "too long")
	require.False(t, Header{Type: TypePing, Length: 8}.Compactable(), "not DATA")
	require.False(t, Header{Type: TypeData, StreamID: 1, Flags: 0x4}.Compactable(), "unknown flag")
	require.False(t, Header{Type: TypeData, StreamID: 0}.Compactable(), "stream 0")
	// A full header never looks compact: its first byte is the top of a length ≤ 1 MiB.
	require.False(t, IsCompact(Header{Type: TypeData, StreamID: 1, Length: MaxPayload}.Append(nil)[0]))
}

func TestReadCompactRejects(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		prev uint32
		max  uint32
		want error
	}{
		{"stream id 0", []byte{0x80, 1, 1}, 1, 0, ErrBadPayload},
		{"negative stream id", []byte{0x80, 1, 5}, 1, 0, ErrBadPayload},
		{"stream id 2^31", []byte{0x80, 1, 2}, 1<<31 - 1, 0, ErrBadPayload},
		{"delta longer than 5 bytes", []byte{0x80, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 0, 0, ErrBadPayload},
		{"overlong delta", []byte{0x80, 1, 0x82, 0x00}, 0, 0, ErrBadPayload},
		{"over the receiver's max", []byte{0x9f, 0xff, 2}, 0, 4096, ErrFrameTooLarge},
		{"truncated after b0", []byte{0x80}, 0, 0, io.EOF},
		{"truncated delta", []byte{0x80, 1, 0x80}, 0, 0, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ReadCompact(tt.b[0], bufio.NewReader(bytes.NewReader(tt.b[1:])), tt.prev, tt.max)
			require.ErrorIs(t, err, tt.want)
		})
	}
}

func FuzzReadCompact(f *testing.F) {
	f.Add([]byte{0xe0, 30, 2}, uint32(0))
	f.Add([]byte{0x80, 1, 0xfe, 0xff, 0xff, 0xff, 0x0f}, uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, prev uint32) {
		prev &= 1<<31 - 1
		if len(b) == 0 || !IsCompact(b[0]) {
			return
		}
		h, n, err := ReadCompact(b[0], bytes.NewReader(b[1:]), prev, 0)
		if err != nil {
			return
		}
		// What parses re-encodes to the bytes it came from.
		require.Equal(t, b[:1+n], h.AppendCompact(nil, prev))
	})
}
