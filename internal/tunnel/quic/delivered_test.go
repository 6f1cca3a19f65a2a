package quic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/codec"
)

// TestUDPAfterDelivered: the origin hears of every response the edge has whole: of the
// sequenced ones by ACK, of the others by HAVE (stateless ones: with a window of 1, 16
// clients find the lane busy; identity ones, without codecs), which rides the next
// request or goes haveDelay after the last response.
func TestUDPAfterDelivered(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    pairOptions
	}{
		{"auto window", pairOptions{codecs: true}},
		{"window 1", pairOptions{codecs: true, window: 1}},
		{"identity", pairOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.o)
			var delivered atomic.Int64
			p.setHandler(func(ctx context.Context, st *Stream) {
				st.AfterDelivered(func() { delivered.Add(1) })
				echoHandler(ctx, st)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const sequential = 30
			p.echoCalls(t, ctx, 0, sequential, 700)
			// 16 at once: they share the lane; those that find it busy go stateless.
			p.callConcurrently(t, ctx, 16, 10, func(w, i int) []byte { return soapMessage(w*1000+i, 300+w*97) })
			const total = sequential + 16*10

			answers := func(mode string) float64 {
				return p.counter(t, "soapgw_udp_codec_messages_total", "peer", "edge", "direction", "sent", "mode", mode)
			}
			acked, stateless := answers("sequenced")+answers("fresh"), answers("stateless")
			t.Logf("%.0f sequenced, %.0f stateless, %.0f identity", acked, stateless, total-acked-stateless)
			if tc.o.codecs && tc.o.window == 0 {
				require.GreaterOrEqual(t, acked, float64(sequential))
			}
			// The last acknowledgement rides on a control frame after the ack delay, the
			// last HAVE after haveDelay.
			require.Eventually(t, func() bool { return delivered.Load() == total }, 10*time.Second, time.Millisecond,
				"delivered %d of %d answers", delivered.Load(), total)
			if acked < total {
				require.Positive(t, p.counter(t, "soapgw_udp_have_frames_total", "peer", "edge", "direction", "received"))
			}
			p.srv.mu.Lock()
			conns := make([]*conn, 0, len(p.srv.conns))
			for c := range p.srv.conns {
				conns = append(conns, c)
			}
			p.srv.mu.Unlock()
			require.NotEmpty(t, conns)
			for _, c := range append(conns, p.edgeConns()...) {
				c.enc.mu.Lock()
				left := len(c.enc.awaiting)
				c.enc.mu.Unlock()
				require.Zero(t, left, "nothing left awaiting an acknowledgement")
				c.haveWaits.mu.Lock()
				left = len(c.haveWaits.byID)
				c.haveWaits.mu.Unlock()
				require.Zero(t, left, "nothing left awaiting HAVE")
			}
		})
	}
}

// TestUDPCodecSwitchWaitsForTheLane: a message in another codec than the unacknowledged
// ones in the lane goes stateless rather than fresh. A fresh message could overtake them,
// and the receiver, past their numbers, would refuse them (the exchanges collected by a
// resume) while its acknowledgement covered them: the origin, told they were delivered,
// forgot their responses. (Seen in e2e TestUDPAddressChangeUnderLoad: an mtom-multipart
// response switched the lane to zstd-stream; a token response was refused as "already
// decoded", then not held.) Once the lane has drained, the switch is a fresh message.
func TestUDPCodecSwitchWaitsForTheLane(t *testing.T) {
	p := newPair(t, pairOptions{codecs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.call(ctx, soapMessage(1, 500)) // the connection is up and idle
	require.NoError(t, err)
	c := p.edgeConns()[0]
	token, stream := uint8(codec.Token), uint8(codec.ZstdStream)
	told := map[string]*atomic.Int32{}
	encode := func(name string, id uint8) (head, error) {
		st := &Stream{}
		n := &atomic.Int32{}
		told[name] = n
		st.AfterDelivered(func() { n.Add(1) })
		h, _, err := c.encodeSequenced(st, id, nil, soapMessage(len(told), 400), false, time.Time{})
		return h, err
	}
	_, err = encode("a", token)
	require.NoError(t, err)
	b, err := encode("b", token)
	require.NoError(t, err)
	_, err = encode("early switch", stream)
	require.ErrorIs(t, err, errLaneBusy, "token messages unacknowledged: no fresh state yet")
	c.onAck(b.Seq)
	require.EqualValues(t, 1, told["a"].Load())
	require.EqualValues(t, 1, told["b"].Load())
	h, err := encode("switch", stream)
	require.NoError(t, err)
	require.Equal(t, uint8(modeFresh), h.Mode, "the lane drained: the switch starts fresh")
	c.onAck(h.Seq)
	require.EqualValues(t, 1, told["switch"].Load())
	require.Zero(t, told["early switch"].Load())
}
