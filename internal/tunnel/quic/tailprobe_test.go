package quic

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lossy makes the edge's connections believe some of their packets are lost, as RECEIVED
// reports would after a while on a lossy path.
func (p *pair) lossy(t *testing.T, ratio float64) {
	t.Helper()
	cs := p.edgeConns()
	require.NotEmpty(t, cs)
	for _, c := range cs {
		c.loss.ratio.Store(math.Float64bits(ratio))
	}
}

// TestUDPTailProbeRecoversLostRequest: without copies, a request whose only packet is
// lost is resent after the edge's PING draws an acknowledgement, which makes QUIC's loss
// detection declare it lost (counted in soapgw_udp_packets_total{kind="lost"}); a resend
// after QUIC's probe timeout is never counted so.
func TestUDPTailProbeRecoversLostRequest(t *testing.T) {
	p := newPair(t, pairOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		_, err := p.call(ctx, soapMessage(i, 700))
		require.NoError(t, err)
	}
	p.lossy(t, 0.01)
	// Each attempt loses one request's packet. The edge's probe goes 2 ms after the
	// request on loopback, QUIC's probe timeout 25 ms and more: on a starved machine the
	// timeout can still come first, which proves nothing, and the next attempt tries again.
	detected := false
	for attempt := 0; attempt < 8 && !detected; attempt++ {
		lost := p.counter(t, "soapgw_udp_packets_total", "peer", "origin", "kind", "lost")
		probes := p.counter(t, "soapgw_udp_tail_probes_total", "peer", "origin")
		var dropped atomic.Bool
		p.edgeSock.Load().setDrop(func(b []byte) bool {
			return len(b) > 500 && len(b) < 1000 && dropped.CompareAndSwap(false, true)
		})
		req := soapMessage(100+attempt, 700)
		resp, err := p.call(ctx, req)
		require.NoError(t, err)
		require.Equal(t, append([]byte("echo:"), req...), resp)
		p.edgeSock.Load().setDrop(nil)
		if !dropped.Load() {
			continue
		}
		require.Greater(t, p.counter(t, "soapgw_udp_tail_probes_total", "peer", "origin"), probes, "the edge probed the late exchange")
		detected = p.counter(t, "soapgw_udp_packets_total", "peer", "origin", "kind", "lost") > lost
	}
	require.True(t, detected, "QUIC's loss detection, not its probe timeout, resent the request")
}

// TestUDPTailProbeRecoversLostResponse: a response whose only packet is lost: the origin
// answers the edge's PING with its own, the edge acknowledges it at once (a gap), and the
// origin's QUIC declares the response lost and sends it again.
func TestUDPTailProbeRecoversLostResponse(t *testing.T) {
	p := newPair(t, pairOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		_, err := p.call(ctx, soapMessage(i, 700))
		require.NoError(t, err)
	}
	p.lossy(t, 0.01)
	detected := false
	for attempt := 0; attempt < 8 && !detected; attempt++ {
		lost := p.counter(t, "soapgw_udp_packets_total", "peer", "edge", "kind", "lost")
		pongs := p.counter(t, "soapgw_udp_tail_probes_total", "peer", "edge")
		var dropped atomic.Bool
		p.edgeSock.Load().setDropIn(func(b []byte) bool {
			return len(b) > 500 && len(b) < 1000 && dropped.CompareAndSwap(false, true)
		})
		req := soapMessage(100+attempt, 700)
		resp, err := p.call(ctx, req)
		require.NoError(t, err)
		require.Equal(t, append([]byte("echo:"), req...), resp)
		p.edgeSock.Load().setDropIn(nil)
		if !dropped.Load() {
			continue
		}
		if p.counter(t, "soapgw_udp_tail_probes_total", "peer", "edge") > pongs {
			detected = p.counter(t, "soapgw_udp_packets_total", "peer", "edge", "kind", "lost") > lost
		}
	}
	require.True(t, detected, "the origin answered the probe and its QUIC resent the response on loss detection")
}

// TestUDPTailProbesOnlyWhenLossIsReported: on a clean path no exchange is probed, even a
// slow one; with loss reported, a slow exchange is probed once, however long it takes.
func TestUDPTailProbesOnlyWhenLossIsReported(t *testing.T) {
	p := newPair(t, pairOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A slow server: 20 ms per call, ten times the probe delay on loopback.
	p.setHandler(func(ctx context.Context, st *Stream) {
		t := time.NewTimer(20 * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		echoHandler(ctx, st)
	})
	for i := range 5 {
		_, err := p.call(ctx, soapMessage(i, 300))
		require.NoError(t, err)
	}
	require.Zero(t, p.counter(t, "soapgw_udp_tail_probes_total"), "clean path: no probes")
	p.lossy(t, 0.01)
	for i := range 5 {
		_, err := p.call(ctx, soapMessage(10+i, 300))
		require.NoError(t, err)
	}
	require.Equal(t, 5.0, p.counter(t, "soapgw_udp_tail_probes_total", "peer", "origin"), "one probe per late exchange")
	require.LessOrEqual(t, p.counter(t, "soapgw_udp_tail_probes_total", "peer", "edge"), 5.0)
}
