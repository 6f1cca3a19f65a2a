package spool

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeRecord: decode and decodeDead never panic on what they find in the file (raw),
// and read back what encode and encodeDead wrote (the other arguments).
func FuzzDecodeRecord(f *testing.F) {
	const spoolID = "0123456789abcdef"
	accepted := time.Unix(1_790_000_000, 987_654_321)
	msg := request("orders", soapBody(7))(MessageID(spoolID, 7))
	rec := encode(nil, Message{Peer: "peer-a", Upstream: "orders", Accepted: accepted, Data: msg})
	dead := encodeDead(nil, rec, "refused: 500", []byte("HTTP/1.1 500 Internal Server Error\r\n\r\n"))
	for _, raw := range [][]byte{
		rec,
		dead,
		encode(nil, Message{Accepted: accepted}),
		encodeDead(nil, encode(nil, Message{}), "", nil),
		{},
		{recordVersion},
		{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		{recordVersion, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
	} {
		f.Add(uint64(7), raw, "peer-a", "orders", accepted.UnixNano(), msg, "refused: 500", []byte("answer"))
	}
	f.Add(uint64(1<<63), []byte{}, "", "", int64(0), []byte{}, "", []byte{})
	f.Add(uint64(0), dead, "p", "u", int64(-1), []byte("x"), "in doubt", []byte(nil))
	f.Fuzz(func(t *testing.T, seq uint64, raw []byte, peer, upstream string, ns int64, data []byte, reason string, answer []byte) {
		key := seqKey(seq)
		orig := bytes.Clone(raw)

		// Whatever the file holds: an error or a message, never a panic.
		if m, err := decode(key, raw, spoolID); err == nil {
			require.Equal(t, seq, m.Seq)
			require.Equal(t, MessageID(spoolID, seq), m.ID)
			require.True(t, bytes.HasSuffix(raw, m.Data))
		}
		if d, err := decodeDead(key, raw, spoolID); err == nil {
			require.Equal(t, seq, d.Seq)
			require.True(t, bytes.HasSuffix(raw, d.Answer))
			if len(d.Data) > 0 {
				require.NotSame(t, &raw[0], &d.Data[0], "a dead letter's data is a copy")
			}
		}
		for _, k := range [][]byte{nil, key[:7], append(key, 0)} { // keys are 8 bytes
			_, err := decode(k, raw, spoolID)
			require.ErrorIs(t, err, errCorrupt)
			_, err = decodeDead(k, raw, spoolID)
			require.Error(t, err)
		}
		require.Equal(t, orig, raw, "decoding does not write to the record")

		// What encode writes decodes to the same message.
		want := Message{Seq: seq, ID: MessageID(spoolID, seq), Peer: peer, Upstream: upstream, Accepted: time.Unix(0, ns), Data: data}
		v := encode(nil, want)
		m, err := decode(key, v, spoolID)
		require.NoError(t, err)
		requireSameMessage(t, want, m)

		// And as a dead letter, with the reason and the answer.
		d, err := decodeDead(key, encodeDead(nil, v, reason, answer), spoolID)
		require.NoError(t, err)
		requireSameMessage(t, want, d.Message)
		require.Equal(t, reason, d.Reason)
		require.Equal(t, string(answer), string(d.Answer))

		// A truncated record never decodes to more than it holds.
		for _, n := range []int{0, 1, 8, 9, len(v) - len(data) - 1} {
			if n >= 0 && n < len(v)-len(data) {
				_, err := decode(key, v[:n], spoolID)
				require.ErrorIs(t, err, errCorrupt, "record cut to %d of %d bytes", n, len(v))
			}
		}
	})
}

func requireSameMessage(t *testing.T, want, got Message) {
	t.Helper()
	require.Equal(t, want.Seq, got.Seq)
	require.Equal(t, want.ID, got.ID)
	require.Equal(t, want.Peer, got.Peer)
	require.Equal(t, want.Upstream, got.Upstream)
	require.True(t, want.Accepted.Equal(got.Accepted), "accepted %v, want %v", got.Accepted, want.Accepted)
	require.Equal(t, string(want.Data), string(got.Data))
}
