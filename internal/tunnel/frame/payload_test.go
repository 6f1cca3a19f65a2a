package frame_test

import (
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

func TestPreambleRoundTrip(t *testing.T) {
	tests := []struct {
		p    frame.Preamble
		wire []byte
	}{
		{frame.Preamble{}, []byte{0, 0}},
		{frame.Preamble{Codec: 1, Epoch: 1}, []byte{1, 1}},
		{frame.Preamble{Codec: 2, Epoch: 127}, []byte{2, 0x7f}},
		{frame.Preamble{Codec: 2, Epoch: 128}, []byte{2, 0x80, 0x01}},
		{frame.Preamble{Codec: 3, Epoch: 300}, []byte{3, 0xac, 0x02}},
		{frame.Preamble{Codec: 4, Epoch: 1<<14 - 1}, []byte{4, 0xff, 0x7f}},
		{frame.Preamble{Codec: 4, Epoch: 1 << 14}, []byte{4, 0x80, 0x80, 0x01}},
		{frame.Preamble{Codec: 127, Epoch: 1<<63 - 1}, []byte{127, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{frame.Preamble{Codec: 127, Epoch: math.MaxUint64}, []byte{127, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		// The top bit of the first byte says an ack count follows the epoch.
		{frame.Preamble{Ack: 1}, []byte{0x80, 0, 1}},
		{frame.Preamble{Codec: 4, Epoch: 2, Ack: 300}, []byte{0x84, 2, 0xac, 0x02}},
		{frame.Preamble{Codec: 127, Epoch: 1, Ack: math.MaxUint64}, []byte{0xff, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	}
	for _, tt := range tests {
		got := tt.p.Append(nil)
		require.Equal(t, tt.wire, got, "%+v", tt.p)
		require.Equal(t, len(tt.wire), tt.p.Len(), "%+v", tt.p)

		msg := []byte("<soap/>")
		p, rest, err := frame.ParsePreamble(append(got, msg...))
		require.NoError(t, err)
		require.Equal(t, tt.p, p)
		require.Equal(t, msg, rest)

		p, rest, err = frame.ParsePreamble(got)
		require.NoError(t, err)
		require.Equal(t, tt.p, p)
		require.Empty(t, rest)
	}
}

func TestPreambleLenMatchesAppend(t *testing.T) {
	for shift := 0; shift < 64; shift++ {
		for _, e := range []uint64{1<<shift - 1, 1 << shift, 1<<shift + 1} {
			p := frame.Preamble{Codec: uint8(shift), Epoch: e}
			require.Equal(t, len(p.Append(nil)), p.Len(), "epoch %d", e)
			require.Zero(t, p.AckLen())
			p.Ack = e
			withAck := p.Append(nil)
			require.Equal(t, len(withAck), p.Len(), "ack %d", e)
			if e == 0 {
				require.Zero(t, p.AckLen())
				continue
			}
			pNoAck := p
			pNoAck.Ack = 0
			require.Equal(t, len(withAck)-len(pNoAck.Append(nil)), p.AckLen(), "ack %d", e)
		}
	}
}

// Codec ids are 7 bits: the top bit of the first preamble byte is the ack flag, so an id
// above MaxCodecID cannot be sent (Append drops its top bit).
func TestPreambleCodecTopBit(t *testing.T) {
	require.Equal(t, []byte{0x7f, 1}, frame.Preamble{Codec: 0xff, Epoch: 1}.Append(nil))
	p, rest, err := frame.ParsePreamble([]byte{0x85, 3, 7, 'x'})
	require.NoError(t, err)
	require.Equal(t, frame.Preamble{Codec: 5, Epoch: 3, Ack: 7}, p)
	require.Equal(t, []byte("x"), rest)
}

func TestParsePreambleMalformed(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"codec only", []byte{0}},
		{"epoch truncated", []byte{0, 0x80}},
		{"epoch truncated longer", []byte{7, 0xff, 0xff, 0xff}},
		{"epoch overflows 64 bits", []byte{0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}},
		{"epoch longer than 10 bytes", []byte{0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}},
		{"ack bit without ack", []byte{0x80, 1}},
		{"ack bit with ack truncated", []byte{0x81, 1, 0x80}},
		{"ack of zero", []byte{0x81, 1, 0, 'x'}},
		{"ack overflows 64 bits", []byte{0x80, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, rest, err := frame.ParsePreamble(tt.in)
			require.ErrorIs(t, err, frame.ErrBadPayload)
			require.Equal(t, frame.Preamble{}, p)
			require.Nil(t, rest)
		})
	}
}

func TestParsePreambleNonCanonicalEpoch(t *testing.T) {
	// A padded uvarint still decodes to its value; all bytes of it are consumed.
	p, rest, err := frame.ParsePreamble([]byte{5, 0x81, 0x80, 0x00, 'x'})
	require.NoError(t, err)
	require.Equal(t, frame.Preamble{Codec: 5, Epoch: 1}, p)
	require.Equal(t, []byte("x"), rest)
}

func TestTrailerRoundTrip(t *testing.T) {
	for _, msg := range []string{"", "a", "hello world"} {
		for _, crc := range []uint32{0, 1, 0x9a71bb4c, math.MaxUint32} {
			b := frame.AppendTrailer([]byte(msg), crc)
			require.Len(t, b, len(msg)+frame.TrailerLen)
			data, got, err := frame.ParseTrailer(b)
			require.NoError(t, err)
			require.Equal(t, crc, got)
			require.Equal(t, msg, string(data))
		}
	}
	require.Equal(t, []byte{0x9a, 0x71, 0xbb, 0x4c}, frame.AppendTrailer(nil, 0x9a71bb4c), "big-endian")
}

func TestParseTrailerShort(t *testing.T) {
	for n := 0; n < frame.TrailerLen; n++ {
		data, crc, err := frame.ParseTrailer(make([]byte, n))
		require.ErrorIs(t, err, frame.ErrBadPayload, "len %d", n)
		require.Nil(t, data)
		require.Zero(t, crc)
	}
}

func TestWindowUpdate(t *testing.T) {
	for _, v := range []uint32{1, 2, 65536, 1 << 30, 1<<31 - 1} {
		b := frame.AppendWindowUpdate(nil, v)
		require.Len(t, b, 4)
		got, err := frame.ParseWindowUpdate(b)
		require.NoError(t, err)
		require.Equal(t, v, got)
	}
	require.Equal(t, []byte{0, 1, 0, 0}, frame.AppendWindowUpdate(nil, 65536))

	bad := map[string][]byte{
		"zero":        {0, 0, 0, 0},
		"2^31":        {0x80, 0, 0, 0},
		"2^31+1":      {0x80, 0, 0, 1},
		"max uint32":  {0xff, 0xff, 0xff, 0xff},
		"empty":       nil,
		"short":       {0, 0, 1},
		"long":        {0, 0, 0, 1, 0},
		"long valid8": {0, 0, 0, 1, 0, 0, 0, 1},
	}
	for name, b := range bad {
		v, err := frame.ParseWindowUpdate(b)
		require.ErrorIs(t, err, frame.ErrBadPayload, name)
		require.Zero(t, v, name)
	}
}

func TestRST(t *testing.T) {
	tests := []struct {
		code   frame.Code
		reason string
	}{
		{frame.CodeNoError, ""},
		{frame.CodeCancel, "client gone"},
		{frame.CodeCodec, "unknown codec 9 / epoch 4"},
		{frame.Code(math.MaxUint32), "ünïcödé"},
		{frame.CodeProtocol, strings.Repeat("r", frame.MaxReason)},
	}
	for _, tt := range tests {
		b := frame.AppendRST(nil, tt.code, tt.reason)
		require.Len(t, b, 4+len(tt.reason))
		code, reason, err := frame.ParseRST(b)
		require.NoError(t, err)
		require.Equal(t, tt.code, code)
		require.Equal(t, tt.reason, reason)
	}
	require.Equal(t, []byte{0, 0, 0, 6, 'x'}, frame.AppendRST(nil, frame.CodeChecksum, "x"))
}

func TestRSTReasonLimit(t *testing.T) {
	// Encoding clips an over-long reason to MaxReason bytes ...
	long := strings.Repeat("abcd", 100)
	b := frame.AppendRST(nil, frame.CodeInternal, long)
	require.Len(t, b, 4+frame.MaxReason)
	code, reason, err := frame.ParseRST(b)
	require.NoError(t, err)
	require.Equal(t, frame.CodeInternal, code)
	require.Equal(t, long[:frame.MaxReason], reason)

	// ... and parsing rejects one.
	over := append(frame.AppendRST(nil, frame.CodeInternal, ""), strings.Repeat("x", frame.MaxReason+1)...)
	_, _, err = frame.ParseRST(over)
	require.ErrorIs(t, err, frame.ErrBadPayload)

	for n := 0; n < 4; n++ {
		code, reason, err := frame.ParseRST(make([]byte, n))
		require.ErrorIs(t, err, frame.ErrBadPayload, "len %d", n)
		require.Zero(t, code)
		require.Empty(t, reason)
	}
}

func TestGoAway(t *testing.T) {
	tests := []struct {
		last   uint32
		code   frame.Code
		reason string
	}{
		{0, frame.CodeNoError, ""},
		{41, frame.CodeProtocol, "proto 2 not supported"},
		{1<<31 - 1, frame.CodeRefused, strings.Repeat("é", frame.MaxReason/2)},
		{7, frame.Code(1234), "x"},
	}
	for _, tt := range tests {
		b := frame.AppendGoAway(nil, tt.last, tt.code, tt.reason)
		require.Len(t, b, 8+len(tt.reason))
		last, code, reason, err := frame.ParseGoAway(b)
		require.NoError(t, err)
		require.Equal(t, tt.last, last)
		require.Equal(t, tt.code, code)
		require.Equal(t, tt.reason, reason)
	}
	require.Equal(t, []byte{0, 0, 0, 41, 0, 0, 0, 1, 'r'}, frame.AppendGoAway(nil, 41, frame.CodeProtocol, "r"))
}

func TestGoAwayLastStreamTopBit(t *testing.T) {
	b := frame.AppendGoAway(nil, 0xffffffff, frame.CodeNoError, "")
	require.Equal(t, []byte{0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0}, b, "top bit masked on encode")

	last, _, _, err := frame.ParseGoAway([]byte{0x80, 0, 0, 5, 0, 0, 0, 0})
	require.NoError(t, err)
	require.Equal(t, uint32(5), last, "top bit masked on parse")
}

func TestGoAwayReasonLimit(t *testing.T) {
	long := strings.Repeat("z", 1000)
	b := frame.AppendGoAway(nil, 3, frame.CodeInternal, long)
	require.Len(t, b, 8+frame.MaxReason)
	_, _, reason, err := frame.ParseGoAway(b)
	require.NoError(t, err)
	require.Equal(t, long[:frame.MaxReason], reason)

	over := append(frame.AppendGoAway(nil, 3, frame.CodeInternal, ""), strings.Repeat("x", frame.MaxReason+1)...)
	_, _, _, err = frame.ParseGoAway(over)
	require.ErrorIs(t, err, frame.ErrBadPayload)

	for n := 0; n < 8; n++ {
		last, code, reason, err := frame.ParseGoAway(make([]byte, n))
		require.ErrorIs(t, err, frame.ErrBadPayload, "len %d", n)
		require.Zero(t, last)
		require.Zero(t, code)
		require.Empty(t, reason)
	}
}

// TestReasonClipKeepsUTF8 is the regression test for clipReason cutting a multi-byte
// rune in half at byte MaxReason, which put invalid UTF-8 on the wire.
func TestReasonClipKeepsUTF8(t *testing.T) {
	reason := "x" + strings.Repeat("é", frame.MaxReason) // byte MaxReason is inside an "é"
	_, rst, err := frame.ParseRST(frame.AppendRST(nil, frame.CodeInternal, reason))
	require.NoError(t, err)
	require.LessOrEqual(t, len(rst), frame.MaxReason)
	require.True(t, utf8.ValidString(rst), "RST reason clipped mid-rune: %q", rst[len(rst)-4:])

	_, _, ga, err := frame.ParseGoAway(frame.AppendGoAway(nil, 1, frame.CodeInternal, reason))
	require.NoError(t, err)
	require.LessOrEqual(t, len(ga), frame.MaxReason)
	require.True(t, utf8.ValidString(ga), "GOAWAY reason clipped mid-rune: %q", ga[len(ga)-4:])
}

func TestPing(t *testing.T) {
	for _, v := range []uint64{0, 1, 0x0102030405060708, math.MaxUint64} {
		b := frame.AppendPing(nil, v)
		require.Len(t, b, frame.PingLen)
		got, err := frame.ParsePing(b)
		require.NoError(t, err)
		require.Equal(t, v, got)
	}
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8}, frame.AppendPing(nil, 0x0102030405060708))
	for _, n := range []int{0, 1, 7, 9, 16} {
		v, err := frame.ParsePing(make([]byte, n))
		require.ErrorIs(t, err, frame.ErrBadPayload, "len %d", n)
		require.Zero(t, v)
	}
}

// TestEncodersAppend checks that every encoder keeps the caller's prefix.
func TestEncodersAppend(t *testing.T) {
	prefix := []byte{0xaa, 0xbb}
	fresh := func() []byte { return append(make([]byte, 0, 64), prefix...) }
	encoded := map[string][2][]byte{
		"preamble": {frame.Preamble{Codec: 1, Epoch: 300}.Append(fresh()), frame.Preamble{Codec: 1, Epoch: 300}.Append(nil)},
		"ack":      {frame.Preamble{Codec: 1, Epoch: 3, Ack: 9}.Append(fresh()), frame.Preamble{Codec: 1, Epoch: 3, Ack: 9}.Append(nil)},
		"cack":     {frame.AppendCodecAck(fresh(), 5), frame.AppendCodecAck(nil, 5)},
		"cnack":    {frame.AppendCodecNack(fresh(), 5, "r"), frame.AppendCodecNack(nil, 5, "r")},
		"trailer":  {frame.AppendTrailer(fresh(), 7), frame.AppendTrailer(nil, 7)},
		"window":   {frame.AppendWindowUpdate(fresh(), 9), frame.AppendWindowUpdate(nil, 9)},
		"rst":      {frame.AppendRST(fresh(), 5, "r"), frame.AppendRST(nil, 5, "r")},
		"goaway":   {frame.AppendGoAway(fresh(), 3, 1, "g"), frame.AppendGoAway(nil, 3, 1, "g")},
		"ping":     {frame.AppendPing(fresh(), 42), frame.AppendPing(nil, 42)},
		"hello":    {frame.AppendHello(fresh(), specHello()), frame.AppendHello(nil, specHello())},
		"header":   {frame.Header{Length: 1, StreamID: 1}.Append(fresh()), frame.Header{Length: 1, StreamID: 1}.Append(nil)},
	}
	for name, e := range encoded {
		require.Equal(t, append(append([]byte(nil), prefix...), e[1]...), e[0], name)
	}
}

func TestCodecAck(t *testing.T) {
	for _, tt := range []struct {
		n    uint64
		wire []byte
	}{
		{1, []byte{1}},
		{127, []byte{0x7f}},
		{128, []byte{0x80, 1}},
		{300, []byte{0xac, 0x02}},
		{math.MaxUint64, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	} {
		b := frame.AppendCodecAck(nil, tt.n)
		require.Equal(t, tt.wire, b)
		got, err := frame.ParseCodecAck(b)
		require.NoError(t, err)
		require.Equal(t, tt.n, got)
	}
	bad := map[string][]byte{
		"empty":          nil,
		"zero":           {0},
		"padded zero":    {0x80, 0},
		"truncated":      {0x80},
		"trailing bytes": {1, 0},
		"overflow":       {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
	}
	for name, b := range bad {
		n, err := frame.ParseCodecAck(b)
		require.ErrorIs(t, err, frame.ErrBadPayload, name)
		require.Zero(t, n, name)
	}
}

func TestCodecNack(t *testing.T) {
	for _, tt := range []struct {
		epoch  uint64
		reason string
	}{
		{0, ""},
		{1, "decode: bad token"},
		{300, "checksum"},
		{math.MaxUint64, strings.Repeat("é", frame.MaxReason/2)},
	} {
		b := frame.AppendCodecNack(nil, tt.epoch, tt.reason)
		epoch, reason, err := frame.ParseCodecNack(b)
		require.NoError(t, err)
		require.Equal(t, tt.epoch, epoch)
		require.Equal(t, tt.reason, reason)
	}
	require.Equal(t, []byte{0xac, 0x02, 'x'}, frame.AppendCodecNack(nil, 300, "x"))

	// Encoding clips an over-long reason at a rune boundary; parsing rejects one.
	b := frame.AppendCodecNack(nil, 1, "x"+strings.Repeat("é", frame.MaxReason))
	_, reason, err := frame.ParseCodecNack(b)
	require.NoError(t, err)
	require.LessOrEqual(t, len(reason), frame.MaxReason)
	require.True(t, utf8.ValidString(reason))
	_, _, err = frame.ParseCodecNack(append([]byte{1}, strings.Repeat("x", frame.MaxReason+1)...))
	require.ErrorIs(t, err, frame.ErrBadPayload)

	for name, b := range map[string][]byte{"empty": nil, "truncated epoch": {0x80}, "overflow": {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}} {
		epoch, reason, err := frame.ParseCodecNack(b)
		require.ErrorIs(t, err, frame.ErrBadPayload, name)
		require.Zero(t, epoch)
		require.Empty(t, reason)
	}
}
