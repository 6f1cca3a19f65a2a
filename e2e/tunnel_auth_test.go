package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// This file: TestTunnelAuth, and the helpers it shares with reload_credentials_test.go
// (prefix "ta"): a recording TCP relay, gateways with given credentials, byte-checked
// calls, and waits on metrics and log lines.

// ---- a TCP relay between an edge and an origin ----

// taRecordCap bounds what a relay records per connection and direction.
const taRecordCap = 4 << 20

// taRelay is a TCP relay on 127.0.0.1 between an edge and an origin. It can record what
// crosses each of its connections in both directions, and cut every connection it holds
// (its listener stays), which makes the edge dial again, through it.
type taRelay struct {
	ln     net.Listener
	target string
	record bool

	mu     sync.Mutex
	closed bool
	live   map[*taRelayConn]struct{}
	conns  []*taRelayConn // every connection relayed, in accept order
	wg     sync.WaitGroup
}

type taRelayConn struct {
	edge, origin net.Conn
	once         sync.Once
	mu           sync.Mutex
	up, down     []byte // edge→origin, origin→edge
}

func startTARelay(t testing.TB, target string, record bool) *taRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &taRelay{ln: ln, target: target, record: record, live: map[*taRelayConn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	t.Cleanup(r.close)
	return r
}

func (r *taRelay) addr() string { return r.ln.Addr().String() }

func (r *taRelay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		o, err := net.DialTimeout("tcp", r.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		rc := &taRelayConn{edge: c, origin: o}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			_ = c.Close()
			_ = o.Close()
			return
		}
		r.live[rc] = struct{}{}
		r.conns = append(r.conns, rc)
		r.wg.Add(2)
		r.mu.Unlock()
		go r.pipe(rc, o, c, &rc.up)
		go r.pipe(rc, c, o, &rc.down)
	}
}

// pipe copies src to dst, recording; when either side ends, both sockets close.
func (r *taRelay) pipe(rc *taRelayConn, dst, src net.Conn, rec *[]byte) {
	defer r.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if r.record {
				rc.mu.Lock()
				if len(*rec) < taRecordCap {
					*rec = append(*rec, buf[:min(n, taRecordCap-len(*rec))]...)
				}
				rc.mu.Unlock()
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			r.drop(rc)
			return
		}
	}
}

func (r *taRelay) drop(rc *taRelayConn) {
	rc.once.Do(func() {
		_ = rc.edge.Close()
		_ = rc.origin.Close()
	})
	r.mu.Lock()
	delete(r.live, rc)
	r.mu.Unlock()
}

// cut closes every connection the relay holds and returns how many there were.
func (r *taRelay) cut() int {
	r.mu.Lock()
	live := make([]*taRelayConn, 0, len(r.live))
	for rc := range r.live {
		live = append(live, rc)
	}
	r.mu.Unlock()
	for _, rc := range live {
		r.drop(rc)
	}
	return len(live)
}

// accepted is the number of connections relayed so far.
func (r *taRelay) accepted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// recorded returns what connection i carried so far: edge→origin and origin→edge.
func (r *taRelay) recorded(i int) (up, down []byte) {
	r.mu.Lock()
	rc := r.conns[i]
	r.mu.Unlock()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return bytes.Clone(rc.up), bytes.Clone(rc.down)
}

func (r *taRelay) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	_ = r.ln.Close()
	r.cut()
	r.wg.Wait()
}

// ---- keys ----

// taKey returns a new random 256-bit tunnel key in base64 and its key id, computed from
// internal/peerauth/SPEC.md: SHA-256("soapgw key id v1" || 0x00 || K)[0:8], in hex.
func taKey(t testing.TB) (key, id string) {
	t.Helper()
	k := make([]byte, 32)
	_, err := rand.Read(k)
	require.NoError(t, err)
	h := sha256.Sum256(append([]byte("soapgw key id v1\x00"), k...))
	return base64.StdEncoding.EncodeToString(k), hex.EncodeToString(h[:8])
}

// taWriteAtomic replaces path as config tools do: write a temporary file beside it, then
// rename it over path, so a reader sees the old or the new content, never half of it.
func taWriteAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := fmt.Sprintf("%s.tmp%d", path, time.Now().UnixNano())
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// ---- gateways ----

// taGateway is a soapgw process with its configuration file and main address (an edge's
// client listener or an origin's tunnel listener).
type taGateway struct {
	*gateway
	addr, config string
}

// taStart writes yml to a fresh file and runs soapgw on it; with wait it waits for /readyz.
func taStart(t testing.TB, admin, addr, yml string, wait bool) *taGateway {
	t.Helper()
	path := filepath.Join(t.TempDir(), "soapgw.yaml")
	taWriteAtomic(t, path, []byte(yml))
	g := &taGateway{gateway: &gateway{proc: startProc(t, binary, "run", "--config", path, "--log-level", "debug"), admin: admin}, addr: addr, config: path}
	t.Cleanup(func() {
		if strings.Contains(g.out.String(), "WARNING: DATA RACE") {
			t.Errorf("soapgw (%s) reported a data race", yml[:strings.IndexByte(yml, '\n')])
		}
	})
	if wait {
		g.waitReady(t, 20*time.Second)
	}
	return g
}

// taOriginYAML is an origin for upstream with the given credential lines (YAML under
// origin:, indented two spaces).
func taOriginYAML(node, admin, listen, upstream, creds, extra string) string {
	return fmt.Sprintf(`node: %s
admin:
  listen: %s
origin:
  listen: %s
%s  upstreams:
    - name: svc
      url: %s
%s`, node, admin, listen, creds, upstream, extra)
}

func taStartOrigin(t testing.TB, node, upstream, creds string) *taGateway {
	t.Helper()
	admin, listen := freePort(t), freePort(t)
	return taStart(t, admin, listen, taOriginYAML(node, admin, listen, upstream, creds, ""), true)
}

// taEdgeYAML is an edge with one peer at peerAddr and the given credential lines (YAML
// under the peer, indented six spaces).
func taEdgeYAML(node, admin, listen, peerAddr, creds string, connections int) string {
	return fmt.Sprintf(`node: %s
admin:
  listen: %s
edge:
  listeners:
    - name: soap
      listen: %s
  peers:
    - name: dc1
      address: %s
      connections: %d
      dial_timeout: 2s
%s  routes:
    - peer: dc1
      upstream: svc
`, node, admin, listen, peerAddr, connections, creds)
}

// taStartEdge starts an edge; with wait it waits until its tunnel is up.
func taStartEdge(t testing.TB, node, peerAddr, creds string, connections int, wait bool) *taGateway {
	t.Helper()
	admin, listen := freePort(t), freePort(t)
	return taStart(t, admin, listen, taEdgeYAML(node, admin, listen, peerAddr, creds, connections), wait)
}

// ---- byte-checked calls ----

// taUpstream is a recording upstream that answers every request with its body wrapped in
// <r></r>.
func taUpstream(t testing.TB) *recordingServer {
	return startRecordingServer(t, func(r *recordedRequest) []byte {
		return soapResponse(200, "OK", [][2]string{{"Content-Type", "text/xml; charset=utf-8"}}, append(append([]byte("<r>"), r.Body...), "</r>"...))
	})
}

func taBody(marker string) string {
	return `<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><m:Ping xmlns:m="urn:soapgw-e2e"><m:id>` +
		marker + `</m:id></m:Ping></soap:Body></soap:Envelope>`
}

// taRequest is the request a client sends for marker (HTTP/1.minor).
func taRequest(minor int, marker string) string {
	body := taBody(marker)
	return fmt.Sprintf("POST /svc HTTP/1.%d\r\nHost: soap.example\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:soapgw-e2e#Ping\"\r\nContent-Length: %d\r\n\r\n%s", minor, len(body), body)
}

// taResponse is exactly what the client must receive for marker.
func taResponse(minor int, marker string) string {
	body := "<r>" + taBody(marker) + "</r>"
	return fmt.Sprintf("HTTP/1.%d 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s", minor, len(body), body)
}

// taCall makes one HTTP/1.0 exchange on a new connection to edge and checks the response
// byte for byte. It returns the response it got; it never fails the test itself (it runs
// in load goroutines).
func taCall(edge, marker string) (string, error) {
	c, err := net.DialTimeout("tcp", edge, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, taRequest(0, marker)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return string(b), err
	}
	if want := taResponse(0, marker); string(b) != want {
		return string(b), fmt.Errorf("call %s: got %q, want %q", marker, b, want)
	}
	return string(b), nil
}

// taKeepAlive is a client that sends its exchanges one after another on one HTTP/1.1
// connection, reconnecting only if the edge closes it.
type taKeepAlive struct {
	edge string
	c    net.Conn
	br   *bufio.Reader
}

func (k *taKeepAlive) call(marker string) error {
	if k.c == nil {
		c, err := net.DialTimeout("tcp", k.edge, 5*time.Second)
		if err != nil {
			return err
		}
		k.c, k.br = c, bufio.NewReader(c)
	}
	_ = k.c.SetDeadline(time.Now().Add(20 * time.Second))
	want := taResponse(1, marker)
	_, err := io.WriteString(k.c, taRequest(1, marker))
	var got []byte
	if err == nil {
		got, err = taReadResponse(k.br)
	}
	if err == nil && string(got) != want {
		err = fmt.Errorf("keep-alive call %s: got %q, want %q", marker, got, want)
	}
	if err != nil {
		k.close()
	}
	return err
}

// taReadResponse reads one response with a Content-Length body and returns its bytes.
func taReadResponse(br *bufio.Reader) ([]byte, error) {
	var resp []byte
	length := -1
	for {
		line, err := br.ReadBytes('\n')
		resp = append(resp, line...)
		if err != nil {
			return resp, err
		}
		if string(line) == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(string(line), ":"); ok && strings.EqualFold(k, "Content-Length") {
			if length, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return resp, err
			}
		}
	}
	if length < 0 {
		return resp, fmt.Errorf("response without Content-Length: %q", resp)
	}
	body := make([]byte, length)
	_, err := io.ReadFull(br, body)
	return append(resp, body...), err
}

func (k *taKeepAlive) close() {
	if k.c != nil {
		_ = k.c.Close()
		k.c = nil
	}
}

// taRequireUpstreamSaw checks that the upstream received the request for each marker
// exactly once, byte for byte (the client's HTTP/1.0 or 1.1 request, sent as HTTP/1.1).
func taRequireUpstreamSaw(t testing.TB, srv *recordingServer, markers ...string) {
	t.Helper()
	seen := map[string][]string{}
	re := regexp.MustCompile(`<m:id>([^<]*)</m:id>`)
	for _, r := range srv.Requests() {
		m := re.FindSubmatch(r.Body)
		if m == nil {
			continue
		}
		seen[string(m[1])] = append(seen[string(m[1])], string(r.Raw))
	}
	for _, m := range markers {
		got := seen[m]
		require.Len(t, got, 1, "the upstream must see marker %s exactly once", m)
		require.Equal(t, taRequest(1, m), got[0], "the upstream got the request byte for byte")
	}
}

// taUpstreamHas reports whether any request the upstream got carries marker.
func taUpstreamHas(srv *recordingServer, marker string) bool {
	for _, r := range srv.Requests() {
		if bytes.Contains(r.Raw, []byte(marker)) {
			return true
		}
	}
	return false
}

// ---- waiting on metrics and logs ----

// taWaitMetric waits until the sum of a metric's matching samples satisfies ok.
func taWaitMetric(t testing.TB, admin, name string, ok func(float64) bool, labels ...string) float64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var v float64
	for {
		v = metricSum(t, admin, name, labels...)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v is %v; the awaited value did not come within 20s", name, labels, v)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// taLogLines returns g's output lines that contain every one of parts.
func taLogLines(g *gateway, parts ...string) []string {
	var out []string
	for _, line := range strings.Split(g.out.String(), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// taWaitLog waits until g has logged at least n lines containing every one of parts.
func taWaitLog(t testing.TB, g *gateway, n int, parts ...string) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		lines := taLogLines(g, parts...)
		if len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d log lines with %q within 20s", n, parts)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// taRequireRefused starts an edge with creds against peerAddr and checks the refusal from
// every side: its clients get a 503 origin_unreachable fault (whose text contains each of
// edgeSays), the edge is not ready, the origin counts the handshake under result and logs
// its rate-limited refusal line naming result, and the upstream sees nothing (no request
// at all, unless busy: other clients are calling it).
func taRequireRefused(t *testing.T, o *taGateway, srv *recordingServer, busy bool, peerAddr, creds, result string, edgeSays ...string) *taGateway {
	t.Helper()
	before := metricSum(t, o.admin, "soapgw_tunnel_handshakes_total", "result="+result)
	nReq := len(srv.Requests())
	marker := "refused-" + strings.NewReplacer(" ", "-", "/", "-").Replace(t.Name())
	e := taStartEdge(t, "ta-refused-edge", peerAddr, creds, 1, false)

	// The origin refuses the edge's connections, counts and logs them.
	taWaitMetric(t, o.admin, "soapgw_tunnel_handshakes_total", func(v float64) bool { return v > before }, "result="+result)
	taWaitLog(t, o.gateway, 1, `msg="tunnel handshake refused"`, "result="+result)

	// The edge's clients get a fault that says the origin is unreachable, and why.
	deadline := time.Now().Add(20 * time.Second)
	var resp string
	for {
		resp = ""
		if c, err := net.DialTimeout("tcp", e.addr, time.Second); err == nil {
			_ = c.Close()
			resp, _ = taCall(e.addr, marker)
			ok := strings.HasPrefix(resp, "HTTP/1.0 500 ") && strings.Contains(resp, "\r\nX-Soapgw-Status: 503\r\n") &&
				strings.Contains(resp, "\r\nX-Soapgw-Error: origin_unreachable\r\n")
			for _, s := range edgeSays {
				ok = ok && strings.Contains(resp, s)
			}
			if ok {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the edge's client never got the origin_unreachable fault naming %q; last response %q", edgeSays, resp)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if i := strings.Index(resp, "<faultstring>"); i >= 0 {
		t.Logf("the edge's client got: %s", resp[i:])
	}
	code, why := httpGet("http://" + e.admin + "/readyz")
	require.Equal(t, 503, code, "an edge the origin refuses is not ready: %s", why)
	if !busy {
		require.Len(t, srv.Requests(), nReq, "nothing reached the upstream")
	}
	require.False(t, taUpstreamHas(srv, marker), "nothing reached the upstream")
	require.Zero(t, metricSum(t, e.admin, "soapgw_tunnel_dials_total", "result=ok"), "the refused edge never had a tunnel")
	return e
}

// taRequireWorks makes byte-checked calls through edge and checks the upstream got them.
func taRequireWorks(t *testing.T, edge string, srv *recordingServer, markers ...string) {
	t.Helper()
	for _, m := range markers {
		_, err := taCall(edge, m)
		require.NoError(t, err)
	}
	taRequireUpstreamSaw(t, srv, markers...)
}

// ---- the test ----

// TestTunnelAuth runs real origins in each authentication mode (shared key, mutual TLS,
// insecure) and edges with matching and mismatching credentials against them:
//
//   - matching credentials work, byte for byte;
//   - every mismatch is refused before anything reaches the upstream: the edge's clients
//     get 503 origin_unreachable with the edge's reason, the origin counts the cause in
//     soapgw_tunnel_handshakes_total and logs "tunnel handshake refused" with it (once
//     per cause per 10 s);
//   - an edge without credentials is a configuration error;
//   - a recorded tunnel connection replayed to the origin gets nowhere;
//   - an authenticated tunnel carries nothing readable, an insecure one does (which shows
//     the readability check can fail).
func TestTunnelAuth(t *testing.T) {
	dir := t.TempDir()
	wrongKey := filepath.Join(dir, "wrong.key")
	k, _ := taKey(t)
	require.NoError(t, os.WriteFile(wrongKey, []byte(k+"\n"), 0o600))
	ca := newTestCA(t, dir, "ta-ca")
	otherCA := newTestCA(t, dir, "ta-other-ca")
	originCert, originKey := ca.issue(t, dir, "origin.ta.test", true)
	edgeCert, edgeKey := ca.issue(t, dir, "edge.ta.test", false)
	strangerCert, strangerKey := otherCA.issue(t, dir, "stranger.ta.test", false)
	keyCreds := func(indent, file string) string { return indent + "auth: {key_file: " + file + "}\n" }

	// Three origins, one per mode, each with its own recording upstream.
	keySrv, mtlsSrv, plainSrv := taUpstream(t), taUpstream(t), taUpstream(t)
	keyOrigin := taStartOrigin(t, "ta-key-origin", keySrv.URL(), keyCreds("  ", tunnelKeyFile))
	mtlsOrigin := taStartOrigin(t, "ta-mtls-origin", mtlsSrv.URL(),
		fmt.Sprintf("  tls: {cert_file: %s, key_file: %s, ca_file: %s}\n", originCert, originKey, ca.pem))
	plainOrigin := taStartOrigin(t, "ta-plain-origin", plainSrv.URL(), "  insecure: true\n")
	mtlsEdgeCreds := func(cert, key string) string {
		return fmt.Sprintf("      tls: {ca_file: %s, server_name: origin.ta.test, cert_file: %s, key_file: %s}\n", ca.pem, cert, key)
	}

	// The good shared-key edge runs through a recording relay, with one tunnel connection.
	keyRelay := startTARelay(t, keyOrigin.addr, true)
	keyEdge := taStartEdge(t, "ta-key-edge", keyRelay.addr(), keyCreds("      ", tunnelKeyFile), 1, true)

	t.Run("shared key", func(t *testing.T) {
		taRequireWorks(t, keyEdge.addr, keySrv, "sk-1", "sk-2", "sk-3")
		require.Equal(t, 1.0, metricSum(t, keyOrigin.admin, "soapgw_tunnel_handshakes_total", "result=ok"))
		_, keyID := taKeyIDOfFile(t, tunnelKeyFile)
		taWaitLog(t, keyOrigin.gateway, 1, "tunnel connection accepted", "authenticated_as=\"key "+keyID+"\"", "peer_node=ta-key-edge")
		require.Equal(t, 1, keyRelay.accepted(), "the edge's one tunnel connection ran through the relay")
	})

	t.Run("not plaintext on the wire", func(t *testing.T) {
		marker := "WireMarker-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		beforeUp, beforeDown := keyRelay.recorded(0)
		_, err := taCall(keyEdge.addr, marker)
		require.NoError(t, err)
		taRequireUpstreamSaw(t, keySrv, marker)
		up, down := keyRelay.recorded(0)
		require.Greater(t, len(up), len(beforeUp), "the exchange crossed the relay")
		require.Greater(t, len(down), len(beforeDown), "the exchange crossed the relay")
		require.Equal(t, byte(0x16), up[0], "the tunnel starts with a TLS handshake record")
		for _, plain := range []string{marker, "soap", "Envelope", "SOAPAction", "urn:soapgw-e2e", `"node"`, "ta-key-edge", "ta-key-origin"} {
			require.NotContains(t, string(up), plain, "edge→origin bytes are readable")
			require.NotContains(t, string(down), plain, "origin→edge bytes are readable")
		}
	})

	t.Run("replayed capture", func(t *testing.T) {
		// The edge's first (and only) tunnel connection, from its first byte: the TLS
		// handshake, the key proof, HELLO and the exchanges so far.
		capture, _ := keyRelay.recorded(0)
		require.NotEmpty(t, capture)
		nReq := len(keySrv.Requests())
		bad := func() float64 {
			return metricSum(t, keyOrigin.admin, "soapgw_tunnel_handshakes_total", "result=tls_failed") +
				metricSum(t, keyOrigin.admin, "soapgw_tunnel_handshakes_total", "result=io_error") +
				metricSum(t, keyOrigin.admin, "soapgw_tunnel_handshakes_total", "result=protocol_error") +
				metricSum(t, keyOrigin.admin, "soapgw_tunnel_handshakes_total", "result=bad_key")
		}
		before, okBefore := bad(), metricSum(t, keyOrigin.admin, "soapgw_tunnel_handshakes_total", "result=ok")

		c, err := net.DialTimeout("tcp", keyOrigin.addr, 5*time.Second)
		require.NoError(t, err)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(15 * time.Second))
		_, _ = c.Write(capture) // the origin may close before it took everything
		answer, _ := io.ReadAll(c)
		require.NotEmpty(t, answer, "the origin answered the replayed ClientHello with its own handshake")
		require.False(t, bytes.Contains(answer, []byte("<r>")), "nothing readable came back")

		taWaitMetric(t, keyOrigin.admin, "soapgw_tunnel_handshakes_total", func(v float64) bool { return v > 0 }, "result=tls_failed")
		require.Equal(t, before+1, bad(), "the replay is counted once, as a TLS failure (the replayed Finished does not verify)")
		require.Equal(t, okBefore, metricSum(t, keyOrigin.admin, "soapgw_tunnel_handshakes_total", "result=ok"))
		taWaitLog(t, keyOrigin.gateway, 1, `msg="tunnel handshake refused"`, "result=tls_failed")
		time.Sleep(200 * time.Millisecond) // anything the origin wrongly accepted would be upstream by now
		require.Len(t, keySrv.Requests(), nReq, "the replay reached nothing")
		// The real edge's tunnel is unharmed.
		taRequireWorks(t, keyEdge.addr, keySrv, "after-replay")
	})

	t.Run("mutual TLS only", func(t *testing.T) {
		e := taStartEdge(t, "ta-mtls-edge", mtlsOrigin.addr, mtlsEdgeCreds(edgeCert, edgeKey), 1, true)
		taRequireWorks(t, e.addr, mtlsSrv, "mtls-1", "mtls-2")
		lines := taWaitLog(t, mtlsOrigin.gateway, 1, "tunnel connection accepted", "peer_node=ta-mtls-edge")
		require.Contains(t, lines[0], `authenticated_as="certificate CN=edge.ta.test"`, "the origin names the edge by its certificate, no key")
	})

	t.Run("refused wrong key", func(t *testing.T) {
		_, wrongID := taKeyIDOfFile(t, wrongKey)
		e := taRequireRefused(t, keyOrigin, keySrv, false, keyOrigin.addr, keyCreds("      ", wrongKey), "bad_key", "the origin refused this edge", "bad_key", wrongID)
		taWaitLog(t, e.gateway, 1, "the origin refused this edge's key")
		// The edge keeps trying (with backoff); the origin counts every refusal but logs
		// one line per cause per 10 s, with the count of those it left out.
		n := taWaitMetric(t, keyOrigin.admin, "soapgw_tunnel_handshakes_total", func(v float64) bool { return v >= 3 }, "result=bad_key")
		lines := taLogLines(keyOrigin.gateway, `msg="tunnel handshake refused"`, "result=bad_key")
		require.Less(t, float64(len(lines)), n, "refusals are rate-limited in the log")
		require.Contains(t, lines[0], "edge used key id "+wrongID+", which this origin does not hold")
	})

	t.Run("refused no credentials", func(t *testing.T) {
		admin, listen := freePort(t), freePort(t)
		yml := taEdgeYAML("ta-nocreds-edge", admin, listen, keyOrigin.addr, "", 1)
		path := filepath.Join(t.TempDir(), "nocreds.yaml")
		require.NoError(t, os.WriteFile(path, []byte(yml), 0o600))
		line := 0
		for i, l := range strings.Split(yml, "\n") {
			if strings.Contains(l, "- name: dc1") {
				line = i + 1
			}
		}
		for _, args := range [][]string{{"config", "check", path}, {"run", "--config", path}} {
			p := startProc(t, binary, args...)
			require.Equal(t, 2, p.exitCode(30*time.Second), "soapgw %s: a configuration error", args[0])
			out := p.out.String()
			require.Contains(t, out, fmt.Sprintf("nocreds.yaml:%d: edge.peers[0]: no credentials for the origin", line), "soapgw %s names file:line", args[0])
			for _, word := range []string{"auth", "tls", "insecure: true"} {
				require.Contains(t, out, word, "the error names the ways to authenticate")
			}
		}
		code, _ := httpGet("http://" + admin + "/readyz")
		require.Zero(t, code, "nothing ran")
	})

	// A client certificate from another CA is a bad certificate, whether that CA's name
	// differs (the usual case: Go's TLS client would send no certificate at all unless
	// told to, see peerauth.Client.Update) or is the same as the origin's CA.
	t.Run("refused client certificate of another CA", func(t *testing.T) {
		taRequireRefused(t, mtlsOrigin, mtlsSrv, false, mtlsOrigin.addr, mtlsEdgeCreds(strangerCert, strangerKey), "bad_certificate", "unknown certificate authority")
		taWaitLog(t, mtlsOrigin.gateway, 1, `msg="tunnel handshake refused"`, "result=bad_certificate", "certificate signed by unknown authority")
	})

	t.Run("refused client certificate of another CA of the same name", func(t *testing.T) {
		twin := newTestCA(t, t.TempDir(), "ta-ca")
		cert, key := twin.issue(t, t.TempDir(), "edge.ta.test", false)
		taRequireRefused(t, mtlsOrigin, mtlsSrv, false, mtlsOrigin.addr, mtlsEdgeCreds(cert, key), "bad_certificate", "unknown certificate authority")
	})

	t.Run("refused shared key without client certificate against mutual TLS", func(t *testing.T) {
		taRequireRefused(t, mtlsOrigin, mtlsSrv, false, mtlsOrigin.addr,
			fmt.Sprintf("      auth: {key_file: %s}\n      tls: {ca_file: %s, server_name: origin.ta.test}\n", tunnelKeyFile, ca.pem), "tls_failed", "certificate required")
	})

	t.Run("refused insecure edge against shared key", func(t *testing.T) {
		taRequireRefused(t, keyOrigin, keySrv, false, keyOrigin.addr, "      insecure: true\n", "not_tls", "without answering the plaintext tunnel handshake")
		taWaitLog(t, keyOrigin.gateway, 1, `msg="tunnel handshake refused"`, "result=not_tls", "insecure: true, but this origin requires authentication")
	})

	t.Run("refused insecure edge against mutual TLS", func(t *testing.T) {
		taRequireRefused(t, mtlsOrigin, mtlsSrv, false, mtlsOrigin.addr, "      insecure: true\n", "not_tls", "without answering the plaintext tunnel handshake")
	})

	t.Run("refused shared-key edge against insecure origin", func(t *testing.T) {
		taRequireRefused(t, plainOrigin, plainSrv, false, plainOrigin.addr, keyCreds("      ", tunnelKeyFile), "unexpected_tls", "without answering TLS: if it runs with insecure: true")
		taWaitLog(t, plainOrigin.gateway, 1, `msg="tunnel handshake refused"`, "result=unexpected_tls", "this origin has insecure: true")
	})

	t.Run("refused mutual-TLS edge against insecure origin", func(t *testing.T) {
		taRequireRefused(t, plainOrigin, plainSrv, false, plainOrigin.addr, mtlsEdgeCreds(edgeCert, edgeKey), "unexpected_tls", "without answering TLS: if it runs with insecure: true")
	})

	t.Run("insecure pair", func(t *testing.T) {
		taWaitLog(t, plainOrigin.gateway, 1, "level=WARN", "origin.insecure is true: tunnels are plaintext and unauthenticated")
		require.Equal(t, 1.0, metricSum(t, plainOrigin.admin, "soapgw_tunnel_insecure", "role=origin"))
		require.Equal(t, 0.0, metricSum(t, keyOrigin.admin, "soapgw_tunnel_insecure", "role=origin"), "an authenticated origin exports 0")

		relay := startTARelay(t, plainOrigin.addr, true)
		e := taStartEdge(t, "ta-plain-edge", relay.addr(), "      insecure: true\n", 1, true)
		taRequireWorks(t, e.addr, plainSrv, "plain-1", "plain-2")
		require.Equal(t, 1.0, metricSum(t, e.admin, "soapgw_tunnel_insecure", "role=edge", "peer=dc1"))
		taWaitLog(t, e.gateway, 1, "level=WARN", "insecure is true for this peer")
		// The control of "not plaintext on the wire": here the same check finds the
		// HELLO's JSON in clear.
		up, down := relay.recorded(0)
		require.Contains(t, string(up), `"node":"ta-plain-edge"`, "an insecure tunnel is readable on the wire")
		require.Contains(t, string(down), `"node":"ta-plain-origin"`)
		require.Equal(t, byte(0x00), up[0], "a plaintext tunnel starts with a HELLO frame")
	})

	// No refused edge left anything upstream.
	for _, srv := range []*recordingServer{keySrv, mtlsSrv, plainSrv} {
		require.False(t, taUpstreamHas(srv, "refused-"))
	}
}

// taKeyIDOfFile returns the first key of a key file and its key id.
func taKeyIDOfFile(t testing.TB, path string) (key, id string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		require.NoError(t, err)
		h := sha256.Sum256(append([]byte("soapgw key id v1\x00"), k...))
		return line, hex.EncodeToString(h[:8])
	}
	t.Fatalf("%s holds no key", path)
	return "", ""
}
