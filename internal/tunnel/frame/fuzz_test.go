package frame_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

func FuzzParseHeader(f *testing.F) {
	for _, h := range []frame.Header{
		{},
		{Length: 11, Type: frame.TypeData, Flags: frame.FlagStart | frame.FlagEnd, StreamID: 1},
		{Length: 4, Type: frame.TypeWindowUpdate, StreamID: 1<<31 - 1},
		{Length: 8, Type: frame.TypePing, Flags: frame.FlagAck},
		{Length: frame.MaxPayload, Type: frame.TypeHello},
		{Length: 1<<24 - 1, Type: 0xff, Flags: 0xff, StreamID: 42},
	} {
		f.Add(h.Append(nil), uint32(0))
		f.Add(h.Append(nil), uint32(65536))
	}
	f.Add([]byte{0, 0, 0, 0, 0, 0x80, 0, 0, 1}, uint32(1))
	f.Add([]byte{1, 2, 3}, uint32(0))
	f.Add(bytes.Repeat([]byte{0xff}, 12), uint32(1<<32-1))

	f.Fuzz(func(t *testing.T, b []byte, announced uint32) {
		h, err := frame.ParseHeader(b, announced)
		if len(b) < frame.HeaderLen {
			require.ErrorIs(t, err, frame.ErrShort)
			return
		}
		limit := announced
		if limit == 0 || limit > frame.MaxPayload {
			limit = frame.MaxPayload
		}
		// The header always decodes fully, even when it is rejected for its length.
		wire := append([]byte(nil), b[:frame.HeaderLen]...)
		wire[5] &= 0x7f // R is ignored on receipt and sent as 0
		require.Equal(t, wire, h.Append(nil))
		require.Less(t, h.StreamID, uint32(1<<31))
		require.Less(t, h.Length, uint32(1<<24))
		if h.Length > limit {
			require.ErrorIs(t, err, frame.ErrFrameTooLarge)
			return
		}
		require.NoError(t, err)
		again, err := frame.ParseHeader(h.Append(nil), announced)
		require.NoError(t, err)
		require.Equal(t, h, again)
	})
}

// FuzzPayloads feeds the same bytes to every payload parser. None may panic; a failure must
// be ErrBadPayload; a success must re-encode to bytes that parse to the same value (and, for
// the fixed binary payloads, to the same bytes).
func FuzzPayloads(f *testing.F) {
	seeds := [][]byte{
		nil,
		{0},
		frame.Preamble{}.Append(nil),
		frame.Preamble{Codec: 2, Epoch: 300}.Append([]byte(nil)),
		append(frame.Preamble{Codec: 127, Epoch: 1<<64 - 1}.Append(nil), "<x/>"...),
		append(frame.Preamble{Codec: 4, Epoch: 7, Ack: 300}.Append(nil), "<y/>"...),
		{0x80, 0, 0},
		{0xff, 1, 0x80},
		frame.AppendCodecAck(nil, 1),
		frame.AppendCodecAck(nil, 1<<64-1),
		frame.AppendCodecNack(nil, 2, "decode: bad token"),
		frame.AppendCodecNack(nil, 0, ""),
		{0, 0x81, 0x80, 0x00},
		frame.AppendTrailer([]byte("hello"), 0x9a71bb4c),
		frame.AppendWindowUpdate(nil, 1),
		frame.AppendWindowUpdate(nil, 1<<31-1),
		frame.AppendRST(nil, frame.CodeCancel, "client gone"),
		frame.AppendRST(nil, frame.CodeInternal, string(bytes.Repeat([]byte("r"), frame.MaxReason))),
		frame.AppendGoAway(nil, 41, frame.CodeProtocol, "bad proto"),
		frame.AppendGoAway(nil, 1<<31-1, frame.CodeNoError, ""),
		frame.AppendPing(nil, 0x0102030405060708),
		frame.AppendHello(nil, specHello()),
		[]byte(specJSON),
		[]byte(`{"proto":2,"node":"\u00e9<&>","codecs":[0,1,2],"max_frame":1024,"window":1024,"max_streams":1,"max_coded":65536,"x":[]}`),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(nil), b...)
		badPayload := func(err error) {
			t.Helper()
			require.True(t, errors.Is(err, frame.ErrBadPayload), "error %v is not ErrBadPayload", err)
		}

		if p, rest, err := frame.ParsePreamble(b); err != nil {
			badPayload(err)
		} else {
			consumed := len(b) - len(rest)
			require.Equal(t, b[consumed:], rest)
			require.GreaterOrEqual(t, consumed, p.Len()) // longer only for padded uvarints
			enc := p.Append(nil)
			require.Len(t, enc, p.Len())
			again, rest2, err := frame.ParsePreamble(enc)
			require.NoError(t, err)
			require.Equal(t, p, again)
			require.Empty(t, rest2)
		}

		if data, crc, err := frame.ParseTrailer(b); err != nil {
			badPayload(err)
		} else {
			require.Equal(t, b, frame.AppendTrailer(append([]byte(nil), data...), crc))
		}

		if v, err := frame.ParseWindowUpdate(b); err != nil {
			badPayload(err)
		} else {
			require.True(t, v >= 1 && v <= 1<<31-1, "increment %d", v)
			require.Equal(t, b, frame.AppendWindowUpdate(nil, v))
		}

		if code, reason, err := frame.ParseRST(b); err != nil {
			badPayload(err)
		} else {
			require.LessOrEqual(t, len(reason), frame.MaxReason)
			require.Equal(t, b, frame.AppendRST(nil, code, reason))
		}

		if last, code, reason, err := frame.ParseGoAway(b); err != nil {
			badPayload(err)
		} else {
			require.Less(t, last, uint32(1<<31))
			require.LessOrEqual(t, len(reason), frame.MaxReason)
			enc := frame.AppendGoAway(nil, last, code, reason)
			want := append([]byte(nil), b...)
			want[0] &= 0x7f
			require.Equal(t, want, enc)
			l2, c2, r2, err := frame.ParseGoAway(enc)
			require.NoError(t, err)
			require.Equal(t, []any{last, code, reason}, []any{l2, c2, r2})
		}

		if v, err := frame.ParsePing(b); err != nil {
			badPayload(err)
		} else {
			require.Equal(t, b, frame.AppendPing(nil, v))
		}

		if n, err := frame.ParseCodecAck(b); err != nil {
			badPayload(err)
		} else {
			require.NotZero(t, n)
			again, err := frame.ParseCodecAck(frame.AppendCodecAck(nil, n))
			require.NoError(t, err)
			require.Equal(t, n, again)
		}

		if epoch, reason, err := frame.ParseCodecNack(b); err != nil {
			badPayload(err)
		} else {
			require.LessOrEqual(t, len(reason), frame.MaxReason)
			e2, r2, err := frame.ParseCodecNack(frame.AppendCodecNack(nil, epoch, reason))
			require.NoError(t, err)
			require.Equal(t, epoch, e2)
			require.Equal(t, reason, r2)
		}

		if h, err := frame.ParseHello(b); err != nil {
			badPayload(err)
		} else {
			enc := frame.AppendHello(nil, h)
			again, err := frame.ParseHello(enc)
			require.NoError(t, err, "re-encoded HELLO %q", enc)
			require.Equal(t, h, again)
		}

		require.True(t, bytes.Equal(in, b), "parsers must not modify their input")
	})
}
