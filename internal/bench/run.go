package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Options control a benchmark run.
type Options struct {
	Profiles    []string // empty: every known profile (Smoke: lan or loopback)
	ProfileFile string   // extra profiles (linkemu.LoadProfiles format)
	Scenarios   []string // empty: every scenario that is not too slow on the profile
	Configs     []string // empty: DefaultConfigs
	Concurrency []int    // empty: 1
	Calls       int      // measured calls per run; 0: planned from the profile and Budget
	Warmup      int      // warm-up calls per client before each run; 0: DefaultWarmup; NoWarmup: none
	Seed        int64    // testdata/gen seed
	// Budget is the measured time one run aims for when Calls is 0.
	Budget time.Duration
	// ProfileBudget bounds a profile's estimated time per configuration when Scenarios
	// is empty: runs are left out by priority beyond it (0: no bound).
	ProfileBudget time.Duration
	// RunTimeout bounds one run (warm-up and measured calls); a run cut short is
	// reported as truncated. The wait for a one-way run's deliveries after its last
	// call is bounded separately (deliveryLimit).
	RunTimeout time.Duration
	// Binary is the soapgw executable; BinaryEnv extra environment for it.
	Binary    string
	BinaryEnv []string
	// Binaries are other soapgw executables by label: a configuration named
	// "soapgw/auto@before" runs soapgw/auto with Binaries["before"], so two builds are
	// compared on the same links in one invocation.
	Binaries map[string]string
	// OneWayDeliveries sets edge.one_way.deliveries (the messages the soapgw edge
	// delivers at once) in the soapgw configurations; 0 leaves soapgw's default.
	OneWayDeliveries int
	// WorkDir holds the generated configurations and logs (a temp dir when empty);
	// KeepWork keeps it.
	WorkDir  string
	KeepWork bool
	// Version is the soapgw version recorded in the results.
	Version string
	// Smoke is the quick check: see SmokeOptions.
	Smoke bool
	// Progress receives the progress display (nil: none); ProgressTTY redraws one line.
	Progress    io.Writer
	ProgressTTY bool
	// CommandLine is recorded in the results.
	CommandLine string

	extraConfigs map[string]Config // tests: configurations by name, before ConfigByName
}

// Defaults for Options.
const (
	DefaultBudget     = 600 * time.Millisecond
	DefaultRunTimeout = 60 * time.Second
	DefaultWarmup     = 1
	// NoWarmup as Options.Warmup runs no warm-up call: for runs whose calls take an hour
	// (2 MB over GPRS), the measured calls set up the tunnel and upstream connections.
	NoWarmup = -1
	// maxDefaultCalls caps the planned calls of one sequential run.
	maxDefaultCalls = 300
	// minDefaultCalls is the fewest calls a sequential run plans (slow links: gprs).
	minDefaultCalls = 3
	// slowRun: a run estimated to take longer than this is left out of the default
	// plan (northwind on gprs: a minute per call).
	slowRun = 30 * time.Second
	// DefaultProfileBudget bounds the estimated time of one profile's runs per
	// configuration when the scenarios are not named (see newPlan).
	DefaultProfileBudget = 20 * time.Second
)

// Results is everything a run measured (written as results.json).
type Results struct {
	Machine     Machine        `json:"machine"`
	CommandLine string         `json:"command_line"`
	Started     time.Time      `json:"started"`
	DurationS   float64        `json:"duration_s"`
	Seed        int64          `json:"seed"`
	Notes       []string       `json:"notes"`
	Profiles    []Profile      `json:"profiles"`
	Scenarios   []ScenarioSpec `json:"scenarios"`
	Configs     []ConfigInfo   `json:"configs"`
	Runs        []RunResult    `json:"runs"`
}

// ConfigInfo describes a configuration as run on one profile.
type ConfigInfo struct {
	Name        string   `json:"name"`
	Profile     string   `json:"profile"`
	Description string   `json:"description"`
	Status      string   `json:"status"` // ok, skipped, FAILED
	Reason      string   `json:"reason,omitempty"`
	Notes       []string `json:"notes,omitempty"`
}

// Run statuses.
const (
	StatusOK      = "ok"
	StatusFailed  = "FAILED"
	StatusSkipped = "skipped"
)

// RunResult is one (profile, scenario, concurrency, configuration).
type RunResult struct {
	Profile     string `json:"profile"`
	Scenario    string `json:"scenario"`
	Concurrency int    `json:"concurrency"`
	Config      string `json:"config"`
	Status      string `json:"status"`
	Reason      string `json:"reason,omitempty"`

	Planned    int  `json:"calls_planned"`
	Started    int  `json:"calls_started"`
	OK         int  `json:"calls_ok"`
	Errors     int  `json:"errors"`
	Mismatches int  `json:"mismatches"`
	Truncated  bool `json:"truncated,omitempty"` // RunTimeout passed before every call started
	Warmup     int  `json:"warmup_calls"`

	RequestBytes  int `json:"request_body_bytes"`  // mean per call
	ResponseBytes int `json:"response_body_bytes"` // mean per call

	Latency     Latency `json:"latency"`
	TotalMS     float64 `json:"total_ms"`
	CallsPerSec float64 `json:"calls_per_s"`

	// Link counts every IP packet on the emulated link during the measured calls
	// (reset after the warm-up); nil on loopback.
	Link        *LinkStats   `json:"link,omitempty"`
	PerExchange *PerExchange `json:"per_exchange,omitempty"`

	Procs []ProcResult `json:"procs,omitempty"`

	// Delivery is when the server had the measured calls (every run; what it adds to the
	// client's figures is for one-way scenarios, whose calls a gateway may acknowledge
	// before it delivers them).
	Delivery *Delivery `json:"delivery,omitempty"`
}

// Delivery is what the replay server received of a run's measured calls. The run waits
// (bounded) until every call the client saw acknowledged has arrived, before it samples
// the link and the CPU, so link bytes per exchange include the background deliveries.
type Delivery struct {
	// Messages is the distinct measured calls the server got whole and byte for byte;
	// Duplicates counts calls (warm-up included) it got again: any makes the run FAILED.
	Messages   int `json:"messages"`
	Duplicates int `json:"duplicates"`
	// MS is from the start of the measured calls to the arrival of the last of them at
	// the server; PerSec is Messages / MS. AfterClientMS is how much later than the
	// client's last call ended the last message arrived (0 when it arrived first, as for
	// synchronous calls).
	MS            float64 `json:"delivery_ms"`
	PerSec        float64 `json:"messages_per_s"`
	AfterClientMS float64 `json:"after_client_ms"`
	// LinkAllowsPerSec is the messages per second the link's bandwidth allows at the
	// measured IP bytes per exchange it carried (PerExchange.UpCarried, DownCarried), the
	// tighter of the two directions (0: no rate limit, or no packet counts); LinkRatio is
	// PerSec / LinkAllowsPerSec: how much of the link the messages used.
	LinkAllowsPerSec float64 `json:"link_allows_per_s,omitempty"`
	LinkRatio        float64 `json:"link_ratio,omitempty"`
	// BacklogMessages is how many of the messages arrived after the client's last call
	// had ended: the spool's backlog then. BacklogPerSec is the pace they arrived at, over
	// AfterClientMS: the gateways' with a backlog, which the clients' own rate no longer
	// bounds (0 when that phase is too short to tell: under minBacklogMessages messages or
	// minBacklogPhase); BacklogRatio is it against LinkAllowsPerSec. Whether the gateways
	// fill the link when messages wait reads here; PerSec also counts the time the clients
	// took to send them.
	BacklogMessages int     `json:"backlog_messages,omitempty"`
	BacklogPerSec   float64 `json:"backlog_per_s,omitempty"`
	BacklogRatio    float64 `json:"backlog_ratio,omitempty"`
}

// The shortest backlog phase whose pace is reported: its last round trip, when the last
// deliveries are in flight and no new ones start, lowers the pace the less the longer it
// is.
const (
	minBacklogMessages = 100
	minBacklogPhase    = time.Second
)

// backlogPace is the pace of n messages that arrived over d after the client's last call
// (0: too few or too short to tell).
func backlogPace(n int, d time.Duration) float64 {
	if n < minBacklogMessages || d < minBacklogPhase {
		return 0
	}
	return float64(n) / d.Seconds()
}

// linkAllows is the messages per second a link's rate limits allow at the bytes per
// exchange the link carried in each direction: the tighter direction's (0: neither
// direction is limited). Carried, not offered: bytes the queue dropped took none of the
// link's time, and counting them read as more than 100 % of the link.
func linkAllows(p Profile, e *PerExchange) float64 {
	if e == nil {
		return 0
	}
	allow := 0.0
	for _, d := range []struct {
		bps   int64
		bytes float64
	}{{p.Up.RateBps, e.UpCarried}, {p.Down.RateBps, e.DownCarried}} {
		if d.bps <= 0 || d.bytes <= 0 {
			continue
		}
		if a := float64(d.bps) / 8 / d.bytes; allow == 0 || a < allow {
			allow = a
		}
	}
	return allow
}

// PerExchange is link traffic divided by the calls started, both directions.
type PerExchange struct {
	PureTCPBytes   float64 `json:"pure_tcp_bytes"`
	TCPDataBytes   float64 `json:"tcp_data_bytes"`
	UDPBytes       float64 `json:"udp_bytes"`
	OtherBytes     float64 `json:"other_bytes"`
	TotalBytes     float64 `json:"total_bytes"`
	PureTCPPackets float64 `json:"pure_tcp_packets"`
	TCPDataPackets float64 `json:"tcp_data_packets"`
	UDPPackets     float64 `json:"udp_packets"`
	Packets        float64 `json:"packets"`
	UpBytes        float64 `json:"up_bytes"`
	DownBytes      float64 `json:"down_bytes"`
	// UpCarried and DownCarried are the IP bytes the link's bottleneck carried in each
	// direction: UpBytes and DownBytes without the packets its queue dropped (a sender
	// that overfills the queue offers more bytes than the link can carry).
	UpCarried   float64 `json:"up_carried_bytes"`
	DownCarried float64 `json:"down_carried_bytes"`
}

// ProcResult is one middle-box process's cost during the measured calls.
type ProcResult struct {
	Name        string  `json:"name"`
	Site        string  `json:"site"`
	CPUUserS    float64 `json:"cpu_user_s"`
	CPUSysS     float64 `json:"cpu_sys_s"`
	CPUS        float64 `json:"cpu_s"` // precise on-CPU time (schedstat); user+sys when unavailable
	PeakRSS     int64   `json:"peak_rss_bytes"`
	PeakInRun   bool    `json:"peak_in_run"` // false: VmHWM could not be reset, peak since start
	Processes   int     `json:"processes"`
	SampleError string  `json:"sample_error,omitempty"`
}

// CPUSeconds is user + system time of every middle-box process.
func (r RunResult) CPUSeconds() float64 {
	var s float64
	for _, p := range r.Procs {
		s += p.CPUS
	}
	return s
}

// PeakRSS sums the middle boxes' peaks.
func (r RunResult) PeakRSS() int64 {
	var s int64
	for _, p := range r.Procs {
		s += p.PeakRSS
	}
	return s
}

// Failures lists the runs and configurations that failed.
func (r *Results) Failures() []string {
	var out []string
	for _, c := range r.Configs {
		if c.Status == StatusFailed {
			out = append(out, fmt.Sprintf("%s on %s: %s", c.Name, c.Profile, c.Reason))
		}
	}
	for _, x := range r.Runs {
		if x.Status == StatusFailed {
			out = append(out, fmt.Sprintf("%s %s c=%d %s: %s", x.Profile, x.Scenario, x.Concurrency, x.Config, x.Reason))
		}
	}
	return out
}

// SmokeOptions turns o into the smoke check: one profile (lan when the emulator works,
// else loopback), stress, 20 calls, direct + soapgw/identity (+ nginx-pair if installed).
func SmokeOptions(ctx context.Context, o Options) (Options, string) {
	o.Smoke = true
	note := ""
	if len(o.Profiles) == 0 {
		o.Profiles = []string{LoopbackProfile}
		if err := ProbeEmulator(ctx); err != nil {
			note = "link emulator unavailable, smoke runs on loopback: " + err.Error()
		} else {
			o.Profiles = []string{"lan"}
		}
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = []string{"stress"}
	}
	if len(o.Configs) == 0 {
		o.Configs = []string{"direct", "soapgw/identity"}
		if NginxPath() != "" {
			o.Configs = []string{"direct", "nginx-pair", "soapgw/identity"}
		}
	}
	if o.Calls == 0 {
		o.Calls = 20
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1}
	}
	if o.RunTimeout == 0 {
		o.RunTimeout = 20 * time.Second
	}
	return o, note
}

// ProbeEmulator sets up and tears down a lan link, to see whether the emulator works
// here (it needs root, network namespaces and /dev/net/tun).
func ProbeEmulator(ctx context.Context) error {
	e := Emulator()
	if e == nil {
		return errors.New("not in this build")
	}
	var lan Profile
	for _, p := range e.Profiles() {
		if p.Name == "lan" {
			lan = p
		}
	}
	if lan.Name == "" {
		return errors.New("no lan profile")
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	l, err := e.Open(ctx, lan, fmt.Sprintf("sgbprobe%d", os.Getpid()%100000), 1)
	if err != nil {
		return err
	}
	return l.Close()
}

// Run executes the benchmark.
// OptionsError is an error in the options (a usage error).
type OptionsError struct{ Err error }

func (e *OptionsError) Error() string { return e.Err.Error() }
func (e *OptionsError) Unwrap() error { return e.Err }

// Validate checks the options as Run would: names of profiles, scenarios and
// configurations, concurrency, the profile file. Its errors are *OptionsError.
func (o Options) Validate() error {
	_, _, _, err := o.resolve()
	return err
}

// resolve fills defaults and looks the names up.
func (o Options) resolve() (_ Options, profiles []Profile, configs []Config, err error) {
	defer func() {
		if err != nil {
			err = &OptionsError{err}
		}
	}()
	if o.Budget <= 0 {
		o.Budget = DefaultBudget
	}
	if o.ProfileBudget < 0 {
		o.ProfileBudget = 0
	}
	if o.RunTimeout <= 0 {
		o.RunTimeout = DefaultRunTimeout
	}
	if o.Warmup == 0 {
		o.Warmup = DefaultWarmup
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1}
	}
	if len(o.Configs) == 0 {
		o.Configs = DefaultConfigs
	}
	var extra []Profile
	if o.ProfileFile != "" {
		e := Emulator()
		if e == nil {
			return o, nil, nil, fmt.Errorf("--profile-file needs the link emulator (internal/linkemu), which this build does not include")
		}
		ps, err := e.LoadProfiles(o.ProfileFile)
		if err != nil {
			return o, nil, nil, fmt.Errorf("--profile-file: %w", err)
		}
		extra = ps
	}
	known := KnownProfiles(extra)
	if profiles, err = pickProfiles(o, known, extra); err != nil {
		return o, nil, nil, err
	}
	for _, name := range o.Configs {
		c, ok := o.extraConfigs[name]
		if !ok {
			if c, _, err = resolveConfig(name, o.Binary, o.Binaries); err != nil {
				return o, nil, nil, err
			}
		}
		configs = append(configs, c)
	}
	for _, s := range o.Scenarios {
		if _, ok := ScenarioByName(s); !ok {
			return o, nil, nil, fmt.Errorf("unknown scenario %q (known: %s)", s, strings.Join(ScenarioNames(), ", "))
		}
	}
	if o.OneWayDeliveries < 0 {
		return o, nil, nil, fmt.Errorf("one-way deliveries %d: must not be negative", o.OneWayDeliveries)
	}
	for _, c := range o.Concurrency {
		if c < 1 || c > 1024 {
			return o, nil, nil, fmt.Errorf("concurrency %d: want 1 to 1024", c)
		}
	}
	return o, profiles, configs, nil
}

func Run(ctx context.Context, o Options) (*Results, error) {
	o, profiles, configs, err := o.resolve()
	if err != nil {
		return nil, err
	}

	res := &Results{
		Machine:     DescribeMachine(o.Version),
		CommandLine: o.CommandLine,
		Started:     time.Now().UTC().Truncate(time.Second),
		Seed:        o.Seed,
		Profiles:    profiles,
	}
	for _, s := range Scenarios() {
		if len(o.Scenarios) == 0 || slices.Contains(o.Scenarios, s.Name) {
			res.Scenarios = append(res.Scenarios, s)
		}
	}
	warmNote := fmt.Sprintf("Each run: max(%d, clients) warm-up calls (not measured; tunnel and upstream keep-alive connections are set up there), then the measured calls.", o.Warmup)
	if o.Warmup < 0 {
		warmNote = "Each run: no warm-up call (--warmup 0): the measured calls include setting up the tunnel and upstream connections."
	}
	res.Notes = append(res.Notes,
		warmNote,
		"Link bytes and packets are whole IP packets on the emulated link in both directions, counted from after the warm-up to the end of the measured calls (plus a short settle for the last ACKs/FINs), divided by the measured calls.",
		"CPU and peak RSS are those of the middle-box processes only (nginx master and workers, soapgw edge and origin), during the measured calls; the client and the replay server run inside the bench process.",
	)
	if Emulator() == nil {
		res.Notes = append(res.Notes, "The link emulator is not in this build: only the loopback profile ran (no packet counts).")
	}

	work := o.WorkDir
	if work == "" {
		work, err = os.MkdirTemp("", "soapgw-bench-")
		if err != nil {
			return nil, err
		}
		if !o.KeepWork {
			defer os.RemoveAll(work)
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	_ = os.Chmod(work, 0o755) // nginx workers may run as another user

	plan := newPlan(o, profiles)
	res.Notes = append(res.Notes, plan.notes...)
	prog := newProgress(o.Progress, o.ProgressTTY, plan.totalRuns)
	defer prog.finish()

	start := time.Now()
	for pi, p := range profiles {
		if ctx.Err() != nil {
			break
		}
		runProfile(ctx, o, res, pi, p, configs, plan, work, prog)
	}
	res.DurationS = time.Since(start).Seconds()
	if ctx.Err() != nil {
		return res, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return res, nil
}

// pickProfiles resolves the profile names.
func pickProfiles(o Options, known, extra []Profile) ([]Profile, error) {
	byName := map[string]Profile{}
	for _, p := range known {
		byName[p.Name] = p
	}
	names := o.Profiles
	if len(names) == 0 {
		if Emulator() == nil {
			names = []string{LoopbackProfile}
		} else {
			names = ProfileNames(known) // loopback (CPU cost without a link) and every emulated profile
		}
		names = append(names, ProfileNames(extra)...)
		names = slices.Compact(names)
	}
	var out []Profile
	for _, n := range names {
		p, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("unknown profile %q (known: %s)", n, strings.Join(ProfileNames(known), ", "))
		}
		out = append(out, p)
	}
	return out, nil
}

// runPlan is the scenarios and calls of every profile.
type runPlan struct {
	totalRuns int
	// estimate is a rough duration of the whole run (direct calls' times; the
	// gateways are usually faster on slow links).
	estimate time.Duration
	scen     map[string][]plannedScenario // by profile
	notes    []string
}

type plannedScenario struct {
	spec  ScenarioSpec
	calls map[int]int // concurrency → measured calls, for the runs that will run
}

// slowPriority orders the scenarios for a profile whose default plan does not fit its
// budget: the paper's main scenario first, the big DataSet and the attachments last.
var slowPriority = []string{"stress", "deploy", "weather-simple", "charging", "stress-oneway", "fixml-1", "weather-detailed", "fixml-5", "fixml-10", "northwind",
	"attachment-200k", "attachment-2m", "northwind-3m"}

func priority(name string) int {
	if i := slices.Index(slowPriority, name); i >= 0 {
		return i
	}
	return len(slowPriority)
}

// newPlan decides the runs of every profile and their calls. With --scenarios named,
// every named scenario runs in every mode. Otherwise the runs are taken by priority
// (sequential runs first, then concurrent ones; within each, slowPriority) while the
// profile's estimated time stays within ProfileBudget per configuration; a run
// estimated over slowRun is always left out. What is left out is noted in the results.
func newPlan(o Options, profiles []Profile) *runPlan {
	pl := &runPlan{scen: map[string][]plannedScenario{}}
	nc := time.Duration(len(o.Configs))
	for _, p := range profiles {
		type cand struct {
			si  int
			c   int
			n   int
			est time.Duration
		}
		var specs []ScenarioSpec
		for _, s := range Scenarios() {
			if len(o.Scenarios) == 0 || slices.Contains(o.Scenarios, s.Name) {
				specs = append(specs, s)
			}
		}
		var cands []cand
		for _, c := range o.Concurrency {
			for si, s := range specs {
				n := o.Calls
				if n == 0 {
					n = plannedCalls(p, s, c, o.Budget)
				}
				cands = append(cands, cand{si: si, c: c, n: n, est: runEstimate(p, s, c, n, warmupCalls(o, c), o.RunTimeout)})
			}
		}
		if len(o.Scenarios) == 0 {
			slices.SortStableFunc(cands, func(a, b cand) int {
				if a.c != b.c {
					return a.c - b.c
				}
				return priority(specs[a.si].Name) - priority(specs[b.si].Name)
			})
		}
		planned := make([]plannedScenario, len(specs))
		for i, s := range specs {
			planned[i] = plannedScenario{spec: s, calls: map[int]int{}}
		}
		var used time.Duration
		var left []string
		full := false
		for _, cd := range cands {
			name := fmt.Sprintf("%s c=%d", specs[cd.si].Name, cd.c)
			if len(o.Scenarios) == 0 && o.ProfileBudget > 0 {
				if cd.est > slowRun {
					left = append(left, fmt.Sprintf("%s (about %s per run)", name, cd.est.Round(time.Second)))
					continue
				}
				// The first run that does not fit ends the plan: what runs is a prefix
				// of the priority order, the same on every machine.
				full = full || used+cd.est > o.ProfileBudget
				if full {
					left = append(left, name)
					continue
				}
			}
			used += cd.est
			planned[cd.si].calls[cd.c] = cd.n
			pl.totalRuns += len(o.Configs)
			pl.estimate += nc * cd.est
		}
		if len(left) > 0 {
			pl.notes = append(pl.notes, fmt.Sprintf("%s: left out by default to keep the run short (name the scenarios with --scenarios to run them): %s",
				p.Name, strings.Join(left, ", ")))
		}
		for _, ps := range planned {
			if len(ps.calls) > 0 {
				pl.scen[p.Name] = append(pl.scen[p.Name], ps)
			}
		}
		pl.estimate += nc * configStartEstimate
	}
	return pl
}

// configStartEstimate is roughly what starting and stopping a configuration costs.
const configStartEstimate = 500 * time.Millisecond

// warmupCalls is the number of unmeasured calls before a run: o.Warmup, and at least
// one per client so every client's path (upstream keep-alive connections) is set up;
// none with NoWarmup.
func warmupCalls(o Options, c int) int {
	if o.Warmup < 0 {
		return 0
	}
	return max(o.Warmup, c)
}

// runEstimate is the rough duration of one run.
func runEstimate(p Profile, s ScenarioSpec, c, n, warm int, limit time.Duration) time.Duration {
	per := estimateCall(p, s, c)
	if c == 1 {
		per = estimateCall(p, s, 1)
	}
	d := time.Duration(n+warm) * per
	return min(d, limit) + 2*settleTime(p) + 20*time.Millisecond
}

// estimateCall estimates one direct call's time on the profile: a handshake, the
// request and response with their serialization time, and the teardown; with
// concurrency > 1 the time per call when c clients share the link.
func estimateCall(p Profile, s ScenarioSpec, c int) time.Duration {
	rtt := p.RTT()
	const headers = 400 // HTTP head and TCP/IP overhead, roughly
	ser := func(bytes int, bps int64) time.Duration {
		if bps <= 0 {
			return 0
		}
		return time.Duration(float64(bytes+headers) * 8 / float64(bps) * float64(time.Second))
	}
	up, down := ser(s.ApproxRequest, p.Up.RateBps), ser(s.ApproxResponse, p.Down.RateBps)
	one := 2*rtt + up + down + time.Millisecond
	if c <= 1 {
		return one
	}
	return max(one/time.Duration(c), up+down)
}

// plannedCalls is the default number of measured calls of a run.
func plannedCalls(p Profile, s ScenarioSpec, c int, budget time.Duration) int {
	est := estimateCall(p, s, c)
	n := int(budget / max(est, time.Microsecond))
	lo, hi := minDefaultCalls, min(maxDefaultCalls, s.MaxCalls)
	if c > 1 {
		lo, hi = c, max(min(maxDefaultCalls, s.MaxCalls), c)
	}
	return min(max(n, lo), hi)
}

// settleTime lets the last ACKs and FINs of a batch cross the link before the packet
// counters are read.
func settleTime(p Profile) time.Duration {
	if p.Name == LoopbackProfile {
		return 0
	}
	return min(p.RTT()+2*max(p.Up.Jitter, p.Down.Jitter)+50*time.Millisecond, 3*time.Second)
}

func runProfile(ctx context.Context, o Options, res *Results, pi int, p Profile, configs []Config, plan *runPlan, work string, prog *progress) {
	scens := plan.scen[p.Name]
	failAll := func(status, reason string) {
		for _, c := range configs {
			res.Configs = append(res.Configs, ConfigInfo{Name: c.Name(), Profile: p.Name, Description: c.Describe(), Status: status, Reason: reason})
			for _, ps := range scens {
				for _, cc := range o.Concurrency {
					if _, ok := ps.calls[cc]; !ok {
						continue
					}
					res.Runs = append(res.Runs, RunResult{Profile: p.Name, Scenario: ps.spec.Name, Concurrency: cc, Config: c.Name(), Status: status, Reason: reason, Planned: ps.calls[cc]})
					prog.runDone(status)
				}
			}
		}
	}
	prog.set(p.Name, "", 0, "setting up link", 0)
	link, err := openLink(ctx, p, fmt.Sprintf("sgb%d-%d", os.Getpid()%100000, pi), uint64(o.Seed)+uint64(pi))
	if err != nil {
		failAll(StatusFailed, "link set-up: "+err.Error())
		return
	}
	defer link.Close()

	srv, err := StartReplayServer(link.Server(), 0)
	if err != nil {
		failAll(StatusFailed, err.Error())
		return
	}
	defer srv.Close()

	// Generate each scenario once per profile, for its largest run.
	var oneWay []OneWayOperation
	loaded := map[string]*Scenario{}
	for _, ps := range scens {
		need := 0
		for c, n := range ps.calls {
			need = max(need, n+warmupCalls(o, c))
		}
		s, err := LoadScenario(ps.spec.Name, need, o.Seed)
		if err != nil {
			failAll(StatusFailed, err.Error())
			return
		}
		loaded[ps.spec.Name] = s
		srv.Add(s)
		if ps.spec.OneWay {
			oneWay = append(oneWay, OneWayOperation{PathPrefix: ps.spec.Path, Operation: ps.spec.OneWayOperation})
		}
	}

	for ci, cfg := range configs {
		if ctx.Err() != nil {
			return
		}
		info := ConfigInfo{Name: cfg.Name(), Profile: p.Name, Description: cfg.Describe(), Status: StatusOK}
		dir := filepath.Join(work, p.Name, fmt.Sprintf("%02d-%s", ci, strings.NewReplacer("/", "-", "@", "-").Replace(cfg.Name())))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			info.Status, info.Reason = StatusFailed, err.Error()
		}
		binary := o.Binary
		if l, ok := cfg.(labelledConfig); ok {
			binary = l.binary
		}
		env := &Env{Client: link.Client(), Server: link.Server(), Upstream: srv.Addr(), Dir: dir,
			Binary: binary, BinaryEnv: o.BinaryEnv, Profile: p, OneWay: oneWay, OneWayDeliveries: o.OneWayDeliveries}
		prog.set(p.Name, "", 0, cfg.Name()+": starting", 0)
		var st *Started
		if info.Status == StatusOK {
			st = startConfig(ctx, cfg, env, &info)
		}
		for _, ps := range scens {
			for _, c := range o.Concurrency {
				if _, ok := ps.calls[c]; !ok {
					continue
				}
				r := RunResult{Profile: p.Name, Scenario: ps.spec.Name, Concurrency: c, Config: cfg.Name(), Planned: ps.calls[c]}
				if info.Status != StatusOK || ctx.Err() != nil {
					r.Status, r.Reason = info.Status, info.Reason
					if ctx.Err() != nil && info.Status == StatusOK {
						r.Status, r.Reason = StatusSkipped, "interrupted"
					}
				} else {
					r = measure(ctx, o, link, srv, st, loaded[ps.spec.Name], r, prog)
				}
				res.Runs = append(res.Runs, r)
				prog.runDone(r.Status)
				if o.Progress != nil && !o.ProgressTTY {
					prog.line(runLine(r))
				}
			}
		}
		if st != nil {
			st.Stop()
		}
		res.Configs = append(res.Configs, info)
	}
}

// startConfig starts cfg within a minute; what stopped it goes into info (skipped: the
// configuration cannot run here; failed), and then the result is nil.
func startConfig(ctx context.Context, cfg Config, env *Env, info *ConfigInfo) *Started {
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	st, err := cfg.Start(sctx, env)
	cancel()
	switch {
	case errors.Is(err, ErrSkipped):
		info.Status, info.Reason = StatusSkipped, strings.TrimPrefix(err.Error(), ErrSkipped.Error()+": ")
		return nil
	case err != nil:
		info.Status, info.Reason = StatusFailed, "start: "+err.Error()
		return nil
	}
	info.Notes = st.Notes
	return st
}

// runLine is a one-line summary of a run for non-terminal progress output.
func runLine(r RunResult) string {
	s := fmt.Sprintf("%s %s c=%d %s: %s", r.Profile, r.Scenario, r.Concurrency, r.Config, r.Status)
	if r.Status == StatusOK {
		s += fmt.Sprintf(", %d calls, p50 %.2f ms, p99 %.2f ms, %.1f calls/s", r.OK, r.Latency.P50, r.Latency.P99, r.CallsPerSec)
		if r.PerExchange != nil {
			s += fmt.Sprintf(", %.0f B/exchange", r.PerExchange.TotalBytes)
		}
		if d := r.Delivery; d != nil && d.AfterClientMS > 0 {
			s += fmt.Sprintf(", delivered %d in %.2f s (%.1f msg/s)", d.Messages, d.MS/1000, d.PerSec)
		}
	} else if r.Reason != "" {
		s += ": " + r.Reason
	}
	return s
}

// deliveryLimit bounds the wait for n calls of s to reach the server after the client's
// calls ended: --run-timeout, or 10 s plus twice what the link needs to carry the
// requests as sent (no codec) if longer (1,000 Stress messages on gprs: 7 min).
func deliveryLimit(o Options, p Profile, s ScenarioSpec, n int) time.Duration {
	d := o.RunTimeout
	if bps := p.Up.RateBps; bps > 0 {
		const head = 400 // HTTP head and TCP/IP overhead, roughly (as estimateCall)
		carry := time.Duration(float64(n*(s.ApproxRequest+head)) * 8 / float64(bps) * float64(time.Second))
		d = max(d, 10*time.Second+2*carry)
	}
	return d
}

// measure runs one (scenario, concurrency) through a started configuration.
func measure(ctx context.Context, o Options, link Link, srv *ReplayServer, st *Started, s *Scenario, r RunResult, prog *progress) RunResult {
	p := link.Profile()
	c := r.Concurrency
	warm := warmupCalls(o, c)
	n := r.Planned
	sub := &Scenario{Name: s.Name, Calls: s.Calls[:warm+n], spec: s.spec}
	r.RequestBytes, r.ResponseBytes = (&Scenario{Calls: sub.Calls[warm:]}).bytesPerCall()
	r.Warmup = warm
	est := estimateCall(p, s.spec, 1)
	// c calls in flight share the link: each takes about c times a call's
	// serialization when the messages are large (24 x 200 KB on 3g: 40 s each).
	callTimeout := max(30*time.Second, 20*est, 3*time.Duration(c)*estimateCall(p, s.spec, c))
	call := func(ctx context.Context, i int) error { return CallOnce(ctx, st.Target, sub, i) }
	label := fmt.Sprintf("c=%d %s", c, r.Config)

	for _, pr := range st.Procs {
		if done, err := pr.Exited(); done {
			r.Status, r.Reason = StatusFailed, fmt.Sprintf("%s exited (%v): %s", pr.Name, err, pr.LogTail(400))
			return r
		}
	}
	// The server records when each call arrives: a gateway may acknowledge a one-way
	// call before the server has it, and must never deliver one twice.
	arrivals := srv.Track(s.Name, 0, warm+n)
	defer srv.Untrack(s.Name, arrivals)
	_, badBefore := srv.Counts()

	deadline := time.Now().Add(o.RunTimeout)
	prog.set(p.Name, s.Name, 0, label+" warm-up", warm)
	w := runCalls(ctx, 0, warm, c, callTimeout, time.Until(deadline), call, func(d int) { prog.calls(d) })
	if w.errors+w.mismatches == 0 && w.started == warm {
		if lim := deliveryLimit(o, p, s.spec, warm); arrivals.Wait(ctx, w.okCalls, lim) > 0 {
			r.Status = StatusFailed
			r.Reason = fmt.Sprintf("warm-up: acknowledged calls did not reach the server within %s", lim)
			if _, bad := srv.Counts(); bad > badBefore {
				r.Reason = fmt.Sprintf("warm-up: the server refused %d requests (unknown, or not the generated bytes)", bad-badBefore)
			}
			return r
		}
	}
	if w.errors+w.mismatches > 0 || w.started < warm {
		r.Status = StatusFailed
		r.Errors, r.Mismatches = w.errors, w.mismatches
		r.Reason = fmt.Sprintf("warm-up: %d of %d calls failed", w.errors+w.mismatches, warm)
		if w.firstErr != nil {
			r.Reason += ": " + w.firstErr.Error()
		} else if w.started < warm {
			r.Reason = fmt.Sprintf("warm-up did not finish within --run-timeout %s", o.RunTimeout)
		}
		return r
	}
	sleepCtx(ctx, settleTime(p))

	link.ResetStats()
	before := make([]Usage, len(st.Procs))
	peakReset := make([]bool, len(st.Procs))
	for i, pr := range st.Procs {
		peakReset[i] = pr.ResetPeak()
		before[i], _ = pr.Sample()
	}
	prog.set(p.Name, s.Name, 0, label, n)
	out := runCalls(ctx, warm, n, c, callTimeout, max(time.Until(deadline), time.Second), call, func(d int) { prog.calls(d) })
	lim := deliveryLimit(o, p, s.spec, len(out.okCalls))
	if s.spec.OneWay {
		prog.set(p.Name, s.Name, 0, label+" delivery", 0)
	}
	undelivered := arrivals.Wait(ctx, out.okCalls, lim)
	sleepCtx(ctx, settleTime(p))
	ls, haveStats := link.Stats()
	for i, pr := range st.Procs {
		pres := ProcResult{Name: pr.Name, Site: pr.Site, PeakInRun: peakReset[i]}
		after, err := pr.Sample()
		if err != nil {
			pres.SampleError = err.Error()
		} else {
			pres.CPUUserS = max(after.UserSeconds-before[i].UserSeconds, 0)
			pres.CPUSysS = max(after.SysSeconds-before[i].SysSeconds, 0)
			pres.CPUS = max(after.CPUSeconds-before[i].CPUSeconds, 0)
			if after.CPUSeconds == 0 {
				pres.CPUS = pres.CPUUserS + pres.CPUSysS
			}
			pres.PeakRSS = after.PeakRSS
			pres.Processes = after.Processes
		}
		r.Procs = append(r.Procs, pres)
	}

	r.Started, r.OK, r.Errors, r.Mismatches, r.Truncated = out.started, len(out.latencies), out.errors, out.mismatches, out.truncated
	r.Latency = Summarize(out.latencies)
	r.TotalMS = float64(out.elapsed) / float64(time.Millisecond)
	if out.elapsed > 0 {
		r.CallsPerSec = float64(r.OK) / out.elapsed.Seconds()
	}
	if haveStats && r.Started > 0 {
		r.Link = &ls
		r.PerExchange = perExchange(ls, r.Started)
	}
	r.Delivery = delivery(arrivals, warm, n, out, p, r.PerExchange)
	_, badAfter := srv.Counts()
	var fails []string
	if r.Mismatches > 0 || r.Errors > 0 {
		f := fmt.Sprintf("%d errors, %d mismatches of %d calls", r.Errors, r.Mismatches, r.Started)
		if out.firstErr != nil {
			f += "; first: " + out.firstErr.Error()
		}
		if out.aborted {
			f += fmt.Sprintf(" (stopped after %d consecutive failures)", maxConsecutiveFailures)
		}
		fails = append(fails, f)
	}
	if d := r.Delivery; d.Duplicates > 0 {
		_, _, _, first := arrivals.Received(0, 0)
		fails = append(fails, fmt.Sprintf("%d calls reached the server more than once (duplicates; the first: %s/%d)", d.Duplicates, s.Name, first))
	}
	if badAfter > badBefore {
		fails = append(fails, fmt.Sprintf("the server refused %d requests (unknown, or not the generated bytes)", badAfter-badBefore))
	}
	if undelivered > 0 && ctx.Err() == nil {
		fails = append(fails, fmt.Sprintf("%d of %d acknowledged calls did not reach the server within %s of the last call", undelivered, len(out.okCalls), lim))
	}
	r.Status = StatusOK
	switch {
	case len(fails) > 0:
		r.Status, r.Reason = StatusFailed, strings.Join(fails, "; ")
	case ctx.Err() != nil:
		r.Status, r.Reason = StatusSkipped, "interrupted"
	case r.Truncated:
		r.Reason = fmt.Sprintf("truncated by --run-timeout %s: %d of %d calls", o.RunTimeout, r.Started, n)
	}
	for _, pr := range st.Procs {
		if done, err := pr.Exited(); done {
			r.Status = StatusFailed
			r.Reason = strings.TrimPrefix(r.Reason+"; ", "; ") + fmt.Sprintf("%s exited (%v): %s", pr.Name, err, pr.LogTail(400))
		}
	}
	return r
}

// delivery summarizes the arrivals of the measured calls warm..warm+n-1, timed from the
// start of out, the batch that made them.
func delivery(a *Arrivals, warm, n int, out callOutcome, p Profile, e *PerExchange) *Delivery {
	got, last, dups, _ := a.Received(warm, warm+n)
	d := &Delivery{Messages: got, Duplicates: dups}
	if got > 0 && last.After(out.start) {
		took := last.Sub(out.start)
		d.MS = float64(took) / float64(time.Millisecond)
		d.PerSec = float64(got) / took.Seconds()
		d.AfterClientMS = max(float64(took-out.elapsed)/float64(time.Millisecond), 0)
		d.BacklogMessages = a.After(warm, warm+n, out.start.Add(out.elapsed))
		d.BacklogPerSec = backlogPace(d.BacklogMessages, took-out.elapsed)
	}
	if allow := linkAllows(p, e); allow > 0 && d.PerSec > 0 {
		d.LinkAllowsPerSec = allow
		d.LinkRatio = d.PerSec / allow
		d.BacklogRatio = d.BacklogPerSec / allow
	}
	return d
}

func perExchange(ls LinkStats, n int) *PerExchange {
	f := func(a, b uint64) float64 { return float64(a+b) / float64(n) }
	u, d := ls.Up, ls.Down
	return &PerExchange{
		PureTCPBytes:   f(u.PureTCPBytes, d.PureTCPBytes),
		TCPDataBytes:   f(u.TCPDataBytes, d.TCPDataBytes),
		UDPBytes:       f(u.UDPBytes, d.UDPBytes),
		OtherBytes:     f(u.OtherBytes, d.OtherBytes),
		TotalBytes:     f(u.Bytes, d.Bytes),
		PureTCPPackets: f(u.PureTCPPackets, d.PureTCPPackets),
		TCPDataPackets: f(u.TCPDataPackets, d.TCPDataPackets),
		UDPPackets:     f(u.UDPPackets, d.UDPPackets),
		Packets:        f(u.Packets, d.Packets),
		UpBytes:        f(u.Bytes, 0),
		DownBytes:      f(d.Bytes, 0),
		UpCarried:      f(u.Bytes-min(u.QueueDropBytes, u.Bytes), 0),
		DownCarried:    f(d.Bytes-min(d.QueueDropBytes, d.Bytes), 0),
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
