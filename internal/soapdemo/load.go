package soapdemo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Stats summarizes call latencies. Percentiles use the nearest-rank
// method: P90 is the smallest latency that at least 90% of calls did not
// exceed, always one of the measured values.
type Stats struct {
	N              int
	Min, Mean, Max time.Duration
	P50, P90, P99  time.Duration
}

// Summarize computes Stats over latencies, which it does not modify. An
// empty input gives the zero Stats.
func Summarize(latencies []time.Duration) Stats {
	n := len(latencies)
	if n == 0 {
		return Stats{}
	}
	s := slices.Clone(latencies)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	rank := func(p int) time.Duration { return s[(p*n+99)/100-1] } // ceil(p*n/100)-1
	return Stats{
		N:    n,
		Min:  s[0],
		Mean: sum / time.Duration(n),
		Max:  s[n-1],
		P50:  rank(50),
		P90:  rank(90),
		P99:  rank(99),
	}
}

// RunCalls makes n calls, call(ctx, 0) to call(ctx, n-1), from at most
// concurrency goroutines (values below 1 mean 1), each taking the next
// index as it becomes free. It returns the latency of each call, in index
// order.
//
// The first failing call stops the run: calls in progress see ctx
// cancelled, no new ones start, and RunCalls returns the latencies of the
// calls that succeeded (still in index order) with an error naming the
// failed index. Cancelling ctx stops the run the same way. RunCalls returns
// only after every call it started has returned.
func RunCalls(ctx context.Context, n, concurrency int, call func(ctx context.Context, i int) error) (latencies []time.Duration, err error) {
	if n < 0 {
		return nil, fmt.Errorf("soapdemo: run calls: negative n %d", n)
	}
	concurrency = max(min(concurrency, n), 1)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	lat := make([]time.Duration, n)
	ok := make([]bool, n) // each index is written by exactly one goroutine
	var next atomic.Int64
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				start := time.Now()
				if err := call(ctx, i); err != nil {
					cancel(fmt.Errorf("call %d: %w", i, err))
					return
				}
				lat[i] = time.Since(start)
				ok[i] = true
			}
		})
	}
	wg.Wait()

	latencies = lat[:0]
	for i, d := range lat {
		if ok[i] {
			latencies = append(latencies, d)
		}
	}
	if len(latencies) == n {
		return latencies, nil
	}
	err = context.Cause(ctx)
	if err == nil { // unreachable: a call is missing only after a cancel
		err = errors.New("calls missing")
	}
	return latencies, fmt.Errorf("soapdemo: run calls: %d of %d done: %w", len(latencies), n, err)
}
