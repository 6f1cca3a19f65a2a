package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb, func() {})
	return code, out.String(), errb.String()
}

func TestExitCodes(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("node: x\norigin:\n  listen: 127.0.0.1:7000\n  upstreams:\n    - name: a\n      url: http://127.0.0.1:9\n      pool_sise: 3\n"), 0o600))
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"version", []string{"version"}, exitOK, ""},
		{"unknown command", []string{"bogus"}, exitUsage, `unknown command "bogus"`},
		{"unknown flag", []string{"run", "--nope"}, exitUsage, "unknown flag"},
		{"run without config", []string{"run"}, exitUsage, "--config FILE is required"},
		{"missing file", []string{"run", "--config", "/nonexistent/x.yaml"}, exitUsage, "no such file"},
		{"bad key names file:line", []string{"config", "check", bad}, exitUsage, "bad.yaml:7: origin.upstreams[0].pool_sise: unknown field"},
		{"extra argument", []string{"config", "check", bad, "more"}, exitUsage, "accepts 1 arg"},
		{"bad log level", []string{"--log-level", "loud", "run", "--config", bad}, exitUsage, "--log-level"},
		{"bad demo codec", []string{"demo", "--codec", "brotli"}, exitUsage, `codec "brotli"`},
		{"bad demo transport", []string{"demo", "--transport", "sctp"}, exitUsage, "--transport must be tcp or udp"},
		{"demo loss without udp", []string{"demo", "--loss", "0.1"}, exitUsage, "--loss is a fraction below 1, for --transport udp"},
		{"unknown codec in config", []string{"config", "check", "testdata/brotli.yaml"}, exitUsage, `unknown codec "brotli"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			require.Equal(t, tc.code, code, stderr)
			require.Contains(t, stderr, tc.stderr)
		})
	}
}

func TestConfigCheckPrintsDefaults(t *testing.T) {
	t.Setenv("SOAPGW_KEY_FILE", "../../testdata/example-tunnel.key") // as a deployment mounts its key
	code, out, stderr := runCLI(t, "config", "check", "../../deploy/examples/both.yaml")
	require.Equal(t, exitOK, code, stderr)
	for _, want := range []string{"max_concurrent_exchanges: 4096", "connections: 1", "pool_size: 64", "exchange_timeout: 10m0s", "response_timeout: 0s", "chunked: false", "handshake_timeout: 5s"} {
		require.Contains(t, out, want)
	}
}

func TestDemoRunsAndChecksResponses(t *testing.T) {
	if testing.Short() {
		t.Skip("demo runs real calls")
	}
	code, out, stderr := runCLI(t, "demo", "--calls", "20", "--rtt", "4ms")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "direct (HTTP/1.0, connection per call)")
	require.Contains(t, out, "soapgw pair (persistent tunnel, auto)")
	require.Contains(t, out, "every response checked byte for byte")
	// The direct path opens a link connection per call; the pair reuses its tunnel.
	lines := strings.Split(out, "\n")
	var direct, pair string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "direct ("):
			direct = l
		case strings.Contains(l, "soapgw pair"):
			pair = l
		}
	}
	require.Regexp(t, `\s20\s+\S+\s+\S+\s+\S+\s+20\s`, direct)
	require.Regexp(t, `\s20\s+\S+\s+\S+\s+\S+\s+0\s`, pair)
}

// TestDemoOverUDP: `demo --transport udp` runs the same calls over the UDP tunnel across a
// lossy emulated link and prints the same table, with and without redundancy.
func TestDemoOverUDP(t *testing.T) {
	if testing.Short() {
		t.Skip("demo runs real calls")
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"default loss", nil, "soapgw pair (UDP tunnel, auto, 1.0% loss)"},
		{"redundancy", []string{"--loss", "0.02", "--redundancy"}, "soapgw pair (UDP tunnel, auto, redundancy on, 2.0% loss)"},
		{"no redundancy", []string{"--redundancy=off"}, "soapgw pair (UDP tunnel, auto, redundancy off, 1.0% loss)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runCLI(t, append([]string{"demo", "--transport", "udp", "--calls", "40", "--rtt", "4ms"}, tc.args...)...)
			require.Equal(t, exitOK, code, stderr)
			require.Contains(t, out, "direct (HTTP/1.0, connection per call)")
			require.Contains(t, out, tc.want)
			require.Contains(t, out, "every response checked byte for byte")
			require.Contains(t, out, "UDP payload, QUIC packets whole, for the tunnel")
			require.Regexp(t, `soapgw pair \(UDP[^\n]*\s40\s+\S+\s+\S+\s+\S+\s+0\s`, out, "one persistent connection, none per call")
		})
	}
}

// Regression: a start-up failure after the configuration loaded (here: the edge's port is
// taken) used to panic in startGateway's cleanup (nil named result), exiting 2 as if the
// configuration were wrong. It must fail cleanly with a run-time error (exit 1).
func TestRunPortInUseFailsCleanly(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	cfg := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`node: t
edge:
  listeners: [{name: soap, listen: "%s"}]
  peers: [{name: dc1, address: "127.0.0.1:9", insecure: true}]
  routes: [{peer: dc1, upstream: svc}]
`, busy.Addr())), 0o600))
	code, _, stderr := runCLI(t, "run", "--config", cfg)
	require.Equal(t, exitFailure, code, stderr)
	require.Contains(t, stderr, "address already in use")
	require.NotContains(t, stderr, "panic")
}
