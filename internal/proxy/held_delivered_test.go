package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	soapgwtest "github.com/soapgw/soapgw/internal/testutil"
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

// TestExchangesHoldNoMemoryWithCodec bounds the heap a finished exchange leaves behind
// through the whole pair with a codec: held responses went at 800 B each for
// resume_window (30 s), which made the origin's memory grow with the exchange rate. What
// stays is the record of forgotten ids (maxGone hashes, about 70 B each).
func TestExchangesHoldNoMemoryWithCodec(t *testing.T) {
	// A plain upstream: the harness's records every byte it reads.
	answer := strings.Repeat("<item>answer</item>", 25)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/xml; charset=utf-8")
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: srv.Listener.Addr().String()}}, Tunnel: copyCodecTunnel})
	cl := env.dial()
	call := func() {
		cl.send(soapRequest(1, "/svc", "", soapBody))
		resp, _ := cl.read("POST")
		require.Equal(t, 200, resp.StatusCode)
	}
	held := env.origin.held
	settled := func() {
		require.Eventually(t, func() bool {
			held.mu.Lock()
			defer held.mu.Unlock()
			return len(held.byID) == 0
		}, testDeadline, time.Millisecond)
	}
	heap := soapgwtest.HeapAlloc
	for range 200 { // warm the pools, buffers and maps
		call()
	}
	settled()
	before := heap()
	const n = 2000
	for range n {
		call()
	}
	settled()
	grown := int64(heap()) - int64(before)
	t.Logf("heap kept per exchange: %d B", grown/n)
	require.Less(t, grown/n, int64(300), "a finished exchange keeps no response")
}
