package bench

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Latency summarizes call latencies in milliseconds. Percentiles use the nearest-rank
// method: P90 is the smallest measured latency that at least 90% of the calls did not
// exceed (always one of the measured values).
type Latency struct {
	N    int     `json:"n"`
	Min  float64 `json:"min_ms"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of sorted values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// rank = ceil(p/100 * n), computed in integers to avoid 0.29*100 = 28.999... errors.
	k := int((int64(p*1000)*int64(n) + 99_999) / 100_000)
	k = min(max(k, 1), n)
	return sorted[k-1]
}

// Summarize computes the Latency of ds (not modified).
func Summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return Latency{
		N:    len(s),
		Min:  ms(s[0]),
		Mean: ms(sum / time.Duration(len(s))),
		P50:  ms(Percentile(s, 50)),
		P90:  ms(Percentile(s, 90)),
		P99:  ms(Percentile(s, 99)),
		Max:  ms(s[len(s)-1]),
	}
}

// callOutcome is the result of a batch of calls.
type callOutcome struct {
	latencies  []time.Duration // of the successful calls
	okCalls    []int           // their indices
	started    int             // calls started
	errors     int             // transport failures (dial, reset, timeout)
	mismatches int             // wrong status or bytes
	firstErr   error
	truncated  bool      // stopped by the time limit before every call started
	aborted    bool      // stopped after too many consecutive failures
	start      time.Time // when the first call could start
	elapsed    time.Duration
}

// maxConsecutiveFailures stops a batch that is plainly broken instead of waiting for
// every call to time out.
const maxConsecutiveFailures = 20

// runCalls makes calls first..first+n-1 with up to concurrency callers, each call bounded
// by callTimeout and the whole batch by limit (no call starts after it; calls in
// progress are cancelled). progress is called after each call.
func runCalls(ctx context.Context, first, n, concurrency int, callTimeout, limit time.Duration,
	call func(ctx context.Context, i int) error, progress func(done int)) callOutcome {
	concurrency = max(min(concurrency, n), 1)
	start := time.Now()
	limitAt := start.Add(limit)
	runCtx, cancel := context.WithDeadline(ctx, limitAt)
	defer cancel()

	var (
		mu          sync.Mutex
		out         callOutcome
		next        atomic.Int64
		consecutive int
		done        int
	)
	out.start = start
	out.latencies = make([]time.Duration, 0, n)
	out.okCalls = make([]int, 0, n)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for runCtx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= n {
					return
				}
				mu.Lock()
				out.started++
				mu.Unlock()
				cctx, ccancel := context.WithTimeout(runCtx, callTimeout)
				t0 := time.Now()
				err := call(cctx, first+k)
				d := time.Since(t0)
				ccancel()
				mu.Lock()
				done++
				switch {
				case err == nil:
					out.latencies = append(out.latencies, d)
					out.okCalls = append(out.okCalls, first+k)
					consecutive = 0
				case (runCtx.Err() != nil || !time.Now().Before(limitAt)) && ctx.Err() == nil && !errors.Is(err, ErrMismatch):
					// cut by the batch's time limit: not the configuration's fault (a
					// socket deadline taken from runCtx can fire before runCtx reports it)
					out.started--
					done--
				default:
					if errors.Is(err, ErrMismatch) {
						out.mismatches++
					} else {
						out.errors++
					}
					if out.firstErr == nil {
						out.firstErr = err
					}
					consecutive++
					if consecutive >= maxConsecutiveFailures {
						out.aborted = true
						cancel()
					}
				}
				d2 := done
				mu.Unlock()
				if progress != nil {
					progress(d2)
				}
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	if out.started < n && !out.aborted && ctx.Err() == nil {
		out.truncated = true
	}
	return out
}
