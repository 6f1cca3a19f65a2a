package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStreamLimitBackpressure: more concurrent clients than the tunnel has streams
// (origin.max_streams × edge.peers[].max_connections). No exchange fails: each waits for
// a free stream, and the edge opens extra tunnel connections up to max_connections. Every
// answer through the pair equals the upstream's own, byte for byte; the upstream runs each
// request once. Calls wait longer than the peer's dial_timeout (1 s here), which used to
// end a wait for a stream with a 503.
func TestStreamLimitBackpressure(t *testing.T) {
	const (
		maxStreams     = 4
		maxConnections = 3 // capacity: 12 exchanges at once
		clients        = 40
		callsEach      = 3
		think          = 500 * time.Millisecond // the upstream's time per call
	)
	var executed atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		executed.Add(1)
		time.Sleep(think)
		ccEchoHandler(w, r)
	}))
	t.Cleanup(up.Close)

	a := newPairAddrs(t)
	startGateway(t, a.OriginAdmin, originYAML(a, up.URL, fmt.Sprintf("  max_streams: %d\n", maxStreams)))
	edgeCfg := regexp.MustCompile(`(?m)^      connections: 2$`).ReplaceAllString(edgeYAML(a, ""),
		fmt.Sprintf("      connections: 1\n      max_connections: %d\n      dial_timeout: 1s", maxConnections))
	startGateway(t, a.EdgeAdmin, edgeCfg)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
	)
	for c := range clients {
		wg.Go(func() {
			for k := range callsEach {
				body := ccBody(c, k)
				got, err := ccRaw10(ctx, a.Edge, "/svc", "urn:call", body)
				if err == nil {
					var want []byte
					want, err = ccRaw10(ctx, up.Listener.Addr().String(), "/svc", "urn:call", body)
					if err == nil && !bytes.Equal(got, want) {
						err = fmt.Errorf("answer through the pair differs from the upstream's:\n%.300q\nvs\n%.300q", got, want)
					}
				}
				if err != nil {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("client %d call %d: %v", c, k, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, failed)
	require.Equal(t, int64(2*clients*callsEach), executed.Load(), "each call ran once through the pair and once directly")

	waitedOK := metricSum(t, a.EdgeAdmin, "soapgw_tunnel_stream_waits_total", "result=ok")
	refused := metricSum(t, a.EdgeAdmin, "soapgw_tunnel_stream_waits_total", "result=deadline")
	dials := metricSum(t, a.EdgeAdmin, "soapgw_tunnel_dials_total", "result=ok")
	extra := metricSum(t, a.EdgeAdmin, "soapgw_tunnel_dials_total", "result=extra")
	t.Logf("stream waits: ok %.0f, deadline %.0f; tunnel dials ok %.0f, extra %.0f", waitedOK, refused, dials, extra)
	require.Positive(t, waitedOK, "%d clients against %d streams: some exchanges must have waited", clients, maxStreams*maxConnections)
	require.Zero(t, refused)
	require.Equal(t, 1.0, dials, "one kept connection")
	require.Equal(t, float64(maxConnections-1), extra, "and the extra ones, no more")
}
