package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tapRelay is a TCP relay between an edge and an origin that records what crosses it in
// each direction, so a test can look at the bytes on the wire and replay them.
type tapRelay struct {
	ln       net.Listener
	target   string
	mu       sync.Mutex
	up, down bytes.Buffer // edge→origin, origin→edge, over every connection
	first    []byte       // edge→origin bytes of the first connection
	conns    []net.Conn
}

func startTapRelay(t *testing.T, target string) *tapRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &tapRelay{ln: ln, target: target}
	go r.serve()
	t.Cleanup(func() { r.close() })
	return r
}

func (r *tapRelay) addr() string { return r.ln.Addr().String() }

func (r *tapRelay) serve() {
	for n := 0; ; n++ {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		o, err := net.DialTimeout("tcp", r.target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, o)
		r.mu.Unlock()
		first := n == 0
		go r.copy(o, c, &r.up, first)
		go r.copy(c, o, &r.down, false)
	}
}

func (r *tapRelay) copy(dst, src net.Conn, rec *bytes.Buffer, first bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			rec.Write(buf[:n])
			if first {
				r.first = append(r.first, buf[:n]...)
			}
			r.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

func (r *tapRelay) recorded() (up, down, first []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.up.Bytes()), bytes.Clone(r.down.Bytes()), bytes.Clone(r.first)
}

func (r *tapRelay) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.Close()
	}
}

// authEdge starts an edge whose peer points at peerAddr with the given credential lines
// (YAML under the peer, indented six spaces), and returns its client and admin addresses.
func authEdge(t *testing.T, peerAddr, creds string) (edge, admin string, g *gateway) {
	t.Helper()
	a := pairAddrs{Edge: freePort(t), EdgeAdmin: freePort(t), Tunnel: peerAddr}
	yml := fmt.Sprintf(`node: e2e-edge
admin:
  listen: %s
edge:
  listeners:
    - name: soap
      listen: %s
  peers:
    - name: dc1
      address: %s
      connections: 1
      dial_timeout: 1s
%s  routes:
    - peer: dc1
      upstream: svc
`, a.EdgeAdmin, a.Edge, peerAddr, creds)
	path := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yml), 0o600))
	g = &gateway{proc: startProc(t, binary, "run", "--config", path, "--log-level", "debug"), admin: a.EdgeAdmin}
	return a.Edge, a.EdgeAdmin, g
}

// authOrigin starts an origin for upstream with the given credential lines (YAML under
// origin:, indented two spaces).
func authOrigin(t *testing.T, upstream, creds string) (tunnel, admin string, g *gateway) {
	t.Helper()
	a := pairAddrs{Tunnel: freePort(t), OriginAdmin: freePort(t)}
	yml := fmt.Sprintf(`node: e2e-origin
admin:
  listen: %s
origin:
  listen: %s
%s  upstreams:
    - name: svc
      url: %s
`, a.OriginAdmin, a.Tunnel, creds, upstream)
	g = startGateway(t, a.OriginAdmin, yml)
	return a.Tunnel, a.OriginAdmin, g
}

// authCall makes one byte-checked call through edge and returns the raw response.
func authCall(t *testing.T, edge, marker string) string {
	t.Helper()
	body := "<soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\"><soap:Body><" + marker + "/></soap:Body></soap:Envelope>"
	req := "POST /svc HTTP/1.0\r\nHost: x\r\nContent-Type: text/xml\r\nSOAPAction: \"urn:" + marker + "\"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	return string(rawExchange(t, edge, []byte(req), 10*time.Second))
}

// waitRefused waits until a call through the edge is answered with the fault of an
// unreachable origin (the edge dials, is refused, and gives up after dial_timeout).
func waitRefused(t *testing.T, edge string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", edge); err == nil {
			_ = c.Close()
			resp := authCall(t, edge, "refused")
			require.True(t, strings.HasPrefix(resp, "HTTP/1.0 503 "), "%q", resp)
			require.Contains(t, resp, "X-Soapgw-Error: origin_unreachable")
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("edge never listened")
}

func echoServer(t *testing.T) *recordingServer {
	return startRecordingServer(t, func(r *recordedRequest) []byte {
		return soapResponse(200, "OK", [][2]string{{"Content-Type", "text/xml"}}, append([]byte("<r>"), append(r.Body, "</r>"...)...))
	})
}

// TestTunnelAuthSharedKey: an edge with the origin's key works, and its traffic is not
// plaintext on the wire; an edge with another key, with no credentials, or in insecure
// mode is refused and counted by cause, and nothing reaches the upstream; a replayed
// capture of a valid handshake is refused.
func TestTunnelAuthSharedKey(t *testing.T) {
	srv := echoServer(t)
	tunnel, originAdmin, origin := authOrigin(t, srv.URL(), "  auth: {key_file: "+tunnelKeyFile+"}\n")
	tap := startTapRelay(t, tunnel)

	// The right key, through the tap: works, byte for byte, and encrypted.
	edge, edgeAdmin, _ := authEdge(t, tap.addr(), "      auth: {key_file: "+tunnelKeyFile+"}\n")
	(&gateway{admin: edgeAdmin}).waitReadyAddr(t, 10*time.Second)
	marker := "SecretMarker4711"
	resp := authCall(t, edge, marker)
	require.True(t, strings.HasPrefix(resp, "HTTP/1.0 200 OK\r\n"), "%q", resp)
	require.Contains(t, resp, "<"+marker+"/>")
	require.Len(t, srv.Requests(), 1)
	up, down, first := tap.recorded()
	require.NotEmpty(t, up)
	require.NotEmpty(t, down)
	for _, plain := range []string{marker, "Envelope", "SOAPAction", "e2e-edge", "e2e-origin"} {
		require.NotContains(t, string(up), plain, "edge→origin bytes are not plaintext")
		require.NotContains(t, string(down), plain, "origin→edge bytes are not plaintext")
	}
	require.Equal(t, byte(0x16), up[0], "the tunnel starts with a TLS handshake")
	require.Equal(t, 1.0, metricSum(t, originAdmin, "soapgw_tunnel_handshakes_total", "result=ok"))

	// A replayed capture of that valid handshake does not get in.
	c, err := net.Dial("tcp", tunnel)
	require.NoError(t, err)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write(first)
	_, _ = io.Copy(io.Discard, c) // the origin closes it
	_ = c.Close()
	require.Eventually(t, func() bool {
		return metricSum(t, originAdmin, "soapgw_tunnel_handshakes_total", "result=tls_failed") >= 1
	}, 10*time.Second, 20*time.Millisecond, "the replay is refused in TLS")

	// Refused edges: each counted under its cause, each client told, nothing upstream.
	otherKey := filepath.Join(t.TempDir(), "other.key")
	require.Equal(t, 0, exec0(t, "keygen", "--out", otherKey))
	for _, tc := range []struct {
		name, creds, result string
	}{
		{"wrong key", "      auth: {key_file: " + otherKey + "}\n", "bad_key"},
		{"insecure edge", "      insecure: true\n", "not_tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := metricSum(t, originAdmin, "soapgw_tunnel_handshakes_total", "result="+tc.result)
			edge, _, g := authEdge(t, tunnel, tc.creds)
			waitRefused(t, edge)
			require.Eventually(t, func() bool {
				return metricSum(t, originAdmin, "soapgw_tunnel_handshakes_total", "result="+tc.result) > before
			}, 10*time.Second, 20*time.Millisecond)
			if tc.result == "bad_key" {
				require.Eventually(t, func() bool { return strings.Contains(g.out.String(), "the origin refused this edge's key") }, 5*time.Second, 20*time.Millisecond, "the edge says why")
			}
		})
	}
	require.Contains(t, origin.out.String(), "tunnel handshake refused")
	require.Contains(t, origin.out.String(), "result=bad_key")
	require.Len(t, srv.Requests(), 1, "no refused edge reached the upstream")

	// No credentials at all: a configuration error, before anything runs.
	path := filepath.Join(t.TempDir(), "nocreds.yaml")
	require.NoError(t, os.WriteFile(path, []byte("edge:\n  listeners: [{name: s, listen: '127.0.0.1:0'}]\n  peers: [{name: dc1, address: '"+tunnel+"'}]\n  routes: [{peer: dc1, upstream: svc}]\n"), 0o600))
	code, stderr := execOut(t, "config", "check", path)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "nocreds.yaml:3: edge.peers[0]: no credentials for the origin")
}

// TestTunnelAuthMutualTLS: mutual TLS alone authenticates; an edge whose certificate
// another CA signed is refused and counted.
func TestTunnelAuthMutualTLS(t *testing.T) {
	dir := t.TempDir()
	require.Equal(t, 0, exec0(t, "keygen", "--tls", filepath.Join(dir, "a"), "--origin-name", "origin.test"))
	require.Equal(t, 0, exec0(t, "keygen", "--tls", filepath.Join(dir, "b"), "--origin-name", "origin.test"))
	f := func(set, name string) string { return filepath.Join(dir, set, name) }
	srv := echoServer(t)
	tunnel, originAdmin, _ := authOrigin(t, srv.URL(), fmt.Sprintf("  tls: {cert_file: %s, key_file: %s, ca_file: %s}\n",
		f("a", "origin.pem"), f("a", "origin-key.pem"), f("a", "ca.pem")))

	edge, edgeAdmin, _ := authEdge(t, tunnel, fmt.Sprintf("      tls: {ca_file: %s, server_name: origin.test, cert_file: %s, key_file: %s}\n",
		f("a", "ca.pem"), f("a", "edge.pem"), f("a", "edge-key.pem")))
	(&gateway{admin: edgeAdmin}).waitReadyAddr(t, 10*time.Second)
	resp := authCall(t, edge, "mtls")
	require.True(t, strings.HasPrefix(resp, "HTTP/1.0 200 OK\r\n"), "%q", resp)

	before := metricSum(t, originAdmin, "soapgw_tunnel_handshakes_total", "result=bad_certificate")
	bad, _, _ := authEdge(t, tunnel, fmt.Sprintf("      tls: {ca_file: %s, server_name: origin.test, cert_file: %s, key_file: %s}\n",
		f("a", "ca.pem"), f("b", "edge.pem"), f("b", "edge-key.pem")))
	waitRefused(t, bad)
	require.Eventually(t, func() bool {
		return metricSum(t, originAdmin, "soapgw_tunnel_handshakes_total", "result=bad_certificate") > before
	}, 10*time.Second, 20*time.Millisecond)
	require.Len(t, srv.Requests(), 1)
}

// TestTunnelAuthInsecure: a plaintext tunnel runs only when both sides say insecure:
// true; then it works, is visibly plaintext, and the origin warns and exports the gauge.
// An insecure origin refuses an authenticating edge.
func TestTunnelAuthInsecure(t *testing.T) {
	srv := echoServer(t)
	tunnel, originAdmin, origin := authOrigin(t, srv.URL(), "  insecure: true\n")
	require.Contains(t, origin.out.String(), "origin.insecure is true")
	require.Equal(t, 1.0, metricSum(t, originAdmin, "soapgw_tunnel_insecure", "role=origin"))
	tap := startTapRelay(t, tunnel)

	edge, edgeAdmin, _ := authEdge(t, tap.addr(), "      insecure: true\n")
	(&gateway{admin: edgeAdmin}).waitReadyAddr(t, 10*time.Second)
	resp := authCall(t, edge, "plain")
	require.True(t, strings.HasPrefix(resp, "HTTP/1.0 200 OK\r\n"), "%q", resp)
	up, _, _ := tap.recorded()
	require.Contains(t, string(up), "e2e-edge", "an insecure tunnel is plaintext: the HELLO's node name is readable")
	require.Equal(t, 1.0, metricSum(t, edgeAdmin, "soapgw_tunnel_insecure", "role=edge", "peer=dc1"))

	before := metricSum(t, originAdmin, "soapgw_tunnel_handshakes_total", "result=unexpected_tls")
	secure, _, _ := authEdge(t, tunnel, "      auth: {key_file: "+tunnelKeyFile+"}\n")
	waitRefused(t, secure)
	require.Eventually(t, func() bool {
		return metricSum(t, originAdmin, "soapgw_tunnel_handshakes_total", "result=unexpected_tls") > before
	}, 10*time.Second, 20*time.Millisecond)
	require.Len(t, srv.Requests(), 1)
}

// exec0 runs the soapgw binary and returns its exit code.
func exec0(t *testing.T, args ...string) int {
	code, _ := execOut(t, args...)
	return code
}

func execOut(t *testing.T, args ...string) (int, string) {
	t.Helper()
	p := startProc(t, binary, args...)
	code := p.exitCode(30 * time.Second)
	return code, p.out.String()
}
