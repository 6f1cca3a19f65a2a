package quic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
