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

// TestUDPTailProbeRecoversLostMessage: without copies, a message whose only packet is
// lost is resent once a PING's packet behind it is acknowledged, which makes QUIC's loss
// detection declare it lost (counted in soapgw_udp_packets_total{kind="lost"}); a resend
// after QUIC's probe timeout is never counted so. A lost request: the edge's PING does it.
// A lost response: the origin answers the edge's PING with one of its own, and the edge
// acknowledges that at once (a gap).
func TestUDPTailProbeRecoversLostMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		// drop makes the edge's socket drop the packets f picks: outgoing (the
		// request) or incoming (the response).
		drop func(fc *filterConn, f func([]byte) bool)
		// sender is the peer label of the lost message's sender's metrics: the edge
		// counts under "origin", the origin under "edge".
		sender string
	}{
		{"request", (*filterConn).setDrop, "origin"},
		{"response", (*filterConn).setDropIn, "edge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range 5 {
				_, err := p.call(ctx, soapMessage(i, 700))
				require.NoError(t, err)
			}
			p.lossy(t, 0.01)
			// Each attempt loses one message's packet. The edge's probe goes 2 ms after
			// the request on loopback, QUIC's probe timeout 25 ms and more: on a starved
			// machine the timeout can still come first, which proves nothing, and the
			// next attempt tries again.
			detected := false
			for attempt := 0; attempt < 8 && !detected; attempt++ {
				lost := p.counter(t, "soapgw_udp_packets_total", "peer", tc.sender, "kind", "lost")
				probes := p.counter(t, "soapgw_udp_tail_probes_total", "peer", tc.sender)
				var dropped atomic.Bool
				tc.drop(p.edgeSock.Load(), func(b []byte) bool {
					return len(b) > 500 && len(b) < 1000 && dropped.CompareAndSwap(false, true)
				})
				req := soapMessage(100+attempt, 700)
				resp, err := p.call(ctx, req)
				require.NoError(t, err)
				require.Equal(t, append([]byte("echo:"), req...), resp)
				tc.drop(p.edgeSock.Load(), nil)
				if dropped.Load() && p.counter(t, "soapgw_udp_tail_probes_total", "peer", tc.sender) > probes {
					detected = p.counter(t, "soapgw_udp_packets_total", "peer", tc.sender, "kind", "lost") > lost
				}
			}
			require.True(t, detected, "a PING made QUIC's loss detection, not its probe timeout, resend the %s", tc.name)
		})
	}
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

// TestProbeDelay: a little more than a round trip, the tighter of 5/4 RTT and RTT + 4
// deviations; and probing only where the probe's acknowledgement comes back
// before QUIC's probe timeout would fire (probeAfter < 4 deviations + 25 ms).
func TestProbeDelay(t *testing.T) {
	ms := time.Millisecond
	for _, tt := range []struct {
		name      string
		srtt, dev time.Duration
		want      time.Duration
		pays      bool
	}{
		{"routed-wlan: 5/4 RTT is tighter", 14 * ms, 2 * ms, 14*ms*5/4 + 2*ms, true},
		{"loopback: the margin", 100 * time.Microsecond, 0, 2*ms + 100*time.Microsecond, true},
		{"3g: RTT + 4 deviations, later than the probe timeout's share", 150 * ms, 2 * ms, 158*ms + 2*ms, false},
		{"a jittery short path", 30 * ms, 10 * ms, 30*ms*5/4 + 2*ms, true},
		{"gprs", 820 * ms, 20 * ms, 900*ms + 2*ms, false},
	} {
		after, pays := probeDelay(tt.srtt, tt.dev)
		require.Equal(t, tt.want, after, tt.name)
		require.Equal(t, tt.pays, pays, tt.name)
	}
}
