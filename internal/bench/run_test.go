package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/testutil"
)

// corruptConfig puts a proxy between client and server that changes one byte of every
// response: the bench must report the run as FAILED.
type corruptConfig struct{ t *testing.T }

func (corruptConfig) Name() string     { return "corrupt" }
func (corruptConfig) Describe() string { return "flips a byte of every response" }
func (c corruptConfig) Start(_ context.Context, env *Env) (*Started, error) {
	addr := tamper(c.t, env.Upstream.String(), func(b []byte) []byte {
		b = bytes.Clone(b)
		b[len(b)-3] ^= 1
		return b
	})
	return &Started{Target: Target{Site: env.Client, Addr: addr, Host: addr}}, nil
}

func TestRunOnLoopback(t *testing.T) {
	configs := []string{"direct", "corrupt", "soapgw/zstd"}
	if NginxPath() != "" {
		configs = append(configs, "nginx-pair")
	}
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	res, err := Run(ctx, Options{
		Profiles:     []string{LoopbackProfile},
		Scenarios:    []string{"stress", "charging"},
		Configs:      configs,
		Concurrency:  []int{1, 4},
		Calls:        12,
		Seed:         3,
		Progress:     &progress,
		CommandLine:  "test",
		extraConfigs: map[string]Config{"corrupt": corruptConfig{t}},
	})
	require.NoError(t, err)
	require.Len(t, res.Runs, 2*2*len(configs))
	byConfig := map[string][]RunResult{}
	for _, r := range res.Runs {
		byConfig[r.Config] = append(byConfig[r.Config], r)
	}
	for _, name := range []string{"direct", "nginx-pair"} {
		for _, r := range byConfig[name] {
			require.Equal(t, StatusOK, r.Status, "%s %s c=%d: %s", name, r.Scenario, r.Concurrency, r.Reason)
			require.Equal(t, 12, r.OK)
			require.Zero(t, r.Errors+r.Mismatches)
			require.Greater(t, r.Latency.P50, 0.0)
			require.GreaterOrEqual(t, r.Latency.P99, r.Latency.P50)
			require.Greater(t, r.CallsPerSec, 0.0)
			require.Nil(t, r.PerExchange, "loopback counts no packets")
			require.Equal(t, max(DefaultWarmup, r.Concurrency), r.Warmup)
			if name == "nginx-pair" {
				require.Len(t, r.Procs, 2)
				for _, p := range r.Procs {
					require.Empty(t, p.SampleError)
					require.Positive(t, p.PeakRSS)
					require.GreaterOrEqual(t, p.Processes, 2)
				}
			}
		}
	}
	for _, r := range byConfig["corrupt"] {
		require.Equal(t, StatusFailed, r.Status)
		require.Contains(t, r.Reason, "mismatch")
	}
	for _, r := range byConfig["soapgw/zstd"] {
		require.Equal(t, StatusSkipped, r.Status)
		require.Equal(t, "no soapgw binary", r.Reason)
	}
	require.NotEmpty(t, res.Failures())
	require.Contains(t, strings.Join(res.Failures(), "\n"), "corrupt")
	require.Len(t, res.Scenarios, 2)
	// Non-terminal progress: one line per run.
	require.Equal(t, len(res.Runs), strings.Count(progress.String(), "bench: loopback "), progress.String())
	require.NotContains(t, progress.String(), "\r")
}

func TestRunOnEmulatedLAN(t *testing.T) {
	if testing.Short() {
		t.Skip("sets up network namespaces")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	testutil.Needs(t, "the link emulator (root, ip netns, /dev/net/tun)", ProbeEmulator(ctx), "run as root with iproute2 (make test-deps)")
	configs := []string{"direct"}
	if NginxPath() != "" {
		configs = append(configs, "nginx-pair")
	}
	res, err := Run(ctx, Options{Profiles: []string{"lan"}, Scenarios: []string{"stress"}, Configs: configs, Calls: 10})
	require.NoError(t, err)
	require.Empty(t, res.Failures())
	for _, r := range res.Runs {
		require.Equal(t, StatusOK, r.Status, r.Reason)
		e := r.PerExchange
		require.NotNil(t, e)
		require.NotNil(t, r.Link)
		// At least the SOAP bodies crossed, in IP packets with headers.
		require.Greater(t, e.TCPDataBytes, float64(652+464), r.Config)
		require.InDelta(t, e.TotalBytes, e.PureTCPBytes+e.TCPDataBytes+e.UDPBytes+e.OtherBytes, 0.01)
		if r.Config == "direct" {
			// A connection per call: handshake and teardown in pure TCP packets.
			require.Greater(t, e.PureTCPPackets, 4.0)
		} else {
			require.Less(t, e.PureTCPPackets, 2.0, "a kept-alive connection piggybacks its ACKs")
		}
	}
}

func TestPlanLeavesSlowRunsOut(t *testing.T) {
	gprs := Profile{Name: "gprs-like", Up: Shape{Delay: 410 * time.Millisecond, RateBps: 40_000}, Down: Shape{Delay: 410 * time.Millisecond, RateBps: 40_000}}
	lan := Profile{Name: "lan-like", Up: Shape{Delay: 50 * time.Microsecond}, Down: Shape{Delay: 50 * time.Microsecond}}
	o := Options{Configs: []string{"direct", "soapgw/identity"}, Concurrency: []int{1, 16}, Budget: DefaultBudget,
		RunTimeout: DefaultRunTimeout, Warmup: DefaultWarmup, ProfileBudget: DefaultProfileBudget}
	pl := newPlan(o, []Profile{lan, gprs})

	// lan: everything, capped calls.
	require.Len(t, pl.scen["lan-like"], len(Scenarios()))
	for _, ps := range pl.scen["lan-like"] {
		require.Len(t, ps.calls, 2)
		require.LessOrEqual(t, ps.calls[1], min(maxDefaultCalls, ps.spec.MaxCalls))
	}
	// gprs: stress first, few calls; northwind never by default; the rest noted.
	g := pl.scen["gprs-like"]
	require.NotEmpty(t, g)
	var names []string
	for _, ps := range g {
		names = append(names, ps.spec.Name)
		require.Equal(t, minDefaultCalls, ps.calls[1])
	}
	require.Contains(t, names, "stress", "the highest priority")
	require.NotContains(t, names, "northwind")
	require.Len(t, pl.notes, 1)
	require.Contains(t, pl.notes[0], "gprs-like: left out by default")
	require.Contains(t, pl.notes[0], "northwind c=1")
	require.Less(t, pl.estimate, 5*time.Minute)

	// Named scenarios always run, in every mode.
	o.Scenarios = []string{"northwind"}
	o.Calls = 2
	pl = newPlan(o, []Profile{gprs})
	require.Len(t, pl.scen["gprs-like"], 1)
	require.Equal(t, map[int]int{1: 2, 16: 2}, pl.scen["gprs-like"][0].calls)
	require.Empty(t, pl.notes)
	require.Equal(t, 4, pl.totalRuns)
}

func TestPlannedCalls(t *testing.T) {
	stress, _ := ScenarioByName("stress")
	northwind, _ := ScenarioByName("northwind")
	rw := Profile{Up: Shape{Delay: 7 * time.Millisecond}, Down: Shape{Delay: 7 * time.Millisecond}}
	require.Equal(t, maxDefaultCalls, plannedCalls(Profile{}, stress, 1, time.Second))
	require.Equal(t, 40, plannedCalls(Profile{}, northwind, 1, time.Second))
	n := plannedCalls(rw, stress, 1, time.Second) // ~29 ms a call
	require.InDelta(t, 34, n, 3)
	require.Equal(t, 64, plannedCalls(Profile{Up: Shape{Delay: time.Second}}, stress, 64, time.Second), "at least one call per client")
}

func TestRunRejectsBadOptions(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Profiles: []string{"mars"}}, `unknown profile "mars"`},
		{Options{Profiles: []string{LoopbackProfile}, Scenarios: []string{"x"}}, `unknown scenario "x"`},
		{Options{Profiles: []string{LoopbackProfile}, Configs: []string{"soapgw/brotli"}}, `unknown codec "brotli"`},
		{Options{Profiles: []string{LoopbackProfile}, Configs: []string{"squid"}}, `unknown configuration "squid"`},
		{Options{Profiles: []string{LoopbackProfile}, Concurrency: []int{0}}, "concurrency 0"},
	} {
		_, err := Run(ctx, tc.o)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestProfileFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profiles.yaml")
	require.NoError(t, os.WriteFile(path, []byte("- name: office-wifi\n  description: measured with ping\n  both: {delay: 7ms, jitter: 2ms, loss: 0.5%}\n  down: {rate: 11Mbit}\n"), 0o644))
	o := Options{ProfileFile: path, Profiles: []string{"office-wifi"}, Configs: []string{"direct"}}
	_, profiles, _, err := o.resolve()
	require.NoError(t, err)
	require.Len(t, profiles, 1)
	p := profiles[0]
	require.Equal(t, 7*time.Millisecond, p.Up.Delay)
	require.Equal(t, int64(11_000_000), p.Down.RateBps)
	require.Zero(t, p.Up.RateBps)
	require.Contains(t, p.Summary(), "RTT 14ms")

	// Without --profiles, the file's profiles join the built-in ones.
	o.Profiles = nil
	_, profiles, _, err = o.resolve()
	require.NoError(t, err)
	require.Contains(t, ProfileNames(profiles), "office-wifi")
	require.Contains(t, ProfileNames(profiles), "lan")
	require.Equal(t, LoopbackProfile, profiles[0].Name)

	require.NoError(t, os.WriteFile(path, []byte("- name: x\n  both: {delay: fast}\n"), 0o644))
	var oe *OptionsError
	require.ErrorAs(t, o.Validate(), &oe)
	require.ErrorContains(t, o.Validate(), "profiles.yaml:2")
}
