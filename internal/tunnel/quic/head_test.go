package quic

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHeadGolden pins the message head encoding of SPEC.md.
func TestHeadGolden(t *testing.T) {
	for name, tc := range map[string]struct {
		h   head
		hex string
	}{
		"identity":                  {head{}, "00"},
		"identity with ack":         {head{HasAck: true, Ack: 300}, "80ac02"},
		"stateless zstd":            {head{Codec: 2, Mode: modeStateless, RawLen: 700}, "0200bc05"},
		"sequenced token":           {head{Codec: 4, Mode: modeSequenced, Seq: 7, RawLen: 700, CRC: 0xdeadbeef}, "040107bc05deadbeef"},
		"fresh token with ack":      {head{Codec: 4, HasAck: true, Ack: 1, Mode: modeFresh, Seq: 1, RawLen: 1, CRC: 1}, "8401020101" + "00000001"},
		"stateless, 2^40 raw bytes": {head{Codec: 1, RawLen: 1 << 40}, "0100808080808020"},
		"streamed zstd-streaming":   {head{Codec: 5, Mode: modeStreamed}, "0503"},
		"streamed with ack":         {head{Codec: 5, HasAck: true, Ack: 2, Mode: modeStreamed}, "850203"},
	} {
		t.Run(name, func(t *testing.T) {
			b := tc.h.append(nil)
			require.Equal(t, tc.hex, hex.EncodeToString(b))
			got, n, err := parseHead(append(b, "payload"...))
			require.NoError(t, err)
			require.Equal(t, len(b), n)
			require.Equal(t, tc.h, got)
			for i := range len(b) { // every proper prefix asks for more
				_, _, err := parseHead(b[:i])
				require.ErrorIs(t, err, errShortHead, "prefix of %d bytes", i)
			}
		})
	}
}

func TestParseHeadRejects(t *testing.T) {
	for name, in := range map[string]string{
		"mode 4":          "0104",
		"seq 0":           "040100bc05deadbeef",
		"ack overflow":    "80ffffffffffffffffffff01",
		"length overflow": "0200ffffffffffffffffffff01",
	} {
		t.Run(name, func(t *testing.T) {
			b, err := hex.DecodeString(in)
			require.NoError(t, err)
			_, _, err = parseHead(b)
			require.ErrorIs(t, err, ErrBadHead)
		})
	}
}

func TestControlFrames(t *testing.T) {
	b := appendCtrl(nil, ctrlAck, []byte{0x05})
	require.Equal(t, "010105", hex.EncodeToString(b))
	// ABANDON of stream 8 (the edge's third exchange stream after the control stream).
	require.Equal(t, "060108", hex.EncodeToString(appendCtrl(nil, ctrlAbandon, binary.AppendUvarint(nil, 8))))
	// RECEIVED: 300 packets received so far.
	require.Equal(t, "0702ac02", hex.EncodeToString(appendCtrl(nil, ctrlReceived, binary.AppendUvarint(nil, 300))))
	// CARRY: empty.
	require.Equal(t, "0800", hex.EncodeToString(appendCtrl(nil, ctrlCarry, nil)))
	// HAVE of streams 4, 8 and 300.
	have := binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(nil, 4), 8), 300)
	require.Equal(t, "09040408ac02", hex.EncodeToString(appendCtrl(nil, ctrlHave, have)))
	r := bytes.NewReader(append(b, appendCtrl(nil, ctrlGoAway, []byte("bye"))...))
	typ, p, err := readCtrl(r, nil)
	require.NoError(t, err)
	require.Equal(t, byte(ctrlAck), typ)
	seq, err := parseSeq(p)
	require.NoError(t, err)
	require.Equal(t, uint64(5), seq)
	typ, p, err = readCtrl(r, nil)
	require.NoError(t, err)
	require.Equal(t, byte(ctrlGoAway), typ)
	require.Equal(t, "bye", string(p))
	_, _, err = readCtrl(r, nil)
	require.ErrorIs(t, err, io.EOF)

	_, _, err = readCtrl(bytes.NewReader([]byte{1, 0x81, 0x40}), nil) // 8193 bytes
	require.ErrorIs(t, err, ErrBadHead)
	_, _, err = readCtrl(bytes.NewReader([]byte{1, 3, 1}), nil) // cut short
	require.ErrorIs(t, err, ErrBadHead)
	_, err = parseSeq([]byte{5, 6})
	require.ErrorIs(t, err, ErrBadHead)
}

// FuzzReadCtrl: any byte stream yields frames, a clean end, or ErrBadHead; never a panic
// nor a payload above the bound.
func FuzzReadCtrl(f *testing.F) {
	f.Add(appendCtrl(appendCtrl(nil, ctrlAck, []byte{7}), ctrlNack, []byte{8}))
	f.Add([]byte{3, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			_, p, err := readCtrl(r, nil)
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrBadHead) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(p) > maxCtrlPayload {
				t.Fatalf("payload of %d bytes", len(p))
			}
		}
	})
}

// FuzzParseHead: the parser never panics, and what it accepts re-encodes to its input.
func FuzzParseHead(f *testing.F) {
	for _, h := range []head{{}, {HasAck: true, Ack: 9}, {Codec: 2, RawLen: 5}, {Codec: 4, Mode: modeFresh, Seq: 1, RawLen: 3, CRC: 7}} {
		f.Add(h.append(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := parseHead(b)
		if err != nil {
			if !errors.Is(err, errShortHead) && !errors.Is(err, ErrBadHead) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if n > maxHeadLen {
			t.Fatalf("head of %d bytes", n)
		}
		// Uvarints have non-minimal encodings; the canonical re-encoding parses the same.
		again, m, err := parseHead(h.append(nil))
		if err != nil || again != h || m > n {
			t.Fatalf("re-encoding %+v: %+v, %d, %v", h, again, m, err)
		}
	})
}
