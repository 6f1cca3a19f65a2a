package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// The CPU comparison (`soapgw bench cpu`, issue #19) answers one question the link runs
// cannot: what does each configuration cost in CPU per exchange when the link is free?
// It runs on loopback, starts every configuration at once and interleaves them: each
// round runs a batch of every case (client kind × concurrency) through every
// configuration in turn, the order rotated from round to round, so that a noisy
// neighbour on a shared machine weighs on all of them alike. Ratios between
// configurations hold on such a machine; absolute figures do not. It reports and
// asserts nothing (a failed call still fails the run: the figures of a configuration
// that answers wrongly mean nothing).

// DefaultCPUConfigs are the configurations CompareCPU measures by default: the nginx
// keep-alive + gzip pair and soapgw with its default codec.
var DefaultCPUConfigs = []string{"nginx-pair", "soapgw/auto"}

// CPUOptions configures CompareCPU. Zero fields take the defaults.
type CPUOptions struct {
	Configs     []string // default DefaultCPUConfigs; the first of them that is nginx-pair is the baseline
	Scenario    string   // default "stress"
	Clients     []string // ClientKinds (default both)
	Concurrency []int    // default 1 and 16
	Rounds      int      // default 5
	Calls       int      // measured calls per case, configuration and round; default 400
	Warmup      int      // unmeasured calls per client before a case's first round; default DefaultWarmup
	Seed        int64
	RunTimeout  time.Duration // bound on one batch; default DefaultRunTimeout

	Binary    string   // soapgw executable for the soapgw configurations
	BinaryEnv []string // extra environment for it
	// Binaries are other soapgw executables by label: a configuration named
	// "soapgw/auto@before" runs soapgw/auto with Binaries["before"], so a change is
	// measured against the build before it in one interleaved run.
	Binaries map[string]string
	WorkDir  string // configurations and logs (default: a temp dir, removed)
	KeepWork bool

	// ProfileDir, if set, gets CPU profiles of the gateways that serve them (soapgw's
	// admin pprof): after the rounds, each case runs through each such configuration
	// for ProfileTime (default 5 s) while every process of it records a profile.
	ProfileDir  string
	ProfileTime time.Duration

	Version     string
	CommandLine string
	Progress    io.Writer // one line per batch; nil: quiet
}

// CPUReport is what CompareCPU measured.
type CPUReport struct {
	Machine     Machine      `json:"machine"`
	CommandLine string       `json:"command_line"`
	Scenario    string       `json:"scenario"`
	Rounds      int          `json:"rounds"`
	Calls       int          `json:"calls_per_round"`
	Baseline    string       `json:"baseline"`
	Configs     []ConfigInfo `json:"configs"`
	Cases       []CPUCase    `json:"cases"`
}

// CPUCase is one client kind at one concurrency, through every configuration.
type CPUCase struct {
	Client      string      `json:"client"`
	Concurrency int         `json:"concurrency"`
	Results     []CPUResult `json:"results"`
}

// CPUResult is one configuration's figures for a case, summed over the rounds.
type CPUResult struct {
	Config    string `json:"config"`
	Status    string `json:"status"`
	Reason    string `json:"reason,omitempty"`
	Exchanges int    `json:"exchanges"`
	// CPUMicros is the on-CPU time of every thread of every middle-box process (both
	// sides) divided by the exchanges; ByProcess splits it.
	CPUMicros float64            `json:"cpu_us_per_exchange"`
	ByProcess map[string]float64 `json:"cpu_us_per_exchange_by_process"`
	// IOCalls and Wakeups per exchange, all middle-box processes: read/write-family
	// system calls, and times a thread was scheduled (Usage.IOCalls, Usage.Slices).
	IOCalls float64 `json:"io_syscalls_per_exchange"`
	Wakeups float64 `json:"wakeups_per_exchange"`
	// Allocs is the heap objects the soapgw processes (both sides) allocated per
	// exchange (go_memstats_mallocs_total from their admin endpoints; allocCounter); 0:
	// not measured (nginx).
	Allocs float64 `json:"allocs_per_exchange,omitempty"`
	// RoundCPUMicros is CPUMicros per round: how much the machine's noise moved it.
	RoundCPUMicros []float64 `json:"cpu_us_per_exchange_by_round"`
	PerSec         float64   `json:"exchanges_per_s"`
	Latency        Latency   `json:"latency"`
	// PeakRSS is the highest resident set of the configuration's processes (summed)
	// over the whole comparison.
	PeakRSS int64 `json:"peak_rss_bytes"`
	// CPURatio and PerSecRatio compare with the baseline of the same case (0: none).
	CPURatio    float64 `json:"cpu_ratio_to_baseline,omitempty"`
	PerSecRatio float64 `json:"exchanges_per_s_ratio_to_baseline,omitempty"`

	cpu       float64
	ioCalls   uint64
	slices    uint64
	allocs    float64
	allocExch int // exchanges of the batches whose allocations were counted
	byProc    map[string]float64
	latencies []time.Duration
	elapsed   time.Duration
}

func (o CPUOptions) withDefaults() (CPUOptions, error) {
	if len(o.Configs) == 0 {
		o.Configs = DefaultCPUConfigs
	}
	if o.Scenario == "" {
		o.Scenario = "stress"
	}
	if len(o.Clients) == 0 {
		o.Clients = ClientKinds
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1, 16}
	}
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	if o.Calls == 0 {
		o.Calls = 400
	}
	if o.Warmup == 0 {
		o.Warmup = DefaultWarmup
	}
	if o.RunTimeout == 0 {
		o.RunTimeout = DefaultRunTimeout
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.ProfileTime == 0 {
		o.ProfileTime = 5 * time.Second
	}
	var errs []error
	for _, name := range o.Configs {
		if _, _, err := o.config(name); err != nil {
			errs = append(errs, err)
		}
	}
	if spec, ok := ScenarioByName(o.Scenario); !ok {
		errs = append(errs, fmt.Errorf("unknown scenario %q (known: %v)", o.Scenario, ScenarioNames()))
	} else if spec.OneWay {
		errs = append(errs, fmt.Errorf("scenario %q is one-way: the CPU comparison needs request-response calls", o.Scenario))
	}
	for _, k := range o.Clients {
		if !slices.Contains(ClientKinds, k) {
			errs = append(errs, fmt.Errorf("unknown client %q (known: %s)", k, strings.Join(ClientKinds, ", ")))
		}
	}
	for _, c := range o.Concurrency {
		if c < 1 || c > 1024 {
			errs = append(errs, fmt.Errorf("concurrency %d: want 1 to 1024", c))
		}
	}
	if o.Rounds < 1 || o.Calls < 1 || o.Warmup < 1 {
		errs = append(errs, errors.New("rounds, calls and warm-up must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return o, &OptionsError{err}
	}
	return o, nil
}

// config resolves a configuration name, "name" or "name@label" (Binaries[label]), to
// the configuration and the soapgw binary it runs.
func (o CPUOptions) config(name string) (Config, string, error) {
	return resolveConfig(name, o.Binary, o.Binaries)
}

// CompareCPU runs the loopback CPU comparison. The error is for what stopped it from
// running at all; a configuration that failed is in the report with its reason.
func CompareCPU(ctx context.Context, o CPUOptions) (*CPUReport, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	work := o.WorkDir
	if work == "" {
		if work, err = os.MkdirTemp("", "soapgw-bench-cpu-"); err != nil {
			return nil, err
		}
		if !o.KeepWork {
			defer os.RemoveAll(work)
		}
	}
	logf := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, format+"\n", args...)
		}
	}

	link := loopbackLink{}
	srv, err := StartReplayServer(link.Server(), 0)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	maxC := slices.Max(o.Concurrency)
	s, err := LoadScenario(o.Scenario, max(o.Calls, o.Warmup*maxC), o.Seed)
	if err != nil {
		return nil, err
	}
	srv.Add(s)

	rep := &CPUReport{Machine: DescribeMachine(o.Version), CommandLine: o.CommandLine, Scenario: o.Scenario,
		Rounds: o.Rounds, Calls: o.Calls, Baseline: o.Configs[0]}
	if slices.Contains(o.Configs, "nginx-pair") {
		rep.Baseline = "nginx-pair"
	}

	// Start every configuration; they idle while another one is measured.
	started := make([]*Started, len(o.Configs))
	allocs := make([]*allocCounter, len(o.Configs))
	defer func() {
		for _, st := range started {
			if st != nil {
				st.Stop()
			}
		}
	}()
	for i, name := range o.Configs {
		cfg, binary, _ := o.config(name)
		info := ConfigInfo{Name: name, Profile: LoopbackProfile, Description: cfg.Describe(), Status: StatusOK}
		dir := filepath.Join(work, fmt.Sprintf("%02d-%s", i, strings.NewReplacer("/", "-", "@", "-").Replace(name)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		env := &Env{Client: link.Client(), Server: link.Server(), Upstream: srv.Addr(), Dir: dir,
			Binary: binary, BinaryEnv: o.BinaryEnv, Profile: link.Profile(), Pprof: o.ProfileDir != ""}
		if st := startConfig(ctx, cfg, env, &info); st != nil {
			started[i] = st
			allocs[i] = newAllocCounter(st.Endpoints)
			for _, pr := range st.Procs {
				pr.ResetPeak()
			}
		}
		logf("%s: %s %s", name, info.Status, info.Reason)
		rep.Configs = append(rep.Configs, info)
	}

	for _, kind := range o.Clients {
		for _, c := range o.Concurrency {
			cs := CPUCase{Client: kind, Concurrency: c}
			for i, name := range o.Configs {
				r := CPUResult{Config: name, Status: rep.Configs[i].Status, Reason: rep.Configs[i].Reason, byProc: map[string]float64{}}
				cs.Results = append(cs.Results, r)
			}
			rep.Cases = append(rep.Cases, cs)
		}
	}

	// batch runs n calls of one case through configuration i and adds what it measured.
	batch := func(cs *CPUCase, i, n int, measured bool) {
		r := &cs.Results[i]
		if r.Status != StatusOK || ctx.Err() != nil {
			return
		}
		st := started[i]
		call := func(ctx context.Context, k int) error { return CallOnce(ctx, st.Target, s, k) }
		if cs.Client == ClientHTTP11 {
			kc := newKeepAliveClient(st.Target, s)
			defer kc.Close()
			call = kc.Call
		}
		var span allocSpan
		if measured {
			span = allocs[i].begin(ctx) // before the CPU samples: reading costs CPU too
		}
		before := make([]Usage, len(st.Procs))
		for j, pr := range st.Procs {
			before[j], _ = pr.Sample()
		}
		out := runCalls(ctx, 0, n, cs.Concurrency, 30*time.Second, o.RunTimeout, call, nil)
		what := "warm-up"
		if measured {
			what = "measured"
		}
		if out.errors+out.mismatches > 0 || out.truncated {
			r.Status = StatusFailed
			r.Reason = fmt.Sprintf("%s: %d errors, %d mismatches of %d calls", what, out.errors, out.mismatches, out.started)
			if out.firstErr != nil {
				r.Reason += "; first: " + out.firstErr.Error()
			}
			if out.truncated {
				r.Reason += fmt.Sprintf("; cut by the %s run timeout", o.RunTimeout)
			}
			logf("%s c=%d %s: FAILED: %s", cs.Client, cs.Concurrency, r.Config, r.Reason)
			return
		}
		if !measured {
			return
		}
		cpu := 0.0
		for j, pr := range st.Procs {
			after, err := pr.Sample()
			if err != nil {
				r.Status, r.Reason = StatusFailed, fmt.Sprintf("sampling %s: %v", pr.Name, err)
				return
			}
			d := max(after.CPUSeconds-before[j].CPUSeconds, 0)
			cpu += d
			r.byProc[pr.Name] += d
			r.ioCalls += after.IOCalls - min(before[j].IOCalls, after.IOCalls)
			r.slices += after.Slices - min(before[j].Slices, after.Slices)
		}
		if n, ok := span.end(ctx); ok {
			r.allocs += n
			r.allocExch += len(out.latencies)
		}
		r.cpu += cpu
		r.Exchanges += len(out.latencies)
		r.latencies = append(r.latencies, out.latencies...)
		r.elapsed += out.elapsed
		us := cpu / float64(len(out.latencies)) * 1e6
		r.RoundCPUMicros = append(r.RoundCPUMicros, us)
		logf("%s c=%d %s: %d calls, %.1f µs CPU/exchange, %.0f/s", cs.Client, cs.Concurrency, r.Config,
			len(out.latencies), us, float64(len(out.latencies))/out.elapsed.Seconds())
	}

	for ci := range rep.Cases {
		cs := &rep.Cases[ci]
		for i := range o.Configs {
			batch(cs, i, o.Warmup*cs.Concurrency, false)
		}
	}
	for round := range o.Rounds {
		logf("round %d of %d", round+1, o.Rounds)
		for ci := range rep.Cases {
			cs := &rep.Cases[ci]
			for k := range o.Configs {
				batch(cs, (k+round)%len(o.Configs), o.Calls, true)
			}
		}
	}

	// Peaks over the whole comparison, then the sums, then the ratios.
	peaks := make([]int64, len(o.Configs))
	for i, st := range started {
		if st == nil {
			continue
		}
		for _, pr := range st.Procs {
			if u, err := pr.Sample(); err == nil {
				peaks[i] += u.PeakRSS
			}
			if done, err := pr.Exited(); done {
				for ci := range rep.Cases {
					r := &rep.Cases[ci].Results[i]
					r.Status, r.Reason = StatusFailed, fmt.Sprintf("%s exited (%v): %s", pr.Name, err, pr.LogTail(400))
				}
			}
		}
	}
	if o.ProfileDir != "" && ctx.Err() == nil {
		for i, st := range started {
			for ci := range rep.Cases {
				cs := &rep.Cases[ci]
				if st == nil || cs.Results[i].Status != StatusOK {
					continue
				}
				files, err := profileCase(ctx, o, st, s, cs, o.Configs[i])
				if err != nil {
					return rep, fmt.Errorf("profiling %s: %w", o.Configs[i], err)
				}
				for _, f := range files {
					logf("profile: %s", f)
				}
			}
		}
	}

	base := slices.Index(o.Configs, rep.Baseline)
	for ci := range rep.Cases {
		cs := &rep.Cases[ci]
		for i := range cs.Results {
			r := &cs.Results[i]
			r.PeakRSS = peaks[i]
			if r.Exchanges == 0 {
				continue
			}
			r.CPUMicros = r.cpu / float64(r.Exchanges) * 1e6
			r.IOCalls = float64(r.ioCalls) / float64(r.Exchanges)
			r.Wakeups = float64(r.slices) / float64(r.Exchanges)
			if r.allocExch > 0 {
				r.Allocs = r.allocs / float64(r.allocExch)
			}
			r.ByProcess = map[string]float64{}
			for p, v := range r.byProc {
				r.ByProcess[p] = v / float64(r.Exchanges) * 1e6
			}
			r.PerSec = float64(r.Exchanges) / r.elapsed.Seconds()
			r.Latency = Summarize(r.latencies)
		}
		if b := cs.Results[base]; b.Status == StatusOK && b.Exchanges > 0 {
			for i := range cs.Results {
				r := &cs.Results[i]
				if r.Status == StatusOK && r.Exchanges > 0 {
					r.CPURatio = r.CPUMicros / b.CPUMicros
					r.PerSecRatio = r.PerSec / b.PerSec
				}
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("interrupted: %w", err)
	}
	return rep, nil
}

// profileCase runs cs through st for o.ProfileTime while each process with a pprof
// endpoint (Started.Endpoints' "<role>-admin") records a CPU profile into
// o.ProfileDir/<config>-<client>-c<N>-<role>.pprof. None: no file, no calls.
func profileCase(ctx context.Context, o CPUOptions, st *Started, s *Scenario, cs *CPUCase, config string) ([]string, error) {
	var roles []string
	for k := range st.Endpoints {
		if strings.HasSuffix(k, "-admin") {
			roles = append(roles, k)
		}
	}
	if len(roles) == 0 {
		return nil, nil
	}
	sort.Strings(roles)
	if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
		return nil, err
	}
	secs := max(int(o.ProfileTime/time.Second), 1)
	client := &http.Client{Timeout: time.Duration(secs)*time.Second + 30*time.Second}
	files := make([]string, len(roles))
	errs := make([]error, len(roles))
	var wg sync.WaitGroup
	for j, role := range roles {
		files[j] = filepath.Join(o.ProfileDir, fmt.Sprintf("%s-%s-c%d-%s.pprof",
			strings.NewReplacer("/", "-", "@", "-").Replace(config), cs.Client, cs.Concurrency, strings.TrimSuffix(role, "-admin")))
		wg.Go(func() {
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", st.Endpoints[role], secs)
			errs[j] = fetchTo(ctx, client, url, files[j])
		})
	}
	// Bounded in time (the profile's length) and in count: HTTP/1.0 clients open a
	// connection per call, and tens of thousands in TIME_WAIT make new ones stall.
	calls := 4000
	call := func(ctx context.Context, k int) error { return CallOnce(ctx, st.Target, s, k%len(s.Calls)) }
	if cs.Client == ClientHTTP11 {
		kc := newKeepAliveClient(st.Target, s)
		defer kc.Close()
		call = func(ctx context.Context, k int) error { return kc.Call(ctx, k%len(s.Calls)) }
		calls = 1_000_000
	}
	out := runCalls(ctx, 0, calls, cs.Concurrency, 30*time.Second, time.Duration(secs)*time.Second, call, nil)
	wg.Wait()
	if out.errors+out.mismatches > 0 {
		return nil, fmt.Errorf("%s c=%d: %d errors, %d mismatches while profiling; first: %v", cs.Client, cs.Concurrency, out.errors, out.mismatches, out.firstErr)
	}
	return files, errors.Join(errs...)
}

func fetchTo(ctx context.Context, client *http.Client, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, io.LimitReader(resp.Body, 256<<20)); err != nil {
		f.Close()
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return f.Close()
}

// Failures lists the configurations and cases that failed.
func (r *CPUReport) Failures() []string {
	var out []string
	for _, cs := range r.Cases {
		for _, x := range cs.Results {
			if x.Status == StatusFailed {
				out = append(out, fmt.Sprintf("%s c=%d %s: %s", cs.Client, cs.Concurrency, x.Config, x.Reason))
			}
		}
	}
	return out
}

// WriteCPUReport writes results.json and report.md into dir.
func WriteCPUReport(dir string, r *CPUReport) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(j, '\n'), 0o644); err != nil {
		return nil, err
	}
	var b strings.Builder
	WriteCPUMarkdown(&b, r)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	return []string{"results.json", "report.md"}, nil
}

// WriteCPUMarkdown writes the report's tables.
func WriteCPUMarkdown(w io.Writer, r *CPUReport) {
	m := r.Machine
	fmt.Fprintf(w, "# Loopback CPU comparison\n\n")
	fmt.Fprintf(w, "`%s`\n\n", r.CommandLine)
	fmt.Fprintf(w, "%s, %d cores, %s, %s, %s; soapgw %s", m.CPUModel, m.Cores, m.OS, m.Kernel, m.GoVersion, m.SoapgwVersion)
	if m.NginxVersion != "" {
		fmt.Fprintf(w, "; %s", m.NginxVersion)
	}
	fmt.Fprintf(w, "; %s.\n\n", m.Date.Format(time.RFC3339))
	fmt.Fprintf(w, "Scenario %s; %d rounds of %d calls per case and configuration, configurations interleaved "+
		"(the order rotates each round). CPU is the on-CPU time of every thread of the middle-box processes of both "+
		"sides (soapgw: edge and origin; nginx: masters and workers) from /proc/<pid>/task/*/schedstat, sampled around "+
		"each batch, with the read/write-family system calls (/proc/<pid>/io syscr+syscw) and the times a thread was "+
		"scheduled (schedstat's timeslices, about one per wake-up); the client and the replay server are not counted. "+
		"Allocations are the heap objects soapgw's processes allocated (go_memstats_mallocs_total from their admin "+
		"endpoints, read around each batch, less what a reading allocates itself). http10: a TCP connection per call (legacy "+
		"HTTP/1.0 stacks); http11: keep-alive, one connection per concurrent client, opened at the start of each batch. "+
		"Ratios are to %s in the same case. Every response is checked byte for byte.\n\n", r.Scenario, r.Rounds, r.Calls, r.Baseline)
	for _, c := range r.Configs {
		if c.Status != StatusOK {
			fmt.Fprintf(w, "- %s: %s: %s\n", c.Name, c.Status, c.Reason)
		}
	}
	fmt.Fprintf(w, "| client | clients | configuration | exchanges | CPU µs/exchange | × %s | by round (µs) | exchanges/s | × %s | p50 ms | p99 ms | I/O syscalls/exchange | wake-ups/exchange | allocations/exchange | peak RSS MiB |\n", r.Baseline, r.Baseline)
	fmt.Fprintf(w, "|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, cs := range r.Cases {
		for _, x := range cs.Results {
			if x.Status != StatusOK {
				fmt.Fprintf(w, "| %s | %d | %s | %s: %s | | | | | | | | | | | |\n", cs.Client, cs.Concurrency, x.Config, x.Status, mdCell(short(x.Reason, 200)))
				continue
			}
			rounds := make([]string, len(x.RoundCPUMicros))
			for i, v := range x.RoundCPUMicros {
				rounds[i] = fmt.Sprintf("%.0f", v)
			}
			fmt.Fprintf(w, "| %s | %d | %s | %d | %.1f | %s | %s | %.0f | %s | %.3f | %.3f | %.1f | %.1f | %s | %.1f |\n",
				cs.Client, cs.Concurrency, x.Config, x.Exchanges, x.CPUMicros, ratio(x.CPURatio), strings.Join(rounds, " "),
				x.PerSec, ratio(x.PerSecRatio), x.Latency.P50, x.Latency.P99, x.IOCalls, x.Wakeups, AllocsCell(x.Allocs), float64(x.PeakRSS)/(1<<20))
		}
	}
	fmt.Fprintf(w, "\nCPU µs per exchange by process:\n\n")
	for _, cs := range r.Cases {
		for _, x := range cs.Results {
			if len(x.ByProcess) == 0 {
				continue
			}
			names := make([]string, 0, len(x.ByProcess))
			for p := range x.ByProcess {
				names = append(names, p)
			}
			sort.Strings(names)
			parts := make([]string, len(names))
			for i, p := range names {
				parts[i] = fmt.Sprintf("%s %.1f", p, x.ByProcess[p])
			}
			fmt.Fprintf(w, "- %s c=%d %s: %s\n", cs.Client, cs.Concurrency, x.Config, strings.Join(parts, ", "))
		}
	}
}

// AllocsCell formats allocations per exchange ("n/a": not measured).
func AllocsCell(v float64) string {
	if v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", v)
}

func ratio(v float64) string {
	if v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}
