package bench

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
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
		{Options{Profiles: []string{LoopbackProfile}, OneWayDeliveries: -1}, "one-way deliveries -1"},
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

// duplicateConfig sends every request to the server twice and answers the client with
// the first answer: what a gateway that redelivers a one-way message would do.
type duplicateConfig struct{ t *testing.T }

func (duplicateConfig) Name() string     { return "duplicate" }
func (duplicateConfig) Describe() string { return "delivers every request twice" }
func (c duplicateConfig) Start(_ context.Context, env *Env) (*Started, error) {
	addr := relay(c.t, func(req *http.Request, body []byte) []byte {
		var first []byte
		for range 2 {
			b := forward(c.t, env.Upstream.String(), req, body)
			if first == nil {
				first = b
			}
		}
		return first
	})
	return &Started{Target: Target{Site: env.Client, Addr: addr, Host: addr}}, nil
}

// swallowConfig acknowledges every call 202 itself and never delivers it: a spool that
// loses its messages.
type swallowConfig struct{ t *testing.T }

func (swallowConfig) Name() string     { return "swallow" }
func (swallowConfig) Describe() string { return "answers 202 and delivers nothing" }
func (c swallowConfig) Start(_ context.Context, env *Env) (*Started, error) {
	addr := relay(c.t, func(*http.Request, []byte) []byte {
		return []byte("HTTP/1.0 202 Accepted\r\nContent-Length: 0\r\n\r\n")
	})
	return &Started{Target: Target{Site: env.Client, Addr: addr, Host: addr}}, nil
}

// relay serves one request per connection and writes back what answer returns.
func relay(t *testing.T, answer func(req *http.Request, body []byte) []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				body, _ := io.ReadAll(req.Body)
				_, _ = c.Write(answer(req, body))
			}()
		}
	}()
	return ln.Addr().String()
}

// forward makes the request at upstream and returns the raw answer.
func forward(t *testing.T, upstream string, req *http.Request, body []byte) []byte {
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return nil
	}
	defer u.Close()
	out := &http.Request{Method: req.Method, URL: req.URL, Proto: "HTTP/1.0", ProtoMajor: 1, Header: req.Header, Host: req.Host,
		ContentLength: int64(len(body)), Body: io.NopCloser(bytes.NewReader(body)), Close: true}
	if err := out.Write(u); err != nil {
		return nil
	}
	b, _ := io.ReadAll(u)
	return b
}

// TestRunOneWayOnLoopback: stress-oneway beside stress. direct forwards the one-way
// calls (202 from the server) and every call is delivered once; a configuration that
// delivers twice fails as a duplicate, and one that acknowledges without delivering
// fails as undelivered (after the bounded wait).
func TestRunOneWayOnLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	res, err := Run(ctx, Options{
		Profiles:     []string{LoopbackProfile},
		Scenarios:    []string{"stress", "stress-oneway"},
		Configs:      []string{"direct", "duplicate", "swallow"},
		Concurrency:  []int{1},
		Calls:        8,
		RunTimeout:   2 * time.Second,
		extraConfigs: map[string]Config{"duplicate": duplicateConfig{t}, "swallow": swallowConfig{t}},
	})
	require.NoError(t, err)
	require.Len(t, res.Runs, 6)
	runs := map[string]RunResult{}
	for _, r := range res.Runs {
		runs[r.Scenario+" "+r.Config] = r
	}
	for _, scen := range []string{"stress", "stress-oneway"} {
		r := runs[scen+" direct"]
		require.Equal(t, StatusOK, r.Status, "%s: %s", scen, r.Reason)
		d := r.Delivery
		require.NotNil(t, d)
		require.Equal(t, 8, d.Messages)
		require.Zero(t, d.Duplicates)
		require.Greater(t, d.MS, 0.0)
		require.LessOrEqual(t, d.MS, r.TotalMS, "a synchronous call arrives before its answer")
		require.InDelta(t, 8/(d.MS/1000), d.PerSec, 0.01)
		require.Zero(t, d.AfterClientMS)
		require.Zero(t, d.LinkAllowsPerSec, "loopback has no rate")
	}
	require.Zero(t, runs["stress-oneway direct"].ResponseBytes)

	for _, scen := range []string{"stress", "stress-oneway"} {
		r := runs[scen+" duplicate"]
		require.Equal(t, StatusFailed, r.Status)
		require.Contains(t, r.Reason, "reached the server more than once")
		require.Equal(t, 8+DefaultWarmup, r.Delivery.Duplicates, "warm-up included")
	}
	r := runs["stress-oneway swallow"]
	require.Equal(t, StatusFailed, r.Status)
	require.Contains(t, r.Reason, "warm-up: acknowledged calls did not reach the server within 2s")
	r = runs["stress swallow"]
	require.Equal(t, StatusFailed, r.Status, "a 202 is not the synchronous answer")
	require.Contains(t, r.Reason, "mismatch")
}

func TestLinkAllowsAndDelivery(t *testing.T) {
	gprs := Profile{Up: Shape{RateBps: 40_000}, Down: Shape{RateBps: 40_000}}
	// 1,000 exchanges: 300 kB offered up, 50 kB of it dropped by the queue; 50 kB down.
	e := perExchange(LinkStats{Up: DirStats{Bytes: 300_000, QueueDropBytes: 50_000}, Down: DirStats{Bytes: 50_000}}, 1000)
	require.InDelta(t, 300.0, e.UpBytes, 1e-9, "offered")
	require.InDelta(t, 250.0, e.UpCarried, 1e-9, "carried")
	require.InDelta(t, 20.0, linkAllows(gprs, e), 1e-9, "40 kbit/s = 5000 B/s over the 250 B carried up")
	asym := Profile{Up: Shape{RateBps: 8_000_000}, Down: Shape{RateBps: 80_000}}
	require.InDelta(t, 200.0, linkAllows(asym, e), 1e-9, "the tighter direction: 10 kB/s down over 50 B")
	require.Zero(t, linkAllows(Profile{}, e), "no rate limit")
	require.Zero(t, linkAllows(gprs, nil))

	srv, sc := startReplay(t, "stress-oneway")
	s := sc["stress-oneway"]
	a := srv.Track(s.Name, 0, 6)
	start := time.Now()
	target := Target{Site: loopbackSite{"client"}, Addr: srv.Addr().String(), Host: "x"}
	for i := range 4 {
		require.NoError(t, CallOnce(callCtx(t), target, s, i))
	}
	out := callOutcome{start: start.Add(-time.Second), elapsed: time.Second / 2}
	d := delivery(a, 1, 5, out, gprs, e) // calls 1-5 measured, 1-3 arrived
	require.Equal(t, 3, d.Messages)
	require.Greater(t, d.MS, 1000.0)
	require.InDelta(t, 3/(d.MS/1000), d.PerSec, 1e-9)
	require.Greater(t, d.AfterClientMS, 500.0, "the last arrived after the client's calls ended")
	require.InDelta(t, 20.0, d.LinkAllowsPerSec, 1e-9)
	require.InDelta(t, d.PerSec/20, d.LinkRatio, 1e-9)
	require.Equal(t, 3, d.BacklogMessages, "all three arrived after the client's calls ended")
	require.Zero(t, d.BacklogPerSec, "too few to tell a pace")
	require.Zero(t, d.BacklogRatio)
}

// TestBacklogPace: the pace of the messages delivered after the client's last call, when
// there are enough of them over long enough.
func TestBacklogPace(t *testing.T) {
	for _, tc := range []struct {
		n    int
		d    time.Duration
		want float64
	}{
		{1000, 2 * time.Second, 500},
		{minBacklogMessages, minBacklogPhase, minBacklogMessages},
		{minBacklogMessages - 1, 10 * time.Second, 0},
		{10_000, minBacklogPhase - time.Millisecond, 0},
		{0, 0, 0},
	} {
		require.InDelta(t, tc.want, backlogPace(tc.n, tc.d), 1e-9, "%d over %s", tc.n, tc.d)
	}
}

func TestDeliveryLimit(t *testing.T) {
	o := Options{RunTimeout: time.Minute}
	stress, _ := ScenarioByName("stress-oneway")
	require.Equal(t, time.Minute, deliveryLimit(o, Profile{}, stress, 1000), "no rate: --run-timeout")
	gprs := Profile{Up: Shape{RateBps: 40_000}}
	// 1,000 x (652 + 400) B at 5,000 B/s = 210 s, twice, plus 10 s.
	require.Equal(t, 10*time.Second+2*210400*time.Millisecond, deliveryLimit(o, gprs, stress, 1000))
	require.Equal(t, time.Minute, deliveryLimit(o, gprs, stress, 3))
}

func TestWarmupCalls(t *testing.T) {
	for _, tc := range []struct {
		warmup, clients, want int
	}{
		{1, 1, 1},
		{1, 16, 16}, // at least one per client
		{3, 2, 3},
		{NoWarmup, 16, 0},
	} {
		require.Equal(t, tc.want, warmupCalls(Options{Warmup: tc.warmup}, tc.clients), "warmup %d, %d clients", tc.warmup, tc.clients)
	}
}
