package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// writeAtomic replaces a file as Kubernetes and config tools do: write aside, rename.
func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// loadRunner runs byte-checked calls from several clients until stopped (at most 60 s).
type loadRunner struct {
	stop       atomic.Bool
	ok, failed atomic.Int64
	wg         sync.WaitGroup
}

func startLoad(t *testing.T, edge string, clients int) *loadRunner {
	l := &loadRunner{}
	for c := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			deadline := time.Now().Add(60 * time.Second)
			for i := 0; !l.stop.Load() && time.Now().Before(deadline); i++ {
				marker := fmt.Sprintf("c%di%d", c, i)
				resp := authCall(t, edge, marker)
				if strings.HasPrefix(resp, "HTTP/1.0 200 OK\r\n") && strings.Contains(resp, "<"+marker+"/>") {
					l.ok.Add(1)
				} else {
					l.failed.Add(1)
					t.Logf("call %s failed: %q", marker, resp)
				}
			}
		}()
	}
	return l
}

// finish lets the load run for at least n more calls, stops it and returns its counts.
func (l *loadRunner) finish(t *testing.T, n int64) (ok, failed int64) {
	t.Helper()
	target := l.ok.Load() + n
	require.Eventually(t, func() bool { return l.ok.Load() >= target || l.failed.Load() > 0 }, 20*time.Second, 10*time.Millisecond)
	l.stop.Store(true)
	l.wg.Wait()
	return l.ok.Load(), l.failed.Load()
}

// waitReload waits until g has applied a credential file change.
func waitReload(t *testing.T, g string, before float64) {
	t.Helper()
	require.Eventually(t, func() bool {
		return metricSum(t, g, "soapgw_reloads_total", "trigger=files", "result=ok") > before
	}, 15*time.Second, 20*time.Millisecond, "the gateway did not re-read its credential files")
}

func fileReloads(t *testing.T, admin string) float64 {
	return metricSum(t, admin, "soapgw_reloads_total", "trigger=files", "result=ok")
}

// TestReloadCredentialsKeyRotationUnderLoad: the shared key is rotated as
// docs/operations.md describes while calls run, with 0 failed calls; after it, a new edge
// with the new key gets in and one with only the retired key does not.
func TestReloadCredentialsKeyRotationUnderLoad(t *testing.T) {
	dir := t.TempDir()
	keyA, keyB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.Equal(t, 0, exec0(t, "keygen", "--out", keyA))
	require.Equal(t, 0, exec0(t, "keygen", "--out", keyB))
	read := func(p string) string {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	a, b := read(keyA), read(keyB)
	originKey, edgeKey := filepath.Join(dir, "origin.key"), filepath.Join(dir, "edge.key")
	writeAtomic(t, originKey, []byte(a+"\n"))
	writeAtomic(t, edgeKey, []byte(a+"\n"))

	srv := echoServer(t)
	tunnel, originAdmin, _ := authOrigin(t, srv.URL(), "  auth: {key_file: "+originKey+"}\n")
	edge, edgeAdmin, _ := authEdge(t, tunnel, "      auth: {key_file: "+edgeKey+"}\n")
	(&gateway{admin: edgeAdmin}).waitReadyAddr(t, 10*time.Second)
	load := startLoad(t, edge, 4)

	// 1. The origin accepts both keys.
	r := fileReloads(t, originAdmin)
	writeAtomic(t, originKey, []byte(a+"\n"+b+"\n"))
	waitReload(t, originAdmin, r)
	// 2. The edge proves with the new key.
	r = fileReloads(t, edgeAdmin)
	writeAtomic(t, edgeKey, []byte(b+"\n"+a+"\n"))
	waitReload(t, edgeAdmin, r)
	// A new edge with the new key is admitted.
	newEdge, newAdmin, _ := authEdge(t, tunnel, "      auth: {key_file: "+keyB+"}\n")
	(&gateway{admin: newAdmin}).waitReadyAddr(t, 10*time.Second)
	require.True(t, strings.HasPrefix(authCall(t, newEdge, "newkey"), "HTTP/1.0 200 OK\r\n"))
	// 3. The old key is retired at the origin.
	r = fileReloads(t, originAdmin)
	writeAtomic(t, originKey, []byte(b+"\n"))
	waitReload(t, originAdmin, r)
	before := metricSum(t, originAdmin, "soapgw_tunnel_handshakes_total", "result=bad_key")
	oldEdge, _, _ := authEdge(t, tunnel, "      auth: {key_file: "+keyA+"}\n")
	waitRefused(t, oldEdge)
	require.Greater(t, metricSum(t, originAdmin, "soapgw_tunnel_handshakes_total", "result=bad_key"), before)

	// A half-written (invalid) key file is refused; the running key stays.
	bad := metricSum(t, originAdmin, "soapgw_reloads_total", "trigger=files", "result=error")
	writeAtomic(t, originKey, []byte("not a key\n"))
	require.Eventually(t, func() bool {
		return metricSum(t, originAdmin, "soapgw_reloads_total", "trigger=files", "result=error") > bad
	}, 15*time.Second, 20*time.Millisecond)
	require.True(t, strings.HasPrefix(authCall(t, newEdge, "stillnew"), "HTTP/1.0 200 OK\r\n"))

	ok, failed := load.finish(t, 200)
	require.Zero(t, failed, "calls failed during the key rotation")
	t.Logf("key rotation: %d byte-checked calls under load, 0 failed", ok)
}

// TestReloadCredentialsCertificateRotationUnderLoad: the origin's certificate and the
// edge's client certificate are replaced under load (mutual TLS) with 0 failed calls, and
// the origin presents the new certificate to the next connection.
func TestReloadCredentialsCertificateRotationUnderLoad(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "rot")
	live := filepath.Join(dir, "live")
	require.NoError(t, os.MkdirAll(live, 0o700))
	install := func(name string, server bool) {
		c, k := ca.issue(t, dir, name, server)
		for src, dst := range map[string]string{c: filepath.Join(live, map[bool]string{true: "origin.pem", false: "edge.pem"}[server]),
			k: filepath.Join(live, map[bool]string{true: "origin-key.pem", false: "edge-key.pem"}[server])} {
			data, err := os.ReadFile(src)
			require.NoError(t, err)
			writeAtomic(t, dst, data)
		}
	}
	install("origin.soapgw.test", true)
	install("edge.soapgw.test", false)
	f := func(n string) string { return filepath.Join(live, n) }
	srv := echoServer(t)
	tunnel, originAdmin, _ := authOrigin(t, srv.URL(), fmt.Sprintf("  tls: {cert_file: %s, key_file: %s, ca_file: %s}\n", f("origin.pem"), f("origin-key.pem"), ca.pem))
	edge, edgeAdmin, _ := authEdge(t, tunnel, fmt.Sprintf("      tls: {ca_file: %s, server_name: origin.soapgw.test, cert_file: %s, key_file: %s}\n", ca.pem, f("edge.pem"), f("edge-key.pem")))
	(&gateway{admin: edgeAdmin}).waitReadyAddr(t, 10*time.Second)

	serial := func() string {
		cert, err := tls.LoadX509KeyPair(f("edge.pem"), f("edge-key.pem"))
		require.NoError(t, err)
		pool := x509.NewCertPool()
		caPEM, err := os.ReadFile(ca.pem)
		require.NoError(t, err)
		pool.AppendCertsFromPEM(caPEM)
		c, err := tls.Dial("tcp", tunnel, &tls.Config{RootCAs: pool, ServerName: "origin.soapgw.test", Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
		require.NoError(t, err)
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serial()
	load := startLoad(t, edge, 4)

	r := fileReloads(t, originAdmin)
	install("origin.soapgw.test", true)
	waitReload(t, originAdmin, r)
	require.NotEqual(t, first, serial(), "the next connection sees the new origin certificate")
	r = fileReloads(t, edgeAdmin)
	install("edge.soapgw.test", false)
	waitReload(t, edgeAdmin, r)

	ok, failed := load.finish(t, 200)
	require.Zero(t, failed, "calls failed during the certificate rotation")
	t.Logf("certificate rotation: %d byte-checked calls under load, 0 failed", ok)
}
