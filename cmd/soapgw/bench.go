package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/soapgw/soapgw/internal/bench"
	"github.com/soapgw/soapgw/internal/trafficgen"
)

type benchOptions struct {
	profiles    string
	profileFile string
	scenarios   string
	configs     string
	concurrency string
	calls       int
	warmup      int
	seed        int64
	budget      time.Duration
	profBudget  time.Duration
	runTimeout  time.Duration
	binary      string
	binaries    map[string]string
	deliveries  int
	out         string
	workDir     string
	smoke       bool
	list        bool
}

func newBenchCommand(g *globalOptions) *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench [--profiles P,...] [--scenarios S,...] [--configs C,...] [--calls N] [--concurrency 1,16] [--out DIR] | --smoke",
		Short: "Benchmark direct, nginx and soapgw paths over emulated links with the papers' SOAP traffic",
		Long: `bench measures what a legacy SOAP client sees through each configuration, over emulated
links (internal/linkemu: network namespaces with delay, loss and rate limits), with the
deterministic traffic of internal/trafficgen (the papers' scenarios).

Configurations: direct (the client calls the server across the link, HTTP/1.0, a connection
per call), nginx-pair (Debian's nginx beside each side: keep-alive HTTP/1.1 and gzip across
the link), soapgw/<codec> (this binary as edge and origin over the TCP tunnel; codec
identity, gzip, zstd, zstd-stream, token or auto), soapgw-udp/<codec> (the same over the
UDP tunnel, QUIC, small messages sent once), soapgw-udp-auto/<codec> (sent twice while
packets are lost, the default) and soapgw-udp-redundant/<codec> (always sent twice):
edge.peers[].redundancy off, auto, on. A configuration that cannot run here (nginx missing, a codec
this build refuses) is reported as skipped with the reason.

The client makes HTTP/1.0 calls, one TCP connection each, and checks every response byte
for byte; the replay server checks every request the same way and records when it got
each one. A run with a failed or mismatched call, or a call the server got twice, is
FAILED and bench exits 1.

stress-oneway sends the stress requests as a one-way operation: the server answers 202
Accepted with an empty body, and the soapgw configurations mark it in edge.one_way (a
spool and a ledger in the work directory), so the edge acknowledges from its spool and
delivers in the background. Each run waits, bounded, until the server has every message
the client saw acknowledged; the report adds the delivery time, messages per second
delivered and what the link's bandwidth allows at the bytes measured per message.

It writes DIR/results.json (every figure and the machine), DIR/report.md (tables per
profile, scenario and concurrency) and SVG charts. --smoke is a quick check (< 1 min):
one profile (lan with the emulator, else loopback), stress, 20 calls, direct,
soapgw/identity and nginx-pair when nginx is installed.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.list {
				return listBench(g.stdout)
			}
			opts, err := o.options(cmd)
			if err != nil {
				return usageError{err}
			}
			return runBench(cmd, g, o, opts)
		},
	}
	cmd.AddCommand(newBenchCPUCommand(g))
	f := cmd.Flags()
	f.StringVar(&o.profiles, "profiles", "", "link profiles, comma-separated (default: every emulated profile; see --list)")
	f.StringVar(&o.profileFile, "profile-file", "", "YAML file of extra link profiles (linkemu format)")
	f.StringVar(&o.scenarios, "scenarios", "", "scenarios, comma-separated (default: all, minus those too slow on a profile)")
	f.StringVar(&o.configs, "configs", "", "configurations, comma-separated (default: "+strings.Join(bench.DefaultConfigs, ",")+")")
	f.StringVar(&o.concurrency, "concurrency", "1,16", "client counts, comma-separated: 1 is one synchronous client as in the papers")
	f.IntVarP(&o.calls, "calls", "n", 0, "measured calls per run (default: planned per profile to take about --budget)")
	f.IntVar(&o.warmup, "warmup", bench.DefaultWarmup, "unmeasured warm-up calls per client before each run (at least one per client; 0: none, the measured calls set up the connections)")
	f.Int64Var(&o.seed, "seed", trafficgen.DefaultSeed, "internal/trafficgen seed")
	f.DurationVar(&o.budget, "budget", bench.DefaultBudget, "time one run aims for when --calls is not given")
	f.DurationVar(&o.profBudget, "profile-budget", bench.DefaultProfileBudget, "without --scenarios: estimated time per profile and configuration; runs beyond it are left out by priority (0: no bound)")
	f.DurationVar(&o.runTimeout, "run-timeout", bench.DefaultRunTimeout, "bound on one run; calls not started by then are left out (truncated)")
	f.StringVar(&o.binary, "binary", "", "soapgw binary for the soapgw configurations (default: this executable)")
	f.StringToStringVar(&o.binaries, "binary-as", nil, "LABEL=PATH: another soapgw binary, run by configurations named <config>@LABEL (e.g. soapgw-udp/auto@before), to compare builds on the same links in one run")
	f.IntVar(&o.deliveries, "oneway-deliveries", 0, "edge.one_way.deliveries of the soapgw configurations: one-way messages delivered at once (default: soapgw's, 1024)")
	f.StringVar(&o.out, "out", "bench-results", "directory for results.json, report.md and the charts")
	f.StringVar(&o.workDir, "work-dir", "", "keep generated configurations and logs here (default: a temp dir, removed)")
	f.BoolVar(&o.smoke, "smoke", false, "quick check: one profile, stress, 20 calls, direct + soapgw/identity (+ nginx-pair); exits 1 on any failure")
	f.BoolVar(&o.list, "list", false, "list profiles, scenarios and configurations, then exit")
	return cmd
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func (o *benchOptions) options(cmd *cobra.Command) (bench.Options, error) {
	opts := bench.Options{
		Profiles:         splitList(o.profiles),
		ProfileFile:      o.profileFile,
		Scenarios:        splitList(o.scenarios),
		Configs:          splitList(o.configs),
		Calls:            o.calls,
		Warmup:           cmp.Or(o.warmup, bench.NoWarmup),
		Seed:             o.seed,
		Budget:           o.budget,
		ProfileBudget:    o.profBudget,
		RunTimeout:       o.runTimeout,
		OneWayDeliveries: o.deliveries,
		WorkDir:          o.workDir,
		KeepWork:         o.workDir != "",
		Version:          versionString(),
		CommandLine:      "soapgw " + strings.Join(os.Args[1:], " "),
	}
	if o.calls < 0 || o.deliveries < 0 || o.warmup < 0 || o.budget <= 0 || o.runTimeout <= 0 || o.profBudget < 0 {
		return opts, errors.New("bench: --calls, --warmup, --oneway-deliveries and --profile-budget must not be negative; --budget and --run-timeout must be positive")
	}
	if o.out == "" {
		return opts, errors.New("bench: --out must not be empty")
	}
	if !o.smoke || cmd.Flags().Changed("concurrency") {
		for _, s := range splitList(o.concurrency) {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 1024 {
				return opts, fmt.Errorf("bench: --concurrency %q: want numbers from 1 to 1024", o.concurrency)
			}
			opts.Concurrency = append(opts.Concurrency, n)
		}
	}
	if o.binary != "" {
		opts.Binary = o.binary
	} else if exe, err := os.Executable(); err == nil && !strings.HasSuffix(exe, ".test") {
		opts.Binary = exe
	}
	opts.Binaries = o.binaries
	if o.smoke {
		if !cmd.Flags().Changed("run-timeout") {
			opts.RunTimeout = 0 // the smoke default
		}
		var note string
		opts, note = bench.SmokeOptions(cmd.Context(), opts)
		if note != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "bench: %s\n", note)
		}
	}
	if err := opts.Validate(); err != nil {
		return opts, fmt.Errorf("bench: %w", err)
	}
	return opts, nil
}

func listBench(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROFILE\tLINK\tDESCRIPTION")
	for _, p := range bench.KnownProfiles(nil) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.Summary(), p.Description)
	}
	fmt.Fprintln(tw, "\nSCENARIO\tSOURCE\tDESCRIPTION")
	for _, s := range bench.Scenarios() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.Source, s.Description)
	}
	fmt.Fprintln(tw, "\nCONFIGURATION\t\tDESCRIPTION")
	for _, name := range bench.ConfigNames() {
		c, err := bench.ConfigByName(name)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t\t%s\n", name, c.Describe())
	}
	if bench.Emulator() == nil {
		fmt.Fprintln(tw, "\n(no link emulator in this build: only the loopback profile can run)")
	}
	return tw.Flush()
}

func runBench(cmd *cobra.Command, g *globalOptions, o *benchOptions, opts bench.Options) error {
	opts.Progress = g.stderr
	opts.ProgressTTY = bench.IsTerminal(g.stderr)
	opts.BinaryEnv = benchChildEnv
	res, runErr := bench.Run(cmd.Context(), opts)
	if res == nil {
		if oe := (*bench.OptionsError)(nil); errors.As(runErr, &oe) {
			return usageError{fmt.Errorf("bench: %w", runErr)}
		}
		return fmt.Errorf("bench: %w", runErr)
	}
	files, err := bench.WriteResults(o.out, res)
	if err != nil {
		return fmt.Errorf("bench: writing results: %w", err)
	}
	printBenchSummary(g.stdout, res)
	fmt.Fprintf(g.stdout, "\nwrote %s in %s\n", strings.Join(files, ", "), o.out)
	if abs, err := filepath.Abs(filepath.Join(o.out, "report.md")); err == nil {
		fmt.Fprintf(g.stdout, "report: %s\n", abs)
	}
	if runErr != nil {
		return fmt.Errorf("bench: %w", runErr)
	}
	fails := res.Failures()
	if opts.Smoke {
		for _, c := range res.Configs {
			if c.Status == bench.StatusSkipped && c.Reason != "nginx not installed" {
				fails = append(fails, fmt.Sprintf("%s on %s skipped: %s", c.Name, c.Profile, c.Reason))
			}
		}
	}
	if len(fails) > 0 {
		for _, f := range fails {
			fmt.Fprintf(g.stderr, "bench: FAILED: %s\n", f)
		}
		return fmt.Errorf("bench: %d failure(s)", len(fails))
	}
	return nil
}

// benchChildEnv is extra environment for the soapgw processes bench starts (tests use
// it to make the test binary act as soapgw).
var benchChildEnv []string

func printBenchSummary(out io.Writer, r *bench.Results) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "profile\tscenario\tclients\tconfiguration\tstatus\tcalls\tp50 ms\tp99 ms\tcalls/s\tdelivered/s\tB/exchange\t")
	for _, x := range r.Runs {
		b := "n/a"
		if x.PerExchange != nil {
			b = fmt.Sprintf("%.0f", x.PerExchange.TotalBytes)
		}
		delivered := "n/a"
		if x.Delivery != nil {
			delivered = fmt.Sprintf("%.1f", x.Delivery.PerSec)
		}
		st := x.Status
		if x.Truncated {
			st += "(trunc)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%.2f\t%.2f\t%.1f\t%s\t%s\t\n", x.Profile, x.Scenario, x.Concurrency, x.Config, st,
			x.OK, x.Latency.P50, x.Latency.P99, x.CallsPerSec, delivered, b)
	}
	_ = tw.Flush()
	for _, c := range r.Configs {
		if c.Status != bench.StatusOK {
			fmt.Fprintf(out, "%s on %s: %s: %s\n", c.Name, c.Profile, c.Status, c.Reason)
		}
	}
}
