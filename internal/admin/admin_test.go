package admin

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "soapgw_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	var ready atomic.Bool
	s, err := Listen("127.0.0.1:0", reg, func() (bool, string) {
		if ready.Load() {
			return true, ""
		}
		return false, `no tunnel to peer "dc1"`
	}, false)
	require.NoError(t, err)
	go func() { _ = s.Serve() }()
	defer s.Shutdown(context.Background())
	base := "http://" + s.Addr().String()

	code, body := get(t, base+"/healthz")
	require.Equal(t, 200, code)
	require.Equal(t, "ok\n", body)

	code, body = get(t, base+"/readyz")
	require.Equal(t, 503, code)
	require.Contains(t, body, `no tunnel to peer "dc1"`)
	ready.Store(true)
	code, _ = get(t, base+"/readyz")
	require.Equal(t, 200, code)

	code, body = get(t, base+"/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, "soapgw_test_total 3")

	code, _ = get(t, base+"/debug/pprof/")
	require.Equal(t, 404, code, "pprof must be off unless enabled")
}
