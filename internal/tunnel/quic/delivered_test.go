package quic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/codec"
)

// TestUDPAfterDelivered: the origin hears of each response the edge acknowledged
// decoding — every sequenced one — and of no stateless one (nothing acknowledges those).
func TestUDPAfterDelivered(t *testing.T) {
	p := newPair(t, pairOptions{codecs: true})
	var delivered atomic.Int64
	p.setHandler(func(ctx context.Context, st *Stream) {
		st.AfterDelivered(func() { delivered.Add(1) })
		echoHandler(ctx, st)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const sequential = 30
	for i := range sequential {
		req := soapMessage(i, 700)
		resp, err := p.call(ctx, req)
		require.NoError(t, err)
		require.Equal(t, append([]byte("echo:"), req...), resp)
	}
	// 16 at once: they share the lane (the auto window); any that find it busy go
	// stateless, unacknowledged and untold.
	p.callConcurrently(t, ctx, 16, 10, func(w, i int) []byte { return soapMessage(w*1000+i, 300+w*97) })

	answers := func(mode string) float64 {
		return p.counter(t, "soapgw_udp_codec_messages_total", "peer", "edge", "direction", "sent", "mode", mode)
	}
	acked := answers("sequenced") + answers("fresh")
	require.GreaterOrEqual(t, acked, float64(sequential))
	// The last acknowledgement rides on a control frame after the ack delay.
	require.Eventually(t, func() bool { return float64(delivered.Load()) == acked }, 10*time.Second, time.Millisecond,
		"delivered %d of %.0f sequenced answers (%.0f stateless)", delivered.Load(), acked, answers("stateless"))
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
	}
}

// TestUDPFreshMessageEndsDeliveryOfEarlierOnes: a fresh message (here a codec switch) may
// overtake the unacknowledged ones before it; decoded first, it makes the receiver refuse
// them while its acknowledgement covers their numbers. So an acknowledgement tells only
// the messages from the last fresh one on that they were delivered: the origin keeps the
// others' responses for a resume. (Seen in e2e TestUDPAddressChangeUnderLoad: an
// mtom-multipart response refused as "already decoded", then not held.)
func TestUDPFreshMessageEndsDeliveryOfEarlierOnes(t *testing.T) {
	p := newPair(t, pairOptions{codecs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.call(ctx, soapMessage(1, 500)) // the connection is up and idle
	require.NoError(t, err)
	c := p.edgeConns()[0]
	token, stream := uint8(codec.Token), uint8(codec.ZstdStream)
	told := map[string]*atomic.Int32{}
	encode := func(name string, id uint8) head {
		st := &Stream{}
		n := &atomic.Int32{}
		told[name] = n
		st.AfterDelivered(func() { n.Add(1) })
		h, _, err := c.encodeSequenced(st, id, soapMessage(len(told), 400), false, time.Time{})
		require.NoError(t, err, name)
		return h
	}
	encode("a", token)
	encode("b", token)
	h := encode("switch", stream)
	require.Equal(t, uint8(modeFresh), h.Mode)
	last := encode("after", stream)
	c.onAck(last.Seq) // the receiver decoded the fresh message and the one after it
	require.Zero(t, told["a"].Load(), "overtaken by a fresh message: not told")
	require.Zero(t, told["b"].Load())
	require.EqualValues(t, 1, told["switch"].Load())
	require.EqualValues(t, 1, told["after"].Load())
}
