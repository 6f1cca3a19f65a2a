package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// binary is the soapgw executable built by TestMain.
var binary string

// tunnelKeyFile is the shared tunnel key (written by TestMain with `soapgw keygen`) that
// the pairs of originYAML and edgeYAML authenticate with, as deployments do.
var tunnelKeyFile string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "soapgw-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "soapgw")
	// The fault-injection hook (SOAPGW_FAULT_DESYNC_EVERY, e2e/codec_test.go) exists only
	// with this build tag; the production binary has none.
	build := exec.Command("go", "build", "-race", "-tags", "soapgw_faultinject", "-o", binary, "../cmd/soapgw")
	if os.Getenv("SOAPGW_E2E_NORACE") != "" {
		build = exec.Command("go", "build", "-tags", "soapgw_faultinject", "-o", binary, "../cmd/soapgw")
	}
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building soapgw:", err)
		os.Exit(1)
	}
	tunnelKeyFile = filepath.Join(dir, "tunnel.key")
	keygen := exec.Command(binary, "keygen", "--out", tunnelKeyFile)
	keygen.Stderr = os.Stderr
	if err := keygen.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "soapgw keygen:", err)
		os.Exit(1)
	}
	code := m.Run()
	// Every goroutine the tests started (relays, upstreams, process waiters) must be
	// gone: a leak here is a helper that does not stop what it started.
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, "e2e: goroutines outlived the tests:", err)
		code = 1
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// handedOut remembers every port freePort returned, so two gateways of this test binary
// (parallel tests, or an edge and an origin of one pair) never get the same one.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
	rng   *rand.Rand
}

// freePort returns a loopback address whose TCP and UDP ports were both free a moment
// ago and that no other call returned. Gateways need fixed addresses in their
// configuration, and a test binds it only when the gateway starts; in between, a port
// the kernel may hand out on its own (any listen on port 0, any outgoing connection) could
// take it: a UDP relay once got the edge's listener port that way. So the ports come from
// below the kernel's ephemeral range (ip_local_port_range), which it never assigns by
// itself; only other processes that pick fixed ports can still collide.
func freePort(t testing.TB) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
		handedOut.rng = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	}
	lo, hi := fixedPortRange()
	for range 1000 {
		port := lo + handedOut.rng.IntN(hi-lo)
		if handedOut.ports[port] || !portFree(port) {
			continue
		}
		handedOut.ports[port] = true
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	t.Fatal("freePort: no unused loopback port found")
	return ""
}

// fixedPortRange is the range freePort draws from: the 16,384 ports below the kernel's
// ephemeral range (20000-32767 on a default Linux, whose range starts at 32768).
func fixedPortRange() (lo, hi int) {
	ephemeralLow := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				ephemeralLow = n
			}
		}
	}
	lo = max(ephemeralLow-16384, 10000)
	if ephemeralLow-lo < 1024 { // a range that starts low: draw from above 10000 and accept the race
		return 10000, 30000
	}
	return lo, ephemeralLow
}

// portFree reports whether both the TCP and the UDP port can be bound on loopback now
// (an origin listens on both).
func portFree(port int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	return pc.Close() == nil
}

// proc is a process started by a test; it is killed (by PID) at cleanup.
type proc struct {
	t    testing.TB
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startProc(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, nil, name, args...)
}

// startProcEnv is startProc with extra environment variables (KEY=value).
func startProcEnv(t testing.TB, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(name, args...), out: &syncBuffer{}, done: make(chan struct{})}
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("output of %s (pid %d):\n%s", filepath.Base(name), p.cmd.Process.Pid, p.out.String())
		}
	})
	return p
}

// signal sends sig and waits up to timeout for the process to exit.
func (p *proc) signal(sig syscall.Signal, timeout time.Duration) (exited bool) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exitCode waits for the process and returns its exit code.
func (p *proc) exitCode(timeout time.Duration) int {
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("process %d did not exit within %s", p.cmd.Process.Pid, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// gateway is a soapgw process started from a YAML configuration.
type gateway struct {
	*proc
	admin string
}

// startGateway writes yml to a file and runs `soapgw run` on it; it waits until the
// admin /readyz answers 200 (the YAML must configure admin.listen at adminAddr).
func startGateway(t testing.TB, adminAddr, yml string, extraArgs ...string) *gateway {
	t.Helper()
	path := filepath.Join(t.TempDir(), "soapgw.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yml), 0o600))
	args := append([]string{"run", "--config", path, "--log-level", "debug"}, extraArgs...)
	g := &gateway{proc: startProc(t, binary, args...), admin: adminAddr}
	g.waitReady(t, 10*time.Second)
	return g
}

func (g *gateway) waitReady(t testing.TB, within time.Duration) {
	t.Helper()
	g.waitReadyAddr(t, within)
}

// waitReadyAddr polls /readyz; g.proc may be nil when the process was started by hand.
func (g *gateway) waitReadyAddr(t testing.TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if g.proc != nil {
			select {
			case <-g.done:
				t.Fatalf("gateway exited early: %v\n%s", g.err, g.out.String())
			default:
			}
		}
		if code, _ := httpGet("http://" + g.admin + "/readyz"); code == 200 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	if g.proc != nil {
		t.Fatalf("gateway not ready within %s\n%s", within, g.out.String())
	}
	t.Fatalf("gateway at %s not ready within %s", g.admin, within)
}

// httpGet is a minimal GET used for admin endpoints (no keep-alive, bounded).
func httpGet(url string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addr := strings.TrimPrefix(url, "http://")
	path := "/"
	if i := strings.IndexByte(addr, '/'); i >= 0 {
		addr, path = addr[:i], addr[i:]
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr)
	b, _ := io.ReadAll(c)
	var code int
	if len(b) >= 12 && bytes.HasPrefix(b, []byte("HTTP/1.")) {
		code, _ = strconv.Atoi(string(b[9:12]))
	}
	if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
		b = b[i+4:]
	}
	return code, string(b)
}

// pairConfig returns the YAML of an origin and an edge for one upstream URL.
type pairAddrs struct {
	Edge, Tunnel, EdgeAdmin, OriginAdmin string
}

func newPairAddrs(t testing.TB) pairAddrs {
	return pairAddrs{Edge: freePort(t), Tunnel: freePort(t), EdgeAdmin: freePort(t), OriginAdmin: freePort(t)}
}

func originYAML(a pairAddrs, upstreamURL, extra string) string {
	return fmt.Sprintf(`node: e2e-origin
admin:
  listen: %s
origin:
  listen: %s
  auth: {key_file: %s}
  upstreams:
    - name: svc
      url: %s
%s`, a.OriginAdmin, a.Tunnel, tunnelKeyFile, upstreamURL, extra)
}

func edgeYAML(a pairAddrs, extra string) string {
	return edgeYAMLRoutes(a, "", extra)
}

// edgeYAMLRoutes is edgeYAML with routes (YAML list items, indented four spaces) placed
// before the catch-all route to upstream "svc": the first matching route wins.
func edgeYAMLRoutes(a pairAddrs, routes, extra string) string {
	return fmt.Sprintf(`node: e2e-edge
admin:
  listen: %s
edge:
  listeners:
    - name: soap
      listen: %s
  peers:
    - name: dc1
      address: %s
      connections: 2
      auth: {key_file: %s}
  routes:
%s    - peer: dc1
      upstream: svc
%s`, a.EdgeAdmin, a.Edge, a.Tunnel, tunnelKeyFile, routes, extra)
}

// startPair starts an origin for upstreamURL and an edge in front of it.
func startPair(t testing.TB, upstreamURL string) (a pairAddrs, origin, edge *gateway) {
	t.Helper()
	a = newPairAddrs(t)
	origin = startGateway(t, a.OriginAdmin, originYAML(a, upstreamURL, ""))
	edge = startGateway(t, a.EdgeAdmin, edgeYAML(a, ""))
	return a, origin, edge
}

// rawExchange sends raw request bytes on a new connection and reads until the server
// closes or timeout passes.
func rawExchange(t testing.TB, addr string, req []byte, timeout time.Duration) []byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, timeout)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	_, err = c.Write(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(bufio.NewReader(c))
	return b
}
