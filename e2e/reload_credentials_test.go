package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// This file: credential and configuration reloads under load, against real processes
// (helpers "rl"; the relay, gateways and byte-checked calls are in tunnel_auth_test.go).
//
// New credentials apply to new tunnel connections only; nothing makes a running edge
// reconnect (neither a file change nor SIGHUP). The tests force new connections by
// cutting them in a relay between edge and origin. A cut fails the exchanges in flight on
// the connections it cuts, by design (the origin may have processed them; SOAP calls are
// not replayed), so the load's clients hold back their next call while a cut happens and
// until the edge is connected again: the exchanges run on either side of each cut.

// rlLoad runs byte-checked exchanges through an edge: one client that sends its calls one
// after another on one keep-alive connection, and concurrent clients that each make one
// HTTP/1.0 call per connection. It is bounded in time and in calls.
type rlLoad struct {
	edge string
	gate sync.RWMutex // held for writing while tunnel connections are cut

	stop       atomic.Bool
	ok, failed atomic.Int64
	mu         sync.Mutex
	markers    []string // of the calls that succeeded
	errs       []string // the first failures
	wg         sync.WaitGroup
}

const (
	rlMaxCalls = 40000
	rlMaxTime  = 90 * time.Second
	rlPace     = 3 * time.Millisecond // between one client's calls: the gateways need CPU for their reloads
)

func rlStartLoad(t *testing.T, name, edge string, concurrent int) *rlLoad {
	l := &rlLoad{edge: edge}
	deadline := time.Now().Add(rlMaxTime)
	var calls atomic.Int64
	run := func(client string, call func(marker string) error) {
		defer l.wg.Done()
		for i := 0; !l.stop.Load() && time.Now().Before(deadline) && calls.Add(1) <= rlMaxCalls; i++ {
			marker := fmt.Sprintf("%s-%s-%d", name, client, i)
			l.gate.RLock()
			err := call(marker)
			l.gate.RUnlock()
			l.mu.Lock()
			if err == nil {
				l.ok.Add(1)
				l.markers = append(l.markers, marker)
			} else {
				l.failed.Add(1)
				if len(l.errs) < 10 {
					l.errs = append(l.errs, fmt.Sprintf("%s at %s: %v", marker, time.Now().Format("15:04:05.000"), err))
				}
			}
			l.mu.Unlock()
			time.Sleep(rlPace)
		}
	}
	l.wg.Add(1)
	go func() {
		k := &taKeepAlive{edge: edge}
		defer k.close()
		run("seq", k.call)
	}()
	for c := range concurrent {
		l.wg.Add(1)
		go run(fmt.Sprintf("c%d", c), func(marker string) error { _, err := taCall(edge, marker); return err })
	}
	t.Cleanup(func() { l.stop.Store(true); l.wg.Wait() })
	return l
}

// progress waits until n more calls succeeded: the load runs on through each step.
func (l *rlLoad) progress(t *testing.T, n int64) {
	t.Helper()
	target := l.ok.Load() + n
	deadline := time.Now().Add(30 * time.Second)
	for l.ok.Load() < target {
		if l.failed.Load() > 0 {
			l.mu.Lock()
			errs := append([]string(nil), l.errs...)
			l.mu.Unlock()
			t.Fatalf("calls failed under load: %q", errs)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load made no progress: %d ok, %d wanted (it stops after %d calls or %s)", l.ok.Load(), target, rlMaxCalls, rlMaxTime)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// finish stops the load and checks that no call failed and that the upstream received
// every call exactly once, byte for byte.
func (l *rlLoad) finish(t *testing.T, srv *recordingServer) int {
	t.Helper()
	l.stop.Store(true)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Zero(t, l.failed.Load(), "failed calls: %q", l.errs)
	require.NotEmpty(t, l.markers)
	taRequireUpstreamSaw(t, srv, l.markers...)
	return len(l.markers)
}

// rlReconnect makes the edge open new tunnel connections: with the load's clients held
// back and no exchange in flight, it cuts the connections in the relay and waits until
// the edge has dialled conns new ones and the origin authenticated them.
func rlReconnect(t *testing.T, l *rlLoad, relay *taRelay, origin, edge *taGateway, conns int) {
	t.Helper()
	l.gate.Lock()
	defer l.gate.Unlock()
	accepted := metricSum(t, origin.admin, "soapgw_tunnel_handshakes_total", "result=ok")
	dialled := metricSum(t, edge.admin, "soapgw_tunnel_dials_total", "peer=dc1", "result=ok")
	require.Equal(t, conns, relay.cut(), "the edge's tunnel connections all ran through the relay")
	taWaitMetric(t, origin.admin, "soapgw_tunnel_handshakes_total", func(v float64) bool { return v >= accepted+float64(conns) }, "result=ok")
	taWaitMetric(t, edge.admin, "soapgw_tunnel_dials_total", func(v float64) bool { return v >= dialled+float64(conns) }, "peer=dc1", "result=ok")
	edge.waitReady(t, 10*time.Second)
}

// rlFileReload changes credential files with write and waits until g has re-read them
// (it polls them every 2 s).
func rlFileReload(t *testing.T, g *taGateway, write func()) {
	t.Helper()
	before := metricSum(t, g.admin, "soapgw_reloads_total", "trigger=files", "result=ok")
	write()
	taWaitMetric(t, g.admin, "soapgw_reloads_total", func(v float64) bool { return v > before }, "trigger=files", "result=ok")
}

// rlVolume is a directory of files updated the way Kubernetes updates a mounted secret:
// the files are symlinks through "..data" to a timestamped directory, and an update writes
// a new directory and swaps "..data" with one rename, so every file changes at once.
type rlVolume struct {
	dir     string
	current string
}

func rlNewVolume(t *testing.T, files map[string][]byte) *rlVolume {
	v := &rlVolume{dir: t.TempDir()}
	v.update(t, files)
	for name := range files {
		require.NoError(t, os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)))
	}
	return v
}

func (v *rlVolume) path(name string) string { return filepath.Join(v.dir, name) }

func (v *rlVolume) update(t *testing.T, files map[string][]byte) {
	t.Helper()
	ts := fmt.Sprintf("..%s.%d", time.Now().UTC().Format("2006_01_02_15_04_05"), time.Now().UnixNano())
	require.NoError(t, os.Mkdir(filepath.Join(v.dir, ts), 0o700))
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(v.dir, ts, name), data, 0o600))
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	require.NoError(t, os.Symlink(ts, tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(v.dir, "..data")))
	if v.current != "" {
		require.NoError(t, os.RemoveAll(filepath.Join(v.dir, v.current)))
	}
	v.current = ts
}

func rlRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

var netDialer5s = net.Dialer{Timeout: 5 * time.Second}

// TestReloadCredentialsKeyRotationThroughRelay rotates the shared key in the documented
// three steps while clients call through the edge, forcing new tunnel connections after
// each step, with 0 failed calls: the origin accepts A and B, the edge proves with B (its
// new connections are authenticated with B), the origin drops A and still admits the
// edge; a new edge holding only A is refused.
func TestReloadCredentialsKeyRotationThroughRelay(t *testing.T) {
	keyA, idA := taKey(t)
	keyB, idB := taKey(t)
	dir := t.TempDir()
	originKey, edgeKey, onlyA := filepath.Join(dir, "origin.key"), filepath.Join(dir, "edge.key"), filepath.Join(dir, "a.key")
	taWriteAtomic(t, originKey, []byte(keyA+"\n"))
	taWriteAtomic(t, edgeKey, []byte(keyA+"\n"))
	taWriteAtomic(t, onlyA, []byte(keyA+"\n"))

	srv := taUpstream(t)
	origin := taStartOrigin(t, "rl-origin", srv.URL(), "  auth: {key_file: "+originKey+"}\n")
	relay := startTARelay(t, origin.addr, false)
	edge := taStartEdge(t, "rl-edge", relay.addr(), "      auth: {key_file: "+edgeKey+"}\n", 2, true)
	accepted := func(id string) int {
		return len(taLogLines(origin.gateway, "tunnel connection accepted", "peer_node=rl-edge", `authenticated_as="key `+id+`"`))
	}
	taWaitLog(t, origin.gateway, 2, "tunnel connection accepted", "peer_node=rl-edge", `authenticated_as="key `+idA+`"`)

	load := rlStartLoad(t, "key", edge.addr, 4)
	load.progress(t, 100)

	// 1. The origin accepts both keys.
	rlFileReload(t, origin, func() { taWriteAtomic(t, originKey, []byte(keyA+"\n"+keyB+"\n")) })
	taWaitLog(t, origin.gateway, 1, "credential files changed: new tunnel, upstream and client connections use the new credentials")
	load.progress(t, 100)

	// 2. The edge proves with B (and would still accept A's proof from the origin).
	rlFileReload(t, edge, func() { taWriteAtomic(t, edgeKey, []byte(keyB+"\n"+keyA+"\n")) })
	load.progress(t, 100)
	require.Zero(t, accepted(idB), "the running connections are not touched; nothing reconnected yet")
	rlReconnect(t, load, relay, origin, edge, 2)
	require.Equal(t, 2, accepted(idB), "the edge's new connections prove key B")
	load.progress(t, 100)

	// 3. The origin retires A; the edge's next connections still get in, with B.
	rlFileReload(t, origin, func() { taWriteAtomic(t, originKey, []byte(keyB+"\n")) })
	load.progress(t, 100)
	rlReconnect(t, load, relay, origin, edge, 2)
	require.Equal(t, 4, accepted(idB))
	require.Equal(t, 2, accepted(idA), "only the first two connections used A")
	load.progress(t, 100)

	// A new edge that holds only A is refused (and nothing it sends reaches the upstream).
	taRequireRefused(t, origin, srv, true, origin.addr, "      auth: {key_file: "+onlyA+"}\n", "bad_key", "the origin refused this edge", idA)
	lines := taWaitLog(t, origin.gateway, 1, `msg="tunnel handshake refused"`, "result=bad_key")
	require.Contains(t, lines[0], "edge used key id "+idA+", which this origin does not hold (it holds ["+idB+"])")
	load.progress(t, 100)

	n := load.finish(t, srv)
	require.Zero(t, metricSum(t, origin.admin, "soapgw_reloads_total", "result=error"), "no reload failed")
	require.Zero(t, metricSum(t, edge.admin, "soapgw_reloads_total", "result=error"))
	t.Logf("key rotation A → A,B → B: %d byte-checked calls through 3 reloads and 2 reconnects, 0 failed", n)
}

// TestReloadCredentialsCertificateRotationThroughRelay replaces the origin's certificate
// and the edge's client certificate (mutual TLS, one CA) as Kubernetes replaces a mounted
// secret, while clients call, forcing new tunnel connections: 0 failed calls, the origin
// presents its new certificate to new connections at once, and the edge's new connections
// present its new certificate.
func TestReloadCredentialsCertificateRotationThroughRelay(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "rl-ca")
	issue := func(name string, server bool) (cert, key []byte, serial *big.Int) {
		d := t.TempDir()
		c, k := ca.issue(t, d, name, server)
		cert = rlRead(t, c)
		pair, err := tls.X509KeyPair(cert, rlRead(t, k))
		require.NoError(t, err)
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		require.NoError(t, err)
		return cert, rlRead(t, k), leaf.SerialNumber
	}
	caPEM := rlRead(t, ca.pem)
	originCert1, originKey1, originSerial1 := issue("origin.rl.test", true)
	edgeCert1, edgeKey1, _ := issue("edge-v1.rl.test", false)
	originVol := rlNewVolume(t, map[string][]byte{"tls.crt": originCert1, "tls.key": originKey1, "ca.crt": caPEM})
	edgeVol := rlNewVolume(t, map[string][]byte{"tls.crt": edgeCert1, "tls.key": edgeKey1, "ca.crt": caPEM})

	srv := taUpstream(t)
	origin := taStartOrigin(t, "rl-origin", srv.URL(), fmt.Sprintf("  tls: {cert_file: %s, key_file: %s, ca_file: %s}\n",
		originVol.path("tls.crt"), originVol.path("tls.key"), originVol.path("ca.crt")))
	relay := startTARelay(t, origin.addr, false)
	edge := taStartEdge(t, "rl-edge", relay.addr(), fmt.Sprintf("      tls: {ca_file: %s, server_name: origin.rl.test, cert_file: %s, key_file: %s}\n",
		edgeVol.path("ca.crt"), edgeVol.path("tls.crt"), edgeVol.path("tls.key")), 2, true)
	accepted := func(cn string) int {
		return len(taLogLines(origin.gateway, "tunnel connection accepted", "peer_node=rl-edge", `authenticated_as="certificate CN=`+cn+`"`))
	}
	taWaitLog(t, origin.gateway, 2, "tunnel connection accepted", "peer_node=rl-edge", `authenticated_as="certificate CN=edge-v1.rl.test"`)

	// originSerial connects as a test client, with the edge's current client certificate,
	// and returns the serial number of the certificate the origin presents.
	originSerial := func() *big.Int {
		t.Helper()
		cert, err := tls.X509KeyPair(rlRead(t, edgeVol.path("tls.crt")), rlRead(t, edgeVol.path("tls.key")))
		require.NoError(t, err)
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(caPEM))
		c, err := tls.DialWithDialer(&netDialer5s, "tcp", origin.addr, &tls.Config{
			RootCAs: pool, ServerName: "origin.rl.test", Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13,
		})
		require.NoError(t, err)
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber
	}
	require.Equal(t, originSerial1, originSerial())

	load := rlStartLoad(t, "cert", edge.addr, 4)
	load.progress(t, 100)

	// The origin's certificate and key change together.
	originCert2, originKey2, originSerial2 := issue("origin.rl.test", true)
	require.NotEqual(t, originSerial1, originSerial2)
	rlFileReload(t, origin, func() {
		originVol.update(t, map[string][]byte{"tls.crt": originCert2, "tls.key": originKey2, "ca.crt": caPEM})
	})
	require.Equal(t, originSerial2, originSerial(), "a new connection gets the new certificate")
	load.progress(t, 100)

	// The edge's client certificate changes.
	edgeCert2, edgeKey2, _ := issue("edge-v2.rl.test", false)
	rlFileReload(t, edge, func() {
		edgeVol.update(t, map[string][]byte{"tls.crt": edgeCert2, "tls.key": edgeKey2, "ca.crt": caPEM})
	})
	load.progress(t, 100)
	require.Zero(t, accepted("edge-v2.rl.test"), "the running connections are not touched; nothing reconnected yet")
	rlReconnect(t, load, relay, origin, edge, 2)
	require.Equal(t, 2, accepted("edge-v2.rl.test"), "the edge's new connections present its new certificate")
	load.progress(t, 200)

	n := load.finish(t, srv)
	require.Equal(t, originSerial2, originSerial(), "with the edge's new client certificate too")
	require.Zero(t, metricSum(t, origin.admin, "soapgw_reloads_total", "result=error"), "an atomic swap never shows a certificate with the other key")
	require.Zero(t, metricSum(t, edge.admin, "soapgw_reloads_total", "result=error"))
	t.Logf("certificate rotation: %d byte-checked calls through 2 reloads and a reconnect, 0 failed", n)
}

// TestReloadCredentialsSIGHUP: a configuration file that does not load is refused on
// SIGHUP with its file:line; the process keeps running with what it had, counts the
// error, and calls keep working. A file that changes sections which need a restart is
// loaded for the rest, and the warning names those sections.
func TestReloadCredentialsSIGHUP(t *testing.T) {
	srv := taUpstream(t)
	oAdmin, oListen := freePort(t), freePort(t)
	origYAML := taOriginYAML("rl-origin", oAdmin, oListen, srv.URL(), "  auth: {key_file: "+tunnelKeyFile+"}\n", "")
	origin := taStart(t, oAdmin, oListen, origYAML, true)
	edge := taStartEdge(t, "rl-edge", origin.addr, "      auth: {key_file: "+tunnelKeyFile+"}\n", 2, true)
	edgeYAML := taEdgeYAML("rl-edge", edge.admin, edge.addr, origin.addr, "      auth: {key_file: "+tunnelKeyFile+"}\n", 2)
	load := rlStartLoad(t, "hup", edge.addr, 2)
	load.progress(t, 50)

	// lineOf is the 1-based line of the first line of yml containing s.
	lineOf := func(yml, s string) int {
		for i, l := range strings.Split(yml, "\n") {
			if strings.Contains(l, s) {
				return i + 1
			}
		}
		t.Fatalf("%q not in %s", s, yml)
		return 0
	}
	hup := func(g *taGateway, yml, result string) {
		t.Helper()
		before := metricSum(t, g.admin, "soapgw_reloads_total", "trigger=sighup", "result="+result)
		taWriteAtomic(t, g.config, []byte(yml))
		require.NoError(t, g.cmd.Process.Signal(syscall.SIGHUP))
		taWaitMetric(t, g.admin, "soapgw_reloads_total", func(v float64) bool { return v > before }, "trigger=sighup", "result="+result)
		select {
		case <-g.done:
			t.Fatalf("the gateway exited on SIGHUP: %v", g.err)
		default:
		}
		load.progress(t, 50)
	}
	file := filepath.Base(origin.config)

	// An unknown field in the origin's section.
	bad := strings.Replace(origYAML, "  upstreams:\n", "  handshake_timout: 3s\n  upstreams:\n", 1)
	hup(origin, bad, "error")
	taWaitLog(t, origin.gateway, 1, "SIGHUP: configuration refused; the running one stays",
		fmt.Sprintf("%s:%d", file, lineOf(bad, "handshake_timout")), "handshake_timout")

	// A value of the wrong type at the edge.
	bad = strings.Replace(edgeYAML, "      connections: 2\n", "      connections: two\n", 1)
	hup(edge, bad, "error")
	taWaitLog(t, edge.gateway, 1, "SIGHUP: configuration refused; the running one stays",
		fmt.Sprintf("%s:%d", file, lineOf(bad, "connections: two")))

	// A key file that is not a key: refused by validation, the running key stays.
	junk := filepath.Join(t.TempDir(), "junk.key")
	require.NoError(t, os.WriteFile(junk, []byte("not a key\n"), 0o600))
	bad = strings.Replace(origYAML, tunnelKeyFile, junk, 1)
	hup(origin, bad, "error")
	taWaitLog(t, origin.gateway, 1, "SIGHUP: configuration refused; the running one stays",
		fmt.Sprintf("%s:%d", file, lineOf(bad, "junk.key")), "origin.auth.key_file")

	// limits.max_concurrent_exchanges sizes a semaphore: changing it is refused whole.
	hup(origin, origYAML+"limits:\n  max_concurrent_exchanges: 77\n", "error")
	taWaitLog(t, origin.gateway, 1, "SIGHUP: configuration refused", "limits.max_concurrent_exchanges: changing it", "needs a restart; nothing was reloaded")

	// Sections that need a restart: loaded for the rest, named in a warning.
	hup(origin, origYAML+"drain_timeout: 7s\ncodecs:\n  gzip_level: 1\n", "ok")
	lines := taWaitLog(t, origin.gateway, 1, "level=WARN", "configuration reloaded; these changes need a restart and are not in effect")
	require.Contains(t, lines[0], "drain_timeout")
	require.Contains(t, lines[0], "codecs")
	hup(edge, strings.Replace(edgeYAML, "      connections: 2\n", "      connections: 3\n", 1), "ok")
	lines = taWaitLog(t, edge.gateway, 1, "level=WARN", "configuration reloaded; these changes need a restart and are not in effect")
	require.Contains(t, lines[0], "edge")

	// Back to the original files: a clean reload.
	hup(origin, origYAML, "ok")
	hup(edge, edgeYAML, "ok")
	taWaitLog(t, origin.gateway, 1, `msg="configuration reloaded"`)
	taWaitLog(t, edge.gateway, 1, `msg="configuration reloaded"`)

	n := load.finish(t, srv)
	require.Equal(t, 3.0, metricSum(t, origin.admin, "soapgw_reloads_total", "trigger=sighup", "result=error"))
	require.Equal(t, 1.0, metricSum(t, edge.admin, "soapgw_reloads_total", "trigger=sighup", "result=error"))
	t.Logf("%d byte-checked calls through 4 refused and 4 accepted SIGHUP reloads, 0 failed", n)
}
