package soapdemo

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func ms(v ...int) []time.Duration {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x) * time.Millisecond
	}
	return d
}

func TestSummarize(t *testing.T) {
	oneToHundred := make([]int, 100)
	for i := range oneToHundred {
		oneToHundred[i] = 100 - i // reversed: Summarize must sort
	}
	oneToThousand := make([]int, 1000)
	for i := range oneToThousand {
		oneToThousand[i] = i + 1
	}
	tests := []struct {
		name string
		in   []time.Duration
		want Stats
	}{
		{"empty", nil, Stats{}},
		{"one", ms(7), Stats{N: 1, Min: 7 * time.Millisecond, Mean: 7 * time.Millisecond, Max: 7 * time.Millisecond,
			P50: 7 * time.Millisecond, P90: 7 * time.Millisecond, P99: 7 * time.Millisecond}},
		{"two", ms(10, 20), Stats{N: 2, Min: 10 * time.Millisecond, Mean: 15 * time.Millisecond, Max: 20 * time.Millisecond,
			P50: 10 * time.Millisecond, P90: 20 * time.Millisecond, P99: 20 * time.Millisecond}},
		{"1..100", ms(oneToHundred...), Stats{N: 100, Min: 1 * time.Millisecond, Mean: 50500 * time.Microsecond,
			Max: 100 * time.Millisecond, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond}},
		{"1..1000", ms(oneToThousand...), Stats{N: 1000, Min: 1 * time.Millisecond, Mean: 500500 * time.Microsecond,
			Max: 1000 * time.Millisecond, P50: 500 * time.Millisecond, P90: 900 * time.Millisecond, P99: 990 * time.Millisecond}},
		{"outlier", ms(1, 1, 1, 1, 1, 1, 1, 1, 1, 1000), Stats{N: 10, Min: 1 * time.Millisecond, Mean: 100900 * time.Microsecond,
			Max: 1000 * time.Millisecond, P50: 1 * time.Millisecond, P90: 1 * time.Millisecond, P99: 1000 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			require.Equal(t, tt.want, Summarize(in))
			require.Equal(t, tt.in, in, "input must not be modified")
		})
	}
}

func TestRunCalls(t *testing.T) {
	tests := []struct {
		n, concurrency  int
		wantMaxInFlight int
	}{
		{n: 100, concurrency: 8, wantMaxInFlight: 8},
		{n: 5, concurrency: 50, wantMaxInFlight: 5},
		{n: 10, concurrency: 0, wantMaxInFlight: 1},
		{n: 0, concurrency: 4, wantMaxInFlight: 0},
	}
	for _, tt := range tests {
		counts := make([]atomic.Int32, tt.n)
		var inFlight, maxInFlight atomic.Int32
		lat, err := RunCalls(t.Context(), tt.n, tt.concurrency, func(ctx context.Context, i int) error {
			now := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				m := maxInFlight.Load()
				if now <= m || maxInFlight.CompareAndSwap(m, now) {
					break
				}
			}
			counts[i].Add(1)
			time.Sleep(time.Duration(i%3) * time.Millisecond)
			return nil
		})
		require.NoError(t, err)
		require.Len(t, lat, tt.n)
		for i := range counts {
			require.Equal(t, int32(1), counts[i].Load(), "call %d", i)
			require.GreaterOrEqual(t, lat[i], time.Duration(i%3)*time.Millisecond, "latency %d out of order", i)
		}
		require.LessOrEqual(t, maxInFlight.Load(), int32(tt.wantMaxInFlight))
	}

	_, err := RunCalls(t.Context(), -1, 1, func(context.Context, int) error { return nil })
	require.Error(t, err)
}

func TestRunCallsStops(t *testing.T) {
	errBoom := errors.New("boom")
	t.Run("first error", func(t *testing.T) {
		var calls atomic.Int32
		lat, err := RunCalls(t.Context(), 10000, 4, func(ctx context.Context, i int) error {
			calls.Add(1)
			if i == 10 {
				return errBoom
			}
			// Others wait for the cancel the error causes.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(i%4) * time.Millisecond):
				return nil
			}
		})
		require.ErrorIs(t, err, errBoom)
		require.ErrorContains(t, err, "call 10: boom")
		require.Less(t, len(lat), 10000)
		require.Less(t, int(calls.Load()), 10000, "no new calls after the error")
	})
	t.Run("ctx cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var calls, succeeded atomic.Int32
		lat, err := RunCalls(ctx, 10000, 4, func(ctx context.Context, i int) error {
			switch n := calls.Add(1); {
			case n == 20:
				cancel()
			case n > 20:
				// Calls after the cancel wait for it to be seen: instant calls on other
				// workers would otherwise finish the whole run while the one that
				// cancels is descheduled before its cancel.
				<-ctx.Done()
				return ctx.Err()
			}
			succeeded.Add(1)
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Less(t, len(lat), 10000)
		require.Len(t, lat, int(succeeded.Load()), "successful calls are all reported")
	})
}
