package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// floodKind is one way of occupying an origin without credentials.
type floodKind struct {
	name    string
	sockets int // held open at once, each reopened as soon as the origin closes it
	sources int // distinct loopback source addresses they come from
	attack  func(c net.Conn)
}

// floodKinds are the attacks of issue #14: silent sockets, garbage, TLS handshakes that
// complete without credentials (with no proof, or a wrong one), and plaintext tunnel
// HELLOs. Each returns when the origin closes the connection.
var floodKinds = []floodKind{
	{name: "silent", sockets: 512, sources: 32, attack: func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }},
	{name: "garbage", sockets: 256, sources: 16, attack: func(c net.Conn) {
		b := make([]byte, 512)
		_, _ = rand.Read(b)
		_, _ = c.Write(b)
		_, _ = io.Copy(io.Discard, c)
	}},
	{name: "tls-no-proof", sockets: 128, sources: 8, attack: func(c net.Conn) {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		_ = tc.Handshake()
		_, _ = io.Copy(io.Discard, tc)
	}},
	{name: "tls-wrong-proof", sockets: 128, sources: 8, attack: func(c net.Conn) {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if tc.Handshake() == nil {
			proof := append([]byte("SGWA\x01\x01"), make([]byte, 40)...)
			_, _ = rand.Read(proof[6:])
			_, _ = tc.Write(proof)
		}
		_, _ = io.Copy(io.Discard, tc)
	}},
	{name: "plaintext-hello", sockets: 64, sources: 4, attack: func(c net.Conn) {
		hello := []byte(`{"proto":3,"node":"intruder","codecs":[0]}`)
		_, _ = c.Write(append([]byte{0, 0, byte(len(hello)), 5, 0, 0, 0, 0, 0}, hello...))
		_, _ = io.Copy(io.Discard, c)
	}},
}

// flooder runs every floodKind against addr from loopback addresses 127.0.<k>.<n> (never
// 127.0.0.1, the edge's) until ctx ends, and counts the connections it made.
func flooder(ctx context.Context, addr string) (wait func() (conns int64)) {
	var wg sync.WaitGroup
	var conns atomic.Int64
	for k, kind := range floodKinds {
		for i := range kind.sockets {
			src := &net.TCPAddr{IP: net.IPv4(127, 0, byte(10+k), byte(2+i%kind.sources))}
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := net.Dialer{LocalAddr: src, Timeout: time.Second}
				for ctx.Err() == nil {
					c, err := d.DialContext(ctx, "tcp", addr)
					if err != nil {
						select { // the accept queue is full: try again shortly
						case <-ctx.Done():
						case <-time.After(10 * time.Millisecond):
						}
						continue
					}
					conns.Add(1)
					stop := context.AfterFunc(ctx, func() { _ = c.Close() })
					_ = c.SetDeadline(time.Now().Add(30 * time.Second))
					kind.attack(c)
					stop()
					_ = c.Close()
				}
			}()
		}
	}
	return func() int64 { wg.Wait(); return conns.Load() }
}

// TestTunnelHandshakeFlood: while 1,088 connections without credentials (silent sockets,
// garbage, TLS handshakes with no or a wrong key proof, plaintext HELLOs) hit the origin
// from other addresses and are reopened as fast as it closes them, an authenticated edge
// that starts during the flood, and again after a kill -9 and restart, gets in within
// seconds and makes its calls with every response checked. The origin's pending
// handshakes stay within their budget and its refusal log stays rate-limited.
func TestTunnelHandshakeFlood(t *testing.T) {
	srv := startRecordingServer(t, func(r *recordedRequest) []byte {
		return soapResponse(200, "OK", [][2]string{{"Content-Type", "text/xml"}}, append([]byte("<r>"), append(r.Body, "</r>"...)...))
	})
	a := newPairAddrs(t)
	origin := startGateway(t, a.OriginAdmin, originYAML(a, srv.URL(), "  handshake_timeout: 3s\n"))
	originPID := origin.cmd.Process.Pid

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cpu0 := procCPU(t, originPID)
	floodStart := time.Now()
	wait := flooder(ctx, a.Tunnel)
	defer func() { cancel(); wait() }()

	// Let the flood fill every budget before the edge arrives.
	require.Eventually(t, func() bool {
		return metricSum(t, a.OriginAdmin, "soapgw_tunnel_handshakes_total", `result=evicted`) > 500
	}, 15*time.Second, 50*time.Millisecond, "the flood never filled the handshake budget")

	edgePath := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(edgePath, []byte(edgeYAML(a, "")), 0o600))
	const calls = 20
	for round := range 2 {
		start := time.Now()
		edge := &gateway{proc: startProc(t, binary, "run", "--config", edgePath, "--log-level", "debug"), admin: a.EdgeAdmin}
		edge.waitReady(t, 15*time.Second)
		ready := time.Since(start)
		for i := range calls {
			body := fmt.Sprintf("<call round=%q n=%q/>", strconv.Itoa(round), strconv.Itoa(i))
			req := "POST /svc HTTP/1.0\r\nHost: x\r\nContent-Type: text/xml\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
			resp := string(rawExchange(t, a.Edge, []byte(req), 10*time.Second))
			require.True(t, strings.HasPrefix(resp, "HTTP/1.0 200 OK\r\n"), "round %d call %d during the flood: %q", round, i, resp)
			require.True(t, strings.HasSuffix(resp, "\r\n\r\n<r>"+body+"</r>"), "round %d call %d: %q", round, i, resp)
		}
		t.Logf("round %d: edge (re)started during the flood was ready after %s and made %d byte-checked calls in %s",
			round, ready.Round(time.Millisecond), calls, (time.Since(start) - ready).Round(time.Millisecond))
		edge.kill() // kill -9: the next round is an edge that comes back during the flood
	}
	// Flood past one log interval (10 s), so the rate-limited lines carry their counts.
	for time.Since(floodStart) < 12*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	pending := metricSum(t, a.OriginAdmin, "soapgw_tunnel_handshakes_pending")
	require.LessOrEqual(t, pending, 256.0, "pending handshakes beyond max_handshakes")
	elapsed := time.Since(floodStart)
	cpu := procCPU(t, originPID) - cpu0
	cancel()
	conns := wait()

	results := map[string]float64{}
	var refused float64
	for _, r := range []string{"ok", "evicted", "timeout", "not_tls", "tls_failed", "bad_key", "protocol_error", "io_error", "hello_failed", "connection_limit"} {
		results[r] = metricSum(t, a.OriginAdmin, "soapgw_tunnel_handshakes_total", "result="+r)
		if r != "ok" {
			refused += results[r]
		}
	}
	t.Logf("flood: %d attacker connections in %s; origin handled %.0f handshakes/s (%v), CPU %.2f s (%.0f%% of a core, %.0f µs per handshake)",
		conns, elapsed.Round(time.Millisecond), (refused+results["ok"])/elapsed.Seconds(), results,
		cpu.Seconds(), 100*cpu.Seconds()/elapsed.Seconds(), float64(cpu.Microseconds())/(refused+results["ok"]))
	require.GreaterOrEqual(t, results["ok"], 2.0, "the edge's tunnel connections were admitted")
	require.Len(t, srv.Requests(), 2*calls, "only the edge's calls reached the upstream")

	// Refusals are logged once per cause per 10 s, with a count, not once each.
	lines := strings.Count(origin.out.String(), "tunnel handshake refused")
	require.Less(t, lines, 60, "refusal log lines are rate-limited (%d lines for %.0f refusals)", lines, refused)
	require.Contains(t, origin.out.String(), "suppressed=")
}

// procCPU is the user+system CPU time the process has used (Linux /proc, 100 Hz ticks).
func procCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
