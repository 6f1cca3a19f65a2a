package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/soapgw/soapgw/internal/soapdemo"
)

// The example commands let one image play every role of a demo (docker compose,
// Kubernetes): the SOAP service behind the origin and the legacy client in front of the
// edge. They use the Stress scenario of internal/soapdemo, the same as `soapgw demo`.

type exampleServerOptions struct {
	listen       string
	drainTimeout time.Duration
}

func newExampleServerCommand(g *globalOptions) *cobra.Command {
	o := &exampleServerOptions{}
	cmd := &cobra.Command{
		Use:   "example-server [--listen ADDR]",
		Short: "Serve the example Calendar SOAP service (the Stress scenario) over HTTP",
		Long: `example-server serves the calendaring SOAP service of the Stress scenario (Kangasharju
et al.) that 'soapgw demo' uses: POST a Stress request to any path and it answers the
matching 464-byte response; GET ?wsdl gives its WSDL. It stands in for the real SOAP
server behind an origin gateway in the deployment examples. On SIGINT/SIGTERM it stops
accepting and finishes the requests in progress for up to --drain-timeout.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.listen == "" || o.drainTimeout < 0 {
				return usageError{errors.New("example-server: --listen must not be empty, --drain-timeout not negative")}
			}
			if _, port, err := net.SplitHostPort(o.listen); err != nil {
				return usageError{fmt.Errorf("example-server: --listen %q: %w", o.listen, err)}
			} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
				return usageError{fmt.Errorf("example-server: --listen %q: port must be a number from 0 to 65535", o.listen)}
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			return runExampleServer(cmd.Context(), o, g, log)
		},
	}
	cmd.Flags().StringVar(&o.listen, "listen", ":9090", "host:port to serve on (an empty host: every interface)")
	cmd.Flags().DurationVar(&o.drainTimeout, "drain-timeout", 10*time.Second, "on a signal, how long requests in progress may take to finish")
	return cmd
}

func runExampleServer(ctx context.Context, o *exampleServerOptions, g *globalOptions, log *slog.Logger) error {
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("example-server: %w", err)
	}
	var requests atomic.Int64
	h := soapdemo.NewStressHandler()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			requests.Add(1)
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(g.stdout, "example-server: Calendar SOAP service on http://%s%s\n", ln.Addr(), soapdemo.StressPath)

	select {
	case <-ctx.Done():
		log.Info("example-server: signal received; draining", "drain_timeout", o.drainTimeout)
	case err := <-errc:
		return fmt.Errorf("example-server: %w", err)
	}
	g.stopSignals()
	dctx, cancel := context.WithTimeout(context.Background(), o.drainTimeout)
	defer cancel()
	err = srv.Shutdown(dctx)
	log.Info("example-server: stopped", "requests", requests.Load())
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("example-server: drain incomplete: %w", err)
	}
	return nil
}

type exampleLoadOptions struct {
	url         string
	rate        float64
	concurrency int
	duration    time.Duration
	calls       int
	timeout     time.Duration
	wait        time.Duration
	interval    time.Duration
}

func newExampleLoadCommand(g *globalOptions) *cobra.Command {
	o := &exampleLoadOptions{}
	cmd := &cobra.Command{
		Use:   "example-load --url URL [--rate N] [--concurrency C] [--duration D | --calls N]",
		Short: "Call a Stress SOAP service like a legacy HTTP/1.0 client and check every response",
		Long: `example-load calls the example Calendar service (soapgw example-server), directly or
through an edge gateway, the way a legacy SOAP stack does: a new TCP connection and an
HTTP/1.0 request per call, Axis 1.0 headers, and the connection closed after the response.
Every response must be byte for byte the service's answer to that call.

It stops after --calls calls, after --duration, or on SIGINT/SIGTERM (with neither bound,
only on a signal). It prints a summary line every --interval and a final line; the exit
status is 1 when any call failed (an error, a status other than 200 or a different body).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			target, err := o.validate()
			if err != nil {
				return usageError{err}
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			return runExampleLoad(cmd.Context(), o, target, g.stdout, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.url, "url", "", "the service (or edge) URL, http://host[:port][/path]; the path defaults to "+soapdemo.StressPath)
	f.Float64Var(&o.rate, "rate", 0, "calls per second in total (0: as fast as --concurrency allows)")
	f.IntVar(&o.concurrency, "concurrency", 1, "clients calling at once")
	f.DurationVar(&o.duration, "duration", 0, "stop after this long (0: no time bound)")
	f.IntVarP(&o.calls, "calls", "n", 0, "stop after this many calls (0: no count bound)")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "bound on one call")
	f.DurationVar(&o.wait, "wait", 0, "first retry one call until it succeeds, for up to this long (for a gateway that is still starting)")
	f.DurationVar(&o.interval, "interval", 10*time.Second, "how often to print a summary line")
	return cmd
}

// loadTarget is where example-load sends its calls.
type loadTarget struct {
	addr string // host:port to dial
	host string // Host header, as in the URL
	path string // request target
}

func (o *exampleLoadOptions) validate() (loadTarget, error) {
	switch {
	case o.url == "":
		return loadTarget{}, errors.New("example-load: --url URL is required")
	case o.duration > 0 && o.calls > 0:
		return loadTarget{}, errors.New("example-load: give --duration or --calls, not both")
	case o.rate < 0 || o.concurrency < 1 || o.duration < 0 || o.calls < 0 || o.timeout <= 0 || o.wait < 0 || o.interval <= 0:
		return loadTarget{}, errors.New("example-load: --concurrency, --timeout and --interval must be positive; --rate, --duration, --calls and --wait not negative")
	}
	u, err := url.Parse(o.url)
	if err != nil {
		return loadTarget{}, fmt.Errorf("example-load: --url: %w", err)
	}
	if u.Scheme != "http" || u.Host == "" || u.User != nil || u.Fragment != "" {
		return loadTarget{}, fmt.Errorf("example-load: --url %q: want http://host[:port][/path] (plain HTTP, as legacy clients speak)", o.url)
	}
	t := loadTarget{addr: u.Host, host: u.Host, path: u.RequestURI()}
	if u.Port() == "" {
		t.addr = net.JoinHostPort(u.Hostname(), "80")
	}
	if u.Path == "" && u.RawQuery == "" {
		t.path = soapdemo.StressPath
	}
	return t, nil
}

// call makes call i and reports how it went: err is a transport error, wrong a response
// that is not the service's answer to call i.
func (t loadTarget) call(ctx context.Context, i int) (wrong string, err error) {
	status, body, err := soapdemo.CallHTTP10(ctx, t.addr, t.path, soapdemo.StressRequest(i), soapdemo.StressRequestHeaders(t.host))
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return fmt.Sprintf("status %d (%d-byte body: %.120q)", status, len(body), body), nil
	}
	if want := soapdemo.StressResponse(i); !bytes.Equal(body, want) {
		return fmt.Sprintf("body differs from the service's answer (%d bytes, want %d)", len(body), len(want)), nil
	}
	return "", nil
}

// reservoirSize bounds the latencies kept for the final percentiles.
const reservoirSize = 100_000

// loadStats collects the outcome of every call; it is shared by the callers and the
// reporter.
type loadStats struct {
	mu       sync.Mutex
	start    time.Time
	ok       int64
	wrong    int64
	errs     int64
	interval []time.Duration // latencies of the successful calls since the last report
	sample   []time.Duration // a uniform sample of every successful call's latency
	seen     int64           // successful calls offered to the sample
	logged   int             // failures logged in detail
}

const maxFailuresLogged = 5

func (s *loadStats) record(i int, d time.Duration, wrong string, err error, log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil:
		s.errs++
	case wrong != "":
		s.wrong++
	default:
		s.ok++
		s.interval = append(s.interval, d)
		s.seen++
		if len(s.sample) < reservoirSize {
			s.sample = append(s.sample, d)
		} else if j := rand.Int64N(s.seen); j < reservoirSize {
			s.sample[j] = d
		}
		return
	}
	if s.logged < maxFailuresLogged {
		s.logged++
		if err != nil {
			log.Error("example-load: call failed", "call", i, "err", err)
		} else {
			log.Error("example-load: wrong response", "call", i, "why", wrong)
		}
		if s.logged == maxFailuresLogged {
			log.Error("example-load: further failures are only counted")
		}
	}
}

func formatLatencies(st soapdemo.Stats) string {
	if st.N == 0 {
		return "no successful call"
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %s p90 %s p99 %s max %s", r(st.P50), r(st.P90), r(st.P99), r(st.Max))
}

// report prints the calls since the last report.
func (s *loadStats) report(out io.Writer, since time.Duration, prev *[3]int64) {
	s.mu.Lock()
	lat := s.interval
	s.interval = nil
	cur := [3]int64{s.ok, s.wrong, s.errs}
	elapsed := time.Since(s.start)
	s.mu.Unlock()
	n := cur[0] + cur[1] + cur[2] - prev[0] - prev[1] - prev[2]
	fmt.Fprintf(out, "example-load: %s: %d calls in the last %s (%.1f/s), %d ok, %d wrong, %d errors; %s\n",
		elapsed.Round(time.Second), n, since.Round(time.Millisecond), float64(n)/since.Seconds(),
		cur[0]-prev[0], cur[1]-prev[1], cur[2]-prev[2], formatLatencies(soapdemo.Summarize(lat)))
	*prev = cur
}

func runExampleLoad(ctx context.Context, o *exampleLoadOptions, t loadTarget, out io.Writer, log *slog.Logger) error {
	if o.wait > 0 {
		if err := waitForService(ctx, t, o); err != nil {
			return err
		}
	}
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	fmt.Fprintf(out, "example-load: calling http://%s%s (%d-byte Stress requests over HTTP/1.0, a connection per call), concurrency %d, %s\n",
		t.host, t.path, soapdemo.StressRequestSize, o.concurrency, describeBounds(o))

	s := &loadStats{start: time.Now()}
	// The dispatcher hands out call indices, paced by --rate, until a bound is reached.
	jobs := make(chan int)
	go func() {
		defer close(jobs)
		var tick <-chan time.Time
		if o.rate > 0 {
			tk := time.NewTicker(max(time.Duration(float64(time.Second)/o.rate), time.Microsecond))
			defer tk.Stop()
			tick = tk.C
		}
		for i := 0; o.calls == 0 || i < o.calls; i++ {
			if tick != nil && i > 0 {
				select {
				case <-tick: // a slow run drops ticks rather than bursting to catch up
				case <-ctx.Done():
					return
				}
			}
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range o.concurrency {
		wg.Go(func() {
			for i := range jobs {
				cctx, cancel := context.WithTimeout(ctx, o.timeout)
				start := time.Now()
				wrong, err := t.call(cctx, i)
				d := time.Since(start)
				cancel()
				if err != nil && runOver(ctx) {
					return // cut short by the end of the run, not a failure
				}
				s.record(i, d, wrong, err, log)
			}
		})
	}
	done := make(chan struct{})
	var reporter sync.WaitGroup
	reporter.Go(func() {
		tk := time.NewTicker(o.interval)
		defer tk.Stop()
		var prev [3]int64
		last := time.Now()
		for {
			select {
			case now := <-tk.C:
				s.report(out, now.Sub(last), &prev)
				last = now
			case <-done:
				return
			}
		}
	})
	wg.Wait()
	close(done)
	reporter.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	elapsed := time.Since(s.start)
	total := s.ok + s.wrong + s.errs
	fmt.Fprintf(out, "example-load: done after %s: %d calls (%.1f/s), %d ok, %d wrong, %d errors; %s\n",
		elapsed.Round(time.Millisecond), total, float64(total)/elapsed.Seconds(), s.ok, s.wrong, s.errs,
		formatLatencies(soapdemo.Summarize(s.sample)))
	if failed := s.wrong + s.errs; failed > 0 {
		return fmt.Errorf("example-load: %d of %d calls failed (%d wrong responses, %d errors)", failed, total, s.wrong, s.errs)
	}
	if o.calls > 0 && total < int64(o.calls) {
		return fmt.Errorf("example-load: interrupted after %d of %d calls", total, o.calls)
	}
	return nil
}

// runOver reports whether the run's context is done or past its deadline: a dial can
// fail on the deadline a moment before the context's own timer fires.
func runOver(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

func describeBounds(o *exampleLoadOptions) string {
	rate := "unpaced"
	if o.rate > 0 {
		rate = fmt.Sprintf("%g calls/s", o.rate)
	}
	switch {
	case o.calls > 0:
		return fmt.Sprintf("%s, %d calls", rate, o.calls)
	case o.duration > 0:
		return fmt.Sprintf("%s, for %s", rate, o.duration)
	}
	return rate + ", until interrupted"
}

// waitForService retries one call until it succeeds or o.wait passes: in a compose
// project or a pod the client may start before the edge has its tunnel.
func waitForService(ctx context.Context, t loadTarget, o *exampleLoadOptions) error {
	deadline := time.Now().Add(o.wait)
	for {
		cctx, cancel := context.WithTimeout(ctx, min(o.timeout, time.Until(deadline)+time.Millisecond))
		wrong, err := t.call(cctx, 0)
		cancel()
		if err == nil && wrong == "" {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("example-load: interrupted while waiting for %s: %w", t.host, ctx.Err())
		}
		if time.Now().After(deadline) {
			why := wrong
			if err != nil {
				why = err.Error()
			}
			return fmt.Errorf("example-load: no correct response from %s within --wait %s: %s", t.host, o.wait, why)
		}
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}
