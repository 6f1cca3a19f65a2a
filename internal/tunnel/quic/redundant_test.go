package quic

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// countingEcho answers "echo:" + the request and counts executions per request.
type countingEcho struct {
	mu   sync.Mutex
	runs map[string]int
}

func (e *countingEcho) handle(_ context.Context, st *Stream) {
	defer st.Close()
	req, err := io.ReadAll(st)
	if err != nil {
		return
	}
	e.mu.Lock()
	e.runs[string(req)]++
	e.mu.Unlock()
	_, _ = st.Write(append([]byte("echo:"), req...))
	_ = st.CloseWrite()
}

// TestUDPCopyStartsExchangeWhoseStreamIsLost: with redundancy on, a request whose stream
// packet is lost reaches the origin in its copy; the origin runs the exchange at once and
// answers in a copy too, long before QUIC's probe timeout would have resent the stream.
// When the stream arrives later it is attached, not run again.
func TestUDPCopyStartsExchangeWhoseStreamIsLost(t *testing.T) {
	p := newPair(t, pairOptions{copies: RedundancyOn})
	echo := &countingEcho{runs: map[string]int{}}
	p.setHandler(echo.handle)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 5 {
		_, err := p.call(ctx, soapMessage(i, 700))
		require.NoError(t, err)
	}
	copiesOut := func() float64 {
		return p.counter(t, "soapgw_udp_copies_total", "peer", "origin", "result", "sent") +
			p.counter(t, "soapgw_udp_copies_total", "peer", "origin", "result", "skipped")
	}
	// Each attempt loses one request's stream data; its copy leaves 2 ms later, QUIC's
	// resend after a probe timeout (25 ms and more). On a starved machine the resend can
	// still come first: that attempt proves nothing, and the next one tries again.
	started, tookCopy := false, false
	for attempt := 0; attempt < 8 && !tookCopy; attempt++ {
		// Every earlier copy has left (or was skipped): none is in flight to be taken
		// for the request's stream data below.
		out := float64(5 + attempt)
		require.Eventually(t, func() bool { return copiesOut() == out }, 5*time.Second, time.Millisecond)
		early := p.counter(t, "soapgw_udp_copies_total", "peer", "edge", "result", "early_start")
		used := p.counter(t, "soapgw_udp_copies_total", "peer", "origin", "result", "used")
		// The first packet of the request's size (about 750 bytes): its stream data, sent
		// before its copy. Path MTU probes (1,200 bytes and more) and acknowledgements pass.
		var dropped atomic.Bool
		p.edgeSock.Load().setDrop(func(b []byte) bool {
			return len(b) > 500 && len(b) < 1000 && dropped.CompareAndSwap(false, true)
		})
		req := soapMessage(99+attempt, 700)
		resp, err := p.call(ctx, req)
		require.NoError(t, err)
		require.Equal(t, append([]byte("echo:"), req...), resp)
		if !dropped.Load() {
			// No packet of that size left alone: on a busy machine the stream data can
			// share a packet with its copy or an acknowledgement. Nothing was lost, so
			// this attempt proves nothing either.
			p.edgeSock.Load().setDrop(nil)
			continue
		}
		if p.counter(t, "soapgw_udp_copies_total", "peer", "edge", "result", "early_start") == early+1 {
			started = true
			// The answer's copy leaves at once; the stream's answer only after QUIC's
			// resend of the request (a probe timeout later). With the race detector on a
			// busy machine the copy can still come second (counted late): the edge took
			// the stream's answer, which proves nothing here, and the next attempt tries
			// again.
			tookCopy = p.counter(t, "soapgw_udp_copies_total", "peer", "origin", "result", "used") == used+1
		}
	}
	require.True(t, started, "the origin started an exchange from its copy")
	require.True(t, tookCopy, "the edge took the answer's copy")
	p.edgeSock.Load().setDrop(nil)

	// More calls: the late stream is attached, never run; everything stays in step.
	for i := range 5 {
		_, err := p.call(ctx, soapMessage(200+i, 700))
		require.NoError(t, err)
	}
	echo.mu.Lock()
	defer echo.mu.Unlock()
	for r, n := range echo.runs {
		require.Equal(t, 1, n, "request %.200q ran %d times", r, n)
	}
}

// TestUDPCopiesUnderLossExactlyOnce: random loss both ways of the edge's packets, copies on,
// sequential and concurrent callers, token-coded and not: every call answered with its
// own echo, every request run exactly once, the codec state never out of step.
func TestUDPCopiesUnderLossExactlyOnce(t *testing.T) {
	for _, codecs := range []bool{false, true} {
		t.Run(fmt.Sprintf("codecs=%v", codecs), func(t *testing.T) {
			p := newPair(t, pairOptions{copies: RedundancyOn, codecs: codecs})
			echo := &countingEcho{runs: map[string]int{}}
			p.setHandler(echo.handle)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := p.call(ctx, soapMessage(0, 300)) // connection up before the loss starts
			require.NoError(t, err)
			var mu sync.Mutex
			rng := rand.New(rand.NewPCG(7, 9))
			p.edgeSock.Load().setDrop(func([]byte) bool {
				mu.Lock()
				defer mu.Unlock()
				return rng.IntN(100) < 8
			})
			p.callConcurrently(t, ctx, 4, 60, func(w, i int) []byte { return soapMessage(w*1000+i+1, 200+50*w) })
			echo.mu.Lock()
			defer echo.mu.Unlock()
			require.Len(t, echo.runs, 241)
			for r, n := range echo.runs {
				require.Equal(t, 1, n, "request %.200q ran %d times", r, n)
			}
			require.Zero(t, p.counter(t, "soapgw_udp_codec_nacks_total"))
			t.Logf("copies: %v used by origin, %v used by edge, %v early starts",
				p.counter(t, "soapgw_udp_copies_total", "peer", "edge", "result", "used"),
				p.counter(t, "soapgw_udp_copies_total", "peer", "origin", "result", "used"),
				p.counter(t, "soapgw_udp_copies_total", "peer", "edge", "result", "early_start"))
		})
	}
}

// TestUDPRedundancyAutoCopiesOnlyWhileLossy: with redundancy auto, a clean path carries
// each message once; when the edge's packets start to be lost, the origin's RECEIVED
// reports show it and the edge sends its small messages twice, while the origin, whose
// packets all arrive, keeps sending its answers once. Every request runs exactly once.
func TestUDPRedundancyAutoCopiesOnlyWhileLossy(t *testing.T) {
	p := newPair(t, pairOptions{copies: RedundancyAuto})
	echo := &countingEcho{runs: map[string]int{}}
	p.setHandler(echo.handle)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	copiesSent := func(peer string) float64 {
		return p.counter(t, "soapgw_udp_copies_total", "peer", peer, "result", "sent") +
			p.counter(t, "soapgw_udp_copies_total", "peer", peer, "result", "skipped")
	}
	// Clean: several reports' worth of exchanges (reports go at most once a second).
	calls := 0
	for start := time.Now(); time.Since(start) < 3*time.Second; calls++ {
		_, err := p.call(ctx, soapMessage(calls, 300))
		require.NoError(t, err)
	}
	require.Zero(t, copiesSent("origin"), "no copies from the edge on a clean path")
	require.Zero(t, copiesSent("edge"), "no copies from the origin on a clean path")
	require.Zero(t, p.counter(t, "soapgw_udp_copying"))

	// 5 % of the edge's packets lost: the edge turns copies on within seconds.
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(3, 5))
	p.edgeSock.Load().setDrop(func([]byte) bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(100) < 5
	})
	for deadline := time.Now().Add(60 * time.Second); p.counter(t, "soapgw_udp_copying", "peer", "origin") == 0; calls++ {
		require.True(t, time.Now().Before(deadline), "the edge never turned copies on (loss estimate %v)",
			p.counter(t, "soapgw_udp_loss_ratio", "peer", "origin"))
		_, err := p.call(ctx, soapMessage(calls, 300))
		require.NoError(t, err)
	}
	ratio := p.counter(t, "soapgw_udp_loss_ratio", "peer", "origin")
	require.InDelta(t, 0.05, ratio, 0.045, "the edge's estimate of its own loss")
	for i := range 50 {
		_, err := p.call(ctx, soapMessage(calls+i, 300))
		require.NoError(t, err)
	}
	calls += 50
	// Copies leave from their own goroutine a few ms after their message (and are counted
	// then), so a busy host may count them after the calls returned.
	require.Eventually(t, func() bool { return copiesSent("origin") > 0 }, 10*time.Second, time.Millisecond,
		"the edge sends copies")
	// The origin's packets are not lost: it copies only answers to exchanges it started
	// from a request's copy (the copy is then the answer's only way out).
	require.Eventually(t, func() bool {
		return p.counter(t, "soapgw_udp_copies_total", "peer", "edge", "result", "early_start") == copiesSent("edge")
	}, 10*time.Second, time.Millisecond, "the origin copies only answers of exchanges started from a copy")
	require.Zero(t, p.counter(t, "soapgw_udp_copying", "peer", "edge"))
	require.Less(t, p.counter(t, "soapgw_udp_loss_ratio", "peer", "edge"), copiesOffLoss, "packets in flight are not loss")

	echo.mu.Lock()
	defer echo.mu.Unlock()
	require.Len(t, echo.runs, calls)
	for r, n := range echo.runs {
		require.Equal(t, 1, n, "request %.200q ran %d times", r, n)
	}
}

// TestCopyNowNeverCopiesBulk: redundancy on copies interactive messages, never bulk ones
// (one-way deliveries); auto copies only while the loss meter says so; off never.
func TestCopyNowNeverCopiesBulk(t *testing.T) {
	for _, tt := range []struct {
		mode        Redundancy
		lossy, bulk bool
		want        bool
	}{
		{RedundancyOn, false, false, true},
		{RedundancyOn, false, true, false},
		{RedundancyAuto, false, false, false},
		{RedundancyAuto, true, false, true},
		{RedundancyAuto, true, true, false},
		{RedundancyOff, true, false, false},
	} {
		var c conn
		c.copyMode.Store(uint32(tt.mode))
		c.loss.copying.Store(tt.lossy)
		require.Equal(t, tt.want, c.copyNow(tt.bulk), "mode %d lossy %v bulk %v", tt.mode, tt.lossy, tt.bulk)
	}
}

// TestUDPWaitsCopiesExplainKeepTheWindowWide: a reported wait turns the auto window strict,
// unless this side is sending copies and the wait is no longer than a copy explains; a
// longer wait turns it strict even then.
func TestUDPWaitsCopiesExplainKeepTheWindowWide(t *testing.T) {
	const long = 200 * time.Millisecond // more than copies explain
	for _, tc := range []struct {
		name  string
		mode  Redundancy
		waits []time.Duration
		apart uint64 // sequenced messages sent between two waits
		width uint64
	}{
		{"no copies: strict", RedundancyOff, []time.Duration{6 * time.Millisecond}, 0, 1},
		{"no copies, long wait: strict", RedundancyOff, []time.Duration{long}, 0, 1},
		{"copies, short wait: wide", RedundancyOn, []time.Duration{6 * time.Millisecond}, 0, autoWindowWide},
		{"copies, short waits often: wide", RedundancyOn, []time.Duration{6 * time.Millisecond, 14 * time.Millisecond, 9 * time.Millisecond}, 1, autoWindowWide},
		{"copies, one long wait: wide", RedundancyOn, []time.Duration{long}, 0, autoWindowWide},
		{"copies, long waits far apart: wide", RedundancyOn, []time.Duration{long, long, long}, longWaitSpacing, autoWindowWide},
		{"copies, long waits close together: strict", RedundancyOn, []time.Duration{long, long}, longWaitSpacing - 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOptions{copies: tc.mode})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := p.call(ctx, soapMessage(1, 300))
			require.NoError(t, err)
			c := p.edgeConns()[0]
			require.EqualValues(t, autoWindowWide, c.window.size(), "a clean start is wide")
			for i, d := range tc.waits {
				if i > 0 { // as if that many sequenced messages had been sent and acknowledged
					c.enc.mu.Lock()
					c.enc.sent += tc.apart
					c.enc.acked += tc.apart
					c.enc.mu.Unlock()
				}
				c.onWaited(d)
			}
			require.Equal(t, tc.width, c.window.size())
		})
	}
}

// TestUDPCopiesTurningOnWidenTheWindow: with redundancy auto, waits before copies began
// made the window strict; when copies turn on it is wide again (for 30 s it stayed strict,
// most of a long run on routed-wlan with 16 clients).
func TestUDPCopiesTurningOnWidenTheWindow(t *testing.T) {
	p := newPair(t, pairOptions{copies: RedundancyAuto})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.call(ctx, soapMessage(1, 300))
	require.NoError(t, err)
	c := p.edgeConns()[0]
	c.onWaited(6 * time.Millisecond) // not copying yet: strict
	require.EqualValues(t, 1, c.window.size())
	c.loss.copying.Store(true)
	c.copyTransition(true, 0.01)
	require.EqualValues(t, autoWindowWide, c.window.size())
	c.onWaited(6 * time.Millisecond) // copies explain it now
	require.EqualValues(t, autoWindowWide, c.window.size())
}

// TestCopiesAbsorbWait: twice a copy's delay and 10 ms.
func TestCopiesAbsorbWait(t *testing.T) {
	ms := time.Millisecond
	require.True(t, copiesAbsorbWait(14*ms, 14*ms)) // routed-wlan: copies 2 ms apart, up to 14 ms
	require.False(t, copiesAbsorbWait(15*ms, 14*ms))
	require.True(t, copiesAbsorbWait(47*ms, 150*ms))  // 3g: 18.75 ms apart, up to 47.5 ms
	require.False(t, copiesAbsorbWait(60*ms, 820*ms)) // gprs: 20 ms apart (the cap), up to 50 ms
}

// TestUDPCopiesCarryAcknowledgements: with copies both ways, sequential exchanges over a
// 20 ms path are acknowledged in the packets both sides send anyway. Without the CARRY
// frame a copy's packet carries no acknowledgement, so the arrival of each next message
// (the second packet since the last acknowledgement) made QUIC send one in a packet of its
// own, just before the answer: two such packets per exchange, every time. With it, none
// as a rule; a starved scheduler can split a copy from its CARRY frame or let a copy's wait
// run out, so a round counts as passed at under one such packet per exchange, and a busy
// machine gets a few rounds.
func TestUDPCopiesCarryAcknowledgements(t *testing.T) {
	p := newPair(t, pairOptions{copies: RedundancyOn, delay: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	call := func(i int) {
		got, err := p.call(ctx, soapMessage(i, 300))
		require.NoError(t, err)
		require.Equal(t, "echo:"+string(soapMessage(i, 300)), string(got))
	}
	for i := range 10 { // the RTT estimate settles; the connection's setup packets pass
		call(i)
	}
	edge, origin := p.edgeSock.Load(), p.originSock
	copies := func() float64 {
		return p.counter(t, "soapgw_udp_copies_total", "peer", "origin", "result", "sent") +
			p.counter(t, "soapgw_udp_copies_total", "peer", "edge", "result", "sent")
	}
	const calls, rounds = 40, 6
	var small []int64
	for r := range rounds {
		before, sent := edge.small.Load()+origin.small.Load(), copies()
		for i := range calls {
			call(10 + r*calls + i)
		}
		require.GreaterOrEqual(t, copies()-sent, float64(calls), "copies went both ways")
		small = append(small, edge.small.Load()+origin.small.Load()-before)
		if small[r] < calls {
			return
		}
	}
	t.Fatalf("packets without a message (an acknowledgement or a control frame alone) per %d exchanges, each round: %v", calls, small)
}

func TestAwaitedCopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a awaitedCopy
		a.expect(4)
		require.Nil(t, a.holding(1), "no copy ever came: the peer does not copy")

		a.got(0) // the peer copies
		a.expect(4)
		ch := a.holding(1)
		require.NotNil(t, ch, "the copy of 4 is on its way")
		require.Nil(t, a.holding(2), "no wait while more exchanges are open")
		a.got(8) // another stream's copy
		require.NotNil(t, a.holding(1))
		a.got(4)
		require.Nil(t, a.holding(1))
		select {
		case <-ch:
		default:
			t.Fatal("the waiter was not woken")
		}

		a.expect(12)
		ch = a.holding(1)
		a.expect(16) // a newer message: its copy is awaited now, the old waiter let go
		select {
		case <-ch:
		default:
			t.Fatal("the waiter on 12 was not let go")
		}
		a.got(16)

		a.got(20) // the copy came before its stream's message
		a.expect(20)
		require.Nil(t, a.holding(1))

		time.Sleep(peerCopiesFor + time.Millisecond) // the peer stopped copying
		a.expect(24)
		require.Nil(t, a.holding(1))
	})
}
