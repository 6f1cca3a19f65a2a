package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	soaptest "github.com/soapgw/soapgw/internal/testutil"
)

// TestClientTLSHandshakes: on a listener that speaks TLS, a TLS client is served; a client
// that speaks plain HTTP gets a bad_request Fault that says the listener speaks HTTPS; a
// client that offers only an older TLS version, or that leaves before its handshake,
// is counted by its reason.
func TestClientTLSHandshakes(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	m := NewMetrics(nil)
	cert := soaptest.SelfSigned(t)
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}, Metrics: m,
		ListenTLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	addr := env.addrs["main"]
	failures := func(reason string) float64 { return testutil.ToFloat64(m.tlsFailures.WithLabelValues("main", reason)) }

	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "soapgw.test"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tc.Close() })
	cl := &client{t: t, c: tc, br: bufio.NewReader(tc)}
	for range 2 { // keep-alive over TLS
		cl.send(soapRequest(1, "/svc", "", "<x/>"))
		resp, _ := cl.read("POST")
		require.Equal(t, 200, resp.StatusCode)
	}

	plain := env.dial()
	plain.send(soapRequest(1, "/svc", "", "<x/>"))
	f := plain.readFault()
	require.Equal(t, causeBadRequest, f.cause)
	require.Contains(t, f.text, "speaks HTTPS")
	plain.requireClosed()
	_ = plain.c.Close() // ends the edge's lingering close

	old, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = old.Close() })
	_ = old.SetDeadline(time.Now().Add(testDeadline))
	err = tls.Client(old, &tls.Config{RootCAs: roots, ServerName: "soapgw.test", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}).Handshake()
	require.Error(t, err, "TLS 1.1 was accepted")

	gone, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_ = gone.Close()

	for _, reason := range []string{"plain_http", "refused", "closed"} {
		require.Eventually(t, func() bool { return failures(reason) >= 1 }, testDeadline, time.Millisecond, reason)
		require.Equal(t, 1.0, failures(reason), reason)
	}
}
