package main

import (
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

// newBenchCPUCommand is `soapgw bench cpu`: the loopback CPU comparison of issue #19.
func newBenchCPUCommand(g *globalOptions) *cobra.Command {
	var (
		o           bench.CPUOptions
		configs     string
		clients     string
		concurrency string
		binary      string
		out         string
	)
	cmd := &cobra.Command{
		Use:   "cpu [--configs nginx-pair,soapgw/auto] [--clients http10,http11] [--concurrency 1,16] [--rounds 5] [--calls 400]",
		Short: "Compare the CPU per exchange of configurations on loopback, interleaved in one run",
		Long: `cpu measures what each configuration costs in CPU when the link costs nothing: on
loopback, every configuration started at once, each round running a batch of every case
(client kind x concurrency) through every configuration in turn, the order rotated from
round to round, so a noisy neighbour weighs on all of them alike. Read the ratios; the
absolute figures move with the machine.

CPU is the on-CPU time of every thread of the middle boxes of both sides (soapgw: edge and
origin; nginx: masters and workers), sampled from /proc around each batch. Clients:
http10 opens a TCP connection per call (legacy HTTP/1.0 stacks), http11 keeps one
connection per concurrent client (keep-alive stacks). Every response is checked byte for
byte; a failed call marks its configuration FAILED and cpu exits 1. It asserts nothing
about the figures.

It writes DIR/results.json and DIR/report.md.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Configs = splitList(configs)
			o.Clients = splitList(clients)
			o.Concurrency = nil
			for _, s := range splitList(concurrency) {
				n, err := strconv.Atoi(s)
				if err != nil {
					return usageError{fmt.Errorf("bench cpu: --concurrency %q: want numbers from 1 to 1024", concurrency)}
				}
				o.Concurrency = append(o.Concurrency, n)
			}
			if out == "" {
				return usageError{errors.New("bench cpu: --out must not be empty")}
			}
			o.Binary = binary
			if o.Binary == "" {
				if exe, err := os.Executable(); err == nil && !strings.HasSuffix(exe, ".test") {
					o.Binary = exe
				}
			}
			o.BinaryEnv = benchChildEnv
			o.KeepWork = o.WorkDir != ""
			o.Version = versionString()
			o.CommandLine = "soapgw " + strings.Join(os.Args[1:], " ")
			o.Progress = g.stderr
			rep, err := bench.CompareCPU(cmd.Context(), o)
			if rep == nil {
				if oe := (*bench.OptionsError)(nil); errors.As(err, &oe) {
					return usageError{fmt.Errorf("bench cpu: %w", err)}
				}
				return fmt.Errorf("bench cpu: %w", err)
			}
			files, werr := bench.WriteCPUReport(out, rep)
			if werr != nil {
				return fmt.Errorf("bench cpu: writing results: %w", werr)
			}
			printCPUSummary(g.stdout, rep)
			fmt.Fprintf(g.stdout, "\nwrote %s in %s\n", strings.Join(files, ", "), out)
			if abs, aerr := filepath.Abs(filepath.Join(out, "report.md")); aerr == nil {
				fmt.Fprintf(g.stdout, "report: %s\n", abs)
			}
			if err != nil {
				return fmt.Errorf("bench cpu: %w", err)
			}
			if fails := rep.Failures(); len(fails) > 0 {
				for _, f := range fails {
					fmt.Fprintf(g.stderr, "bench cpu: FAILED: %s\n", f)
				}
				return fmt.Errorf("bench cpu: %d failure(s)", len(fails))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&configs, "configs", strings.Join(bench.DefaultCPUConfigs, ","), "configurations, comma-separated (see soapgw bench --list); nginx-pair, if listed, is the baseline")
	f.StringVar(&o.Scenario, "scenario", "stress", "scenario (see soapgw bench --list)")
	f.StringVar(&clients, "clients", strings.Join(bench.ClientKinds, ","), "client kinds: http10 (a connection per call), http11 (keep-alive)")
	f.StringVar(&concurrency, "concurrency", "1,16", "client counts, comma-separated")
	f.IntVar(&o.Rounds, "rounds", 5, "rounds; each runs every case through every configuration")
	f.IntVarP(&o.Calls, "calls", "n", 400, "measured calls per case, configuration and round")
	f.IntVar(&o.Warmup, "warmup", bench.DefaultWarmup, "unmeasured warm-up calls per client before the first round")
	f.Int64Var(&o.Seed, "seed", trafficgen.DefaultSeed, "internal/trafficgen seed")
	f.DurationVar(&o.RunTimeout, "run-timeout", bench.DefaultRunTimeout, "bound on one batch")
	f.StringVar(&binary, "binary", "", "soapgw binary for the soapgw configurations (default: this executable)")
	f.StringToStringVar(&o.Binaries, "binary-as", nil, "LABEL=PATH: another soapgw binary, run by configurations named <config>@LABEL (e.g. soapgw/auto@before), to compare builds in one run")
	f.StringVar(&out, "out", "bench-results/cpu", "directory for results.json and report.md")
	f.StringVar(&o.ProfileDir, "profile-dir", "", "after the rounds, record CPU profiles of the soapgw processes per case into this directory (admin pprof)")
	f.DurationVar(&o.ProfileTime, "profile-time", 5*time.Second, "length of each profile")
	f.StringVar(&o.WorkDir, "work-dir", "", "keep generated configurations and logs here (default: a temp dir, removed)")
	return cmd
}

func printCPUSummary(w io.Writer, r *bench.CPUReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "client\tclients\tconfiguration\tstatus\texchanges\tCPU µs/exch\tx %s\texch/s\tx %s\tp50 ms\tp99 ms\tsyscalls/exch\twake-ups/exch\tallocs/exch\tpeak RSS MiB\t\n", r.Baseline, r.Baseline)
	for _, cs := range r.Cases {
		for _, x := range cs.Results {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%.1f\t%.2f\t%.0f\t%.2f\t%.3f\t%.3f\t%.1f\t%.1f\t%s\t%.1f\t\n", cs.Client, cs.Concurrency, x.Config, x.Status,
				x.Exchanges, x.CPUMicros, x.CPURatio, x.PerSec, x.PerSecRatio, x.Latency.P50, x.Latency.P99, x.IOCalls, x.Wakeups, bench.AllocsCell(x.Allocs), float64(x.PeakRSS)/(1<<20))
		}
	}
	_ = tw.Flush()
}
