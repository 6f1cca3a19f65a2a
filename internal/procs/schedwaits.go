package procs

import (
	"runtime/metrics"
	"time"
)

// schedWaits reads the runtime's histogram of how long runnable goroutines waited for a
// P (/sched/latencies:seconds, cumulative since the process started) window by window.
type schedWaits struct {
	sample []metrics.Sample
	prev   []uint64
}

func newSchedWaits() *schedWaits {
	return &schedWaits{sample: []metrics.Sample{{Name: "/sched/latencies:seconds"}}}
}

// window returns the waits recorded since the previous call: how many, and how many fell
// in buckets that start at atLeast or later.
func (w *schedWaits) window(atLeast time.Duration) (n, long uint64) {
	metrics.Read(w.sample)
	if w.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0, 0 // not in this runtime: no stall signal, the CPU rule still works
	}
	h := w.sample[0].Value.Float64Histogram()
	if len(w.prev) != len(h.Counts) {
		w.prev = make([]uint64, len(h.Counts))
	}
	return countWaits(h.Buckets, h.Counts, w.prev, atLeast)
}

// countWaits counts the waits in counts since prev (the same histogram read earlier),
// and those in buckets that start at atLeast or later; prev becomes counts.
func countWaits(buckets []float64, counts, prev []uint64, atLeast time.Duration) (n, long uint64) {
	for i, c := range counts {
		d := c - prev[i]
		n += d
		if buckets[i] >= atLeast.Seconds() {
			long += d
		}
		prev[i] = c
	}
	return n, long
}
