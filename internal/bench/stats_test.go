package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func ms2d(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	s := ms2d(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	for _, tc := range []struct {
		p    float64
		want int
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {10, 1}, {11, 2}, {0.1, 1}, {29, 3}, {30, 3}, {31, 4}} {
		require.Equal(t, time.Duration(tc.want)*time.Millisecond, Percentile(s, tc.p), "p%v", tc.p)
	}
	require.Zero(t, Percentile(nil, 50))
	// 1000 values 1..1000: p99 is the 990th.
	var big []time.Duration
	for i := 1; i <= 1000; i++ {
		big = append(big, time.Duration(i))
	}
	require.Equal(t, time.Duration(990), Percentile(big, 99))
	require.Equal(t, time.Duration(999), Percentile(big, 99.9))
}

func TestSummarize(t *testing.T) {
	in := ms2d(9, 1, 5, 3, 7) // unsorted, not modified
	l := Summarize(in)
	require.Equal(t, Latency{N: 5, Min: 1, Mean: 5, P50: 5, P90: 9, P99: 9, Max: 9}, l)
	require.Equal(t, ms2d(9, 1, 5, 3, 7), in)
	require.Equal(t, Latency{}, Summarize(nil))
}

func TestRunCallsCountsFailures(t *testing.T) {
	out := runCalls(context.Background(), 10, 30, 4, time.Second, 10*time.Second, func(_ context.Context, i int) error {
		switch {
		case i%10 == 3:
			return fmt.Errorf("call %d: %w", i, ErrMismatch)
		case i%10 == 7:
			return errors.New("reset")
		}
		return nil
	}, nil)
	require.Equal(t, 30, out.started)
	require.Equal(t, 3, out.mismatches)
	require.Equal(t, 3, out.errors)
	require.Len(t, out.latencies, 24)
	require.False(t, out.truncated)
	require.False(t, out.aborted)
}

func TestRunCallsStopsAfterConsecutiveFailures(t *testing.T) {
	var n atomic.Int64
	out := runCalls(context.Background(), 0, 1000, 1, time.Second, 10*time.Second, func(context.Context, int) error {
		n.Add(1)
		return errors.New("refused")
	}, nil)
	require.True(t, out.aborted)
	require.EqualValues(t, maxConsecutiveFailures, n.Load())
	require.Equal(t, maxConsecutiveFailures, out.errors)
}

func TestRunCallsTruncatesAtTheLimit(t *testing.T) {
	out := runCalls(context.Background(), 0, 1000, 2, time.Second, 100*time.Millisecond, func(ctx context.Context, _ int) error {
		select {
		case <-time.After(20 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil)
	require.True(t, out.truncated)
	require.Less(t, out.started, 1000)
	require.Zero(t, out.errors, "calls cut by the batch limit are not failures")
	require.Len(t, out.latencies, out.started)
}
