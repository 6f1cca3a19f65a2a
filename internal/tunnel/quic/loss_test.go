package quic

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lossRun feeds a lossMeter one report per second: each second this side sends perSecond
// packets, and the peer's count falls short by lost(second) of them (in flight or lost).
type lossRun struct {
	m           lossMeter
	now         time.Time
	sent, recvd uint64
	transitions []bool
}

func newLossRun() *lossRun {
	r := &lossRun{now: time.Unix(1000, 0)}
	r.report(0, 0)
	return r
}

func (r *lossRun) seconds(n, perSecond int, missing func(i int) int) {
	for i := range n {
		r.now = r.now.Add(time.Second)
		r.sent += uint64(perSecond)
		r.recvd += uint64(perSecond - missing(i))
		r.report(r.sent, r.recvd)
	}
}

// report feeds one report and records a switch of copying.
func (r *lossRun) report(sent, received uint64) {
	if r.m.report(r.now, sent, received) {
		r.transitions = append(r.transitions, r.m.copying.Load())
	}
}

func every(k int) func(int) int {
	return func(i int) int {
		if i%k == k-1 {
			return 1
		}
		return 0
	}
}

// TestLossMeterTurnsCopiesOnAndOff: table of paths, what the meter concludes.
func TestLossMeterTurnsCopiesOnAndOff(t *testing.T) {
	for _, tt := range []struct {
		name    string
		run     func(t *testing.T, r *lossRun)
		copying bool
		want    []bool // transitions, in order
		ratio   [2]float64
	}{{
		name:  "clean path",
		run:   func(t *testing.T, r *lossRun) { r.seconds(120, 100, func(int) int { return 0 }) },
		ratio: [2]float64{0, 0},
	}, {
		// A packet or two in flight when a report leaves, none the next time: the
		// difference is not loss, and it cancels out.
		name: "packets in flight",
		run: func(t *testing.T, r *lossRun) {
			r.seconds(120, 100, func(i int) int { return 2 * (i % 2) * (1 - 2*(i%4/2)) })
		},
		ratio: [2]float64{0, 0.001},
	}, {
		name:    "1 % loss",
		run:     func(t *testing.T, r *lossRun) { r.seconds(60, 100, func(int) int { return 1 }) },
		copying: true, want: []bool{true},
		ratio: [2]float64{0.009, 0.011},
	}, {
		name:  "0.1 % loss: not worth copies",
		run:   func(t *testing.T, r *lossRun) { r.seconds(120, 100, every(10)) },
		ratio: [2]float64{0.0005, 0.0015},
	}, {
		// Too few packets to judge: two losses out of 150 stay unjudged.
		name:  "too little evidence",
		run:   func(t *testing.T, r *lossRun) { r.seconds(3, 50, func(i int) int { return i % 2 }) },
		ratio: [2]float64{0, 0},
	}, {
		name: "loss stops: off once the estimate falls, and not before 30 s",
		run: func(t *testing.T, r *lossRun) {
			r.seconds(20, 100, func(int) int { return 2 })
			require.True(t, r.m.copying.Load())
			r.seconds(5, 100, func(int) int { return 0 })
			require.True(t, r.m.copying.Load(), "still on 5 s later")
			r.seconds(120, 100, func(int) int { return 0 })
		},
		want:  []bool{true, false},
		ratio: [2]float64{0, 0.002},
	}, {
		// One client on gprs: 25 packets per report, every 10 s, 2 % of them lost.
		// Weights halving every 20 s alone never gathered 300 packets of evidence.
		name: "slow link, 2 % loss: copies on within minutes",
		run: func(t *testing.T, r *lossRun) {
			for i := range 30 {
				r.now = r.now.Add(10 * time.Second)
				r.sent += 25
				r.recvd += uint64(25 - i%2)
				r.report(r.sent, r.recvd)
			}
		},
		copying: true, want: []bool{true},
		ratio: [2]float64{0.015, 0.025},
	}, {
		name: "a count that goes back is ignored",
		run: func(t *testing.T, r *lossRun) {
			r.seconds(10, 100, func(int) int { return 0 })
			r.now = r.now.Add(time.Second)
			r.report(r.sent+100, 5) // a stale or bogus report
			r.seconds(10, 100, func(int) int { return 0 })
		},
		ratio: [2]float64{0, 0},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			r := newLossRun()
			tt.run(t, r)
			require.Equal(t, tt.copying, r.m.copying.Load())
			require.Equal(t, tt.want, r.transitions)
			require.GreaterOrEqual(t, r.m.lossRatio(), tt.ratio[0])
			require.LessOrEqual(t, r.m.lossRatio(), tt.ratio[1])
		})
	}
}

// TestReporterPacing: a report at most once a second, once 64 packets came, or after 10 s
// if any came at all; never when nothing came.
func TestReporterPacing(t *testing.T) {
	var r reporter
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	p := r.due(at(0), func() uint64 { return 5 })
	require.NotNil(t, p, "the first report goes at once")
	n, _ := binary.Uvarint(p)
	require.EqualValues(t, 5, n)
	for _, tt := range []struct {
		at       time.Duration
		received uint64
		sent     bool
	}{
		{500 * time.Millisecond, 500, false}, // within the second
		{1500 * time.Millisecond, 500, true}, // 495 more packets
		{3 * time.Second, 510, false},        // only 10 more
		{11 * time.Second, 510, false},       // 10 s later still 10 more
		{12 * time.Second, 510, true},        // 10.5 s since the last
		{30 * time.Second, 510, false},       // nothing came: nothing to say
		{31 * time.Second, 574, true},        // 64 more
	} {
		p := r.due(at(tt.at), func() uint64 { return tt.received })
		require.Equal(t, tt.sent, p != nil, "at %v with %d received", tt.at, tt.received)
	}
}
