package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/bench"
	"github.com/soapgw/soapgw/internal/testutil"
)

// benchChildVar makes the test binary act as soapgw: bench starts it as the gateway
// (--binary <test binary>), with this variable set, instead of building soapgw.
const benchChildVar = "SOAPGW_BENCH_TEST_CHILD"

func init() {
	if os.Getenv(benchChildVar) == "1" {
		// As main does: the first SIGTERM drains, a second one kills.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, stop))
	}
}

func benchAsChild(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	benchChildEnv = []string{benchChildVar + "=1"}
	t.Cleanup(func() { benchChildEnv = nil })
	return exe
}

// benchCLI runs `soapgw bench args --out DIR`, requires it to succeed and returns its
// results, DIR and its standard output.
func benchCLI(t *testing.T, args ...string) (res *bench.Results, out, stdout string) {
	t.Helper()
	out = t.TempDir()
	code, stdout, stderr := runCLI(t, append(append([]string{"bench"}, args...), "--out", out)...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	res, err := bench.ReadResults(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	return res, out, stdout
}

func TestBenchSmokeOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gateway processes")
	}
	exe := benchAsChild(t)
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "bench", "--smoke", "--profiles", "loopback", "--binary", exe, "--out", out)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)

	res, err := bench.ReadResults(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	want := []string{"direct", "soapgw/identity"}
	if bench.NginxPath() != "" {
		want = []string{"direct", "nginx-pair", "soapgw/identity"}
	}
	var got []string
	for _, r := range res.Runs {
		got = append(got, r.Config)
		require.Equal(t, bench.StatusOK, r.Status, "%s: %s", r.Config, r.Reason)
		require.Equal(t, "loopback", r.Profile)
		require.Equal(t, "stress", r.Scenario)
		require.Equal(t, 20, r.OK)
		require.Zero(t, r.Errors+r.Mismatches)
	}
	require.Equal(t, want, got)
	require.NotEmpty(t, res.Machine.CPUModel)
	require.Equal(t, versionString(), res.Machine.SoapgwVersion)

	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "### loopback / stress / 1 client")
	require.Contains(t, string(md), "| soapgw/identity | ok | 20 |")
	_, err = os.Stat(filepath.Join(out, "latency-loopback-c1.svg"))
	require.NoError(t, err)
	require.Contains(t, stdout, "report: ")
	// stderr is not a terminal here: plain progress lines, no \r.
	require.Contains(t, stderr, "bench: loopback stress c=1 direct: ok")
	require.NotContains(t, stderr, "\r")
}

func TestBenchFailsWhenAConfigurationFails(t *testing.T) {
	out := t.TempDir()
	code, _, stderr := runCLI(t, "bench", "--smoke", "--profiles", "loopback", "--configs", "direct,soapgw/identity",
		"--binary", filepath.Join(t.TempDir(), "no-such-soapgw"), "--out", out)
	require.Equal(t, exitFailure, code, stderr)
	require.Contains(t, stderr, "FAILED: soapgw/identity on loopback")
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var res bench.Results
	require.NoError(t, json.Unmarshal(b, &res))
	require.Equal(t, bench.StatusOK, res.Runs[0].Status, "direct still ran")
}

func TestBenchUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--concurrency", "0"}, "--concurrency"},
		{[]string{"bench", "--profiles", "moon"}, `unknown profile "moon"`},
		{[]string{"bench", "--profiles", "loopback", "--scenarios", "stress,nope"}, `unknown scenario "nope"`},
		{[]string{"bench", "--profiles", "loopback", "--configs", "soapgw/lz4"}, `unknown codec "lz4"`},
		{[]string{"bench", "--calls", "-1"}, "--calls"},
		{[]string{"bench", "--oneway-deliveries", "-1"}, "--oneway-deliveries"},
		{[]string{"bench", "--warmup", "-1"}, "--warmup"},
		{[]string{"bench", "extra"}, "accepts 0 arg"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want)
	}
}

func TestBenchList(t *testing.T) {
	code, stdout, stderr := runCLI(t, "bench", "--list")
	require.Equal(t, exitOK, code, stderr)
	for _, want := range []string{"loopback", "stress", "northwind", "fixml-10", "attachment-200k", "attachment-2m", "nginx-pair", "soapgw/token", "soapgw-udp/token", "soapgw-udp-redundant/auto"} {
		require.Contains(t, stdout, want)
	}
	var buf bytes.Buffer
	require.NoError(t, listBench(&buf))
	require.Equal(t, stdout, buf.String())
	require.False(t, strings.Contains(stdout, "\r"))
}

// TestBenchUDPTunnelOnEmulatedLAN: soapgw-udp/<codec> runs beside soapgw/<codec> through
// the link emulator, and its IP bytes per exchange are counted as the TCP tunnel's are:
// whole packets both ways, here all of them UDP.
func TestBenchUDPTunnelOnEmulatedLAN(t *testing.T) {
	if testing.Short() {
		t.Skip("sets up network namespaces and starts gateway processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	testutil.Needs(t, "the link emulator (root, ip netns, /dev/net/tun)", bench.ProbeEmulator(ctx), "run as root with iproute2 (make test-deps)")
	exe := benchAsChild(t)
	res, _, stdout := benchCLI(t, "--profiles", "lan", "--scenarios", "stress", "--concurrency", "1", "--calls", "30",
		"--configs", "soapgw/token,soapgw-udp/token", "--binary", exe)
	require.Len(t, res.Runs, 2)
	for _, r := range res.Runs {
		require.Equal(t, bench.StatusOK, r.Status, "%s: %s", r.Config, r.Reason)
		require.Equal(t, 30, r.OK)
		e := r.PerExchange
		require.NotNil(t, e, r.Config)
		require.InDelta(t, e.TotalBytes, e.PureTCPBytes+e.TCPDataBytes+e.UDPBytes+e.OtherBytes, 0.01)
		require.Greater(t, e.TotalBytes, 60.0, "%s: at least two packets' headers per exchange", r.Config)
		if r.Config == "soapgw-udp/token" {
			require.Zero(t, e.TCPDataBytes+e.PureTCPBytes, "the UDP tunnel puts no TCP on the link")
			require.Equal(t, e.TotalBytes, e.UDPBytes)
		} else {
			require.Zero(t, e.UDPBytes)
		}
	}
	require.Contains(t, stdout, "soapgw-udp/token")
}

// TestBenchOneWayOnLoopback: stress-oneway beside stress through direct and a soapgw
// pair. soapgw acknowledges the one-way calls from its spool (202) and the server gets
// each once, byte for byte; stress stays synchronous through the same configuration
// (its 464-byte answers are checked byte for byte).
func TestBenchOneWayOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gateway processes")
	}
	exe := benchAsChild(t)
	work := t.TempDir()
	res, out, stdout := benchCLI(t, "--profiles", "loopback", "--scenarios", "stress,stress-oneway", "--concurrency", "1,4",
		"--calls", "30", "--configs", "direct,soapgw/identity", "--binary", exe, "--work-dir", work)
	require.Len(t, res.Runs, 8)
	for _, r := range res.Runs {
		require.Equal(t, bench.StatusOK, r.Status, "%s %s: %s", r.Scenario, r.Config, r.Reason)
		require.Equal(t, 30, r.OK)
		d := r.Delivery
		require.NotNil(t, d, "%s %s", r.Scenario, r.Config)
		require.Equal(t, 30, d.Messages, "%s %s c=%d", r.Scenario, r.Config, r.Concurrency)
		require.Zero(t, d.Duplicates)
		require.Positive(t, d.PerSec)
	}
	edge, err := os.ReadFile(filepath.Join(work, "loopback", "01-soapgw-identity", "soapgw", "edge.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(edge), "one_way:")
	require.Contains(t, string(edge), "path_prefix: /axis/services/CalendarOneWay")
	for _, c := range res.Configs {
		if c.Name == "soapgw/identity" {
			require.Contains(t, strings.Join(c.Notes, "; "), "one-way: addEntry under /axis/services/CalendarOneWay")
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "## One-way messaging")
	require.Contains(t, string(md), "| loopback | soapgw/identity |")
	require.Contains(t, stdout, "delivered/s")
}

// TestBenchComparesBuildsOnLoopback: --binary-as runs a configuration named
// <config>@LABEL with the binary labelled LABEL, beside the same configuration with
// --binary, in one invocation: both answer byte for byte, and each ran its own binary.
func TestBenchComparesBuildsOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gateway processes")
	}
	exe := benchAsChild(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "other-ran")
	other := filepath.Join(dir, "other-soapgw")
	require.NoError(t, os.WriteFile(other, []byte("#!/bin/sh\necho \"$@\" >> "+marker+"\nexec "+exe+" \"$@\"\n"), 0o755))
	res, _, _ := benchCLI(t, "--profiles", "loopback", "--scenarios", "stress", "--concurrency", "1",
		"--calls", "10", "--configs", "soapgw/identity,soapgw/identity@other", "--binary", exe, "--binary-as", "other="+other)
	require.Len(t, res.Runs, 2)
	for _, r := range res.Runs {
		require.Equal(t, bench.StatusOK, r.Status, "%s: %s", r.Config, r.Reason)
		require.Equal(t, 10, r.OK)
	}
	require.Equal(t, "soapgw/identity@other", res.Runs[1].Config)
	ran, err := os.ReadFile(marker)
	require.NoError(t, err, "the labelled configuration did not run the other binary")
	require.Equal(t, 2, strings.Count(string(ran), "run --config"), "edge and origin, once each:\n%s", ran)
	for _, c := range res.Configs {
		if c.Name == "soapgw/identity@other" {
			require.Contains(t, c.Description, "(binary "+other+")")
		}
	}

	code, _, stderr := runCLI(t, "bench", "--profiles", "loopback", "--configs", "soapgw/identity@nope", "--out", t.TempDir())
	require.NotEqual(t, exitOK, code)
	require.Contains(t, stderr, `no binary labelled "nope"`)
}

// TestBenchCPUOnLoopback: `soapgw bench cpu` runs every case through nginx-pair and
// soapgw interleaved, byte-checked, and reports CPU per exchange per process with the
// ratio to nginx-pair. It asserts that figures exist, never what they are.
func TestBenchCPUOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gateway processes")
	}
	var nginxErr error
	if bench.NginxPath() == "" {
		nginxErr = errors.New("nginx not found")
	}
	testutil.Needs(t, "nginx", nginxErr, "apt-get install nginx")
	exe := benchAsChild(t)
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "bench", "cpu", "--configs", "nginx-pair,soapgw/auto", "--rounds", "2", "--calls", "20",
		"--binary", exe, "--out", out)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)

	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var rep bench.CPUReport
	require.NoError(t, json.Unmarshal(raw, &rep))
	require.Equal(t, "nginx-pair", rep.Baseline)
	require.Len(t, rep.Cases, 4, "http10 and http11, 1 and 16 clients")
	for _, cs := range rep.Cases {
		require.Len(t, cs.Results, 2)
		for _, x := range cs.Results {
			require.Equal(t, bench.StatusOK, x.Status, "%s c=%d %s: %s", cs.Client, cs.Concurrency, x.Config, x.Reason)
			require.Equal(t, 40, x.Exchanges)
			require.Len(t, x.RoundCPUMicros, 2)
			require.Positive(t, x.CPUMicros)
			require.Positive(t, x.CPURatio)
			require.Len(t, x.ByProcess, 2, "both sides measured")
			require.Positive(t, x.PeakRSS)
			if x.Config == "nginx-pair" {
				require.Zero(t, x.Allocs, "nginx has no allocation count to read")
			}
		}
		require.InDelta(t, 1.0, cs.Results[0].CPURatio, 1e-9, "the baseline against itself")
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "| http11 | 16 | soapgw/auto | 40 |")
	require.Contains(t, stdout, "report: ")
}

func TestBenchCPURejectsBadOptions(t *testing.T) {
	for _, args := range [][]string{
		{"--clients", "http2"},
		{"--scenario", "stress-oneway"},
		{"--configs", "nope"},
		{"--concurrency", "0"},
		{"--rounds", "-1"},
	} {
		code, _, stderr := runCLI(t, append([]string{"bench", "cpu", "--out", t.TempDir()}, args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
	}
}
