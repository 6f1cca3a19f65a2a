package proxy

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel"
)

// TestHeldResponsesForgottenOnceDelivered: through a real tunnel, a coded response is
// forgotten by the origin as soon as the edge's session acknowledges decoding it, so the
// held responses do not grow with the exchange rate; an identity response, which nobody
// acknowledges, is kept for resume_window as before.
func TestHeldResponsesForgottenOnceDelivered(t *testing.T) {
	const calls = 40
	for _, tc := range []struct {
		name   string
		tunnel func(origin bool, c *tunnel.Config)
		held   int // entries left after the calls, once acknowledgements are in
	}{
		{"coded", copyCodecTunnel, 0},
		{"identity", nil, calls},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, okResponse("<ok/>"))
			env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}, Tunnel: tc.tunnel})
			cl := env.dial()
			for range calls {
				cl.send(soapRequest(1, "/svc", "", soapBody))
				resp, body := cl.read("POST")
				require.Equal(t, 200, resp.StatusCode)
				require.Contains(t, string(body), "<ok/>")
			}
			held := env.origin.held
			entries := func() int {
				held.mu.Lock()
				defer held.mu.Unlock()
				return len(held.byID)
			}
			// The last acknowledgement travels in a CODEC_ACK within 100 ms.
			require.Eventually(t, func() bool { return entries() == tc.held }, testDeadline, 5*time.Millisecond,
				"held exchanges: %d", entries())
			require.Equal(t, float64(calls-tc.held), testutil.ToFloat64(held.m.dropped.WithLabelValues("delivered")))
			held.mu.Lock()
			defer held.mu.Unlock()
			if tc.held == 0 {
				require.Zero(t, held.bytes)
				require.Nil(t, held.oldest, "nothing left to expire")
			} else {
				require.Greater(t, held.bytes, int64(tc.held*heldOverhead), "whole responses kept")
			}
		})
	}
}
