package procs

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStep(t *testing.T) {
	c := Config{Max: 4}
	c.defaults()
	calmWaits := window{waits: 1000, long: 10} // 1 % of waits long: no stall
	stall := window{waits: 1000, long: 50}     // 5 %: a stall
	for _, tc := range []struct {
		name string
		s    state
		w    window
		next state
		why  string
	}{
		{"idle at one P stays", state{1, 1, 0}, window{}, state{1, 1, 0}, ""},
		{"busy one P grows", state{1, 1, 0}, window{busy: 0.75}, state{2, 1, 0}, "busy"},
		{"just below the threshold stays", state{1, 1, 0}, window{busy: 0.74}, state{1, 1, 0}, ""},
		{"two busy Ps grow", state{2, 1, 0}, window{busy: 1.6}, state{3, 1, 0}, "busy"},
		{"no more than Max", state{4, 1, 0}, window{busy: 4}, state{4, 1, 0}, ""},
		{"between the thresholds: steady, calm reset", state{2, 1, 5}, window{busy: 0.7}, state{2, 1, 0}, ""},
		{"low load counts a calm window", state{2, 1, 3}, window{busy: 0.5}, state{2, 1, 4}, ""},
		{"the tenth calm window gives a P back", state{2, 1, 9}, window{busy: 0.2}, state{1, 1, 0}, "calm"},
		{"a load that needs its Ps keeps them", state{3, 1, 9}, window{busy: 1.1}, state{3, 1, 0}, ""},
		{"never below one P", state{1, 1, 50}, window{}, state{1, 1, 0}, ""},
		{"stalls add a P and raise the floor", state{1, 1, 0}, stall, state{2, 2, 0}, "stalls"},
		{"stalls at Max change nothing", state{4, 2, 0}, stall, state{4, 2, 0}, ""},
		{"never below the floor", state{2, 2, 9}, window{}, state{2, 2, 0}, ""},
		{"above the floor, calm gives back", state{3, 2, 9}, calmWaits, state{2, 2, 0}, "calm"},
		{"a stalled window is not calm", state{3, 2, 9}, window{waits: 1000, long: 60, busy: 0.1}, state{4, 4, 0}, "stalls"},
		{"too few waits to judge", state{1, 1, 0}, window{waits: minWaits - 1, long: minWaits - 1}, state{1, 1, 0}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, why := c.step(tc.s, tc.w)
			assert.Equal(t, tc.next, next)
			assert.Equal(t, tc.why, why)
		})
	}
}

// fakeProcess is a process whose CPU use per second of (synctest) time, and whose
// goroutines' waits for a P, the test sets.
type fakeProcess struct {
	mu          sync.Mutex
	load        float64 // CPUs in use
	waits, long uint64  // per window
	used        time.Duration
	since       time.Time
	procs       []int // every value Set was called with
}

func (p *fakeProcess) setLoad(cpus float64, waits, long uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance()
	p.load, p.waits, p.long = cpus, waits, long
}

func (p *fakeProcess) advance() {
	now := time.Now()
	p.used += time.Duration(p.load * float64(now.Sub(p.since)))
	p.since = now
}

func (p *fakeProcess) cpuTime() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance()
	return p.used
}

func (p *fakeProcess) schedWaits(time.Duration) (n, long uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waits, p.long
}

func (p *fakeProcess) set(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.procs = append(p.procs, n)
}

func (p *fakeProcess) current() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.procs[len(p.procs)-1]
}

// The controller follows a load that rises and falls: Min Ps at start and while idle,
// one more within a window of the Ps being busy or of goroutines stalling, one fewer only
// after ten calm windows, and never fewer than stalls showed were needed.
func TestControllerFollowsLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakeProcess{since: time.Now()}
		var changes []string
		c := Start(Config{Max: 4, CPUTime: p.cpuTime, Waits: p.schedWaits, Set: p.set, OnChange: func(from, to int, why string, _ float64) {
			changes = append(changes, fmt.Sprintf("%d->%d %s", from, to, why))
		}})
		require.NotNil(t, c)
		require.Equal(t, []int{1}, p.procs, "starts at one P")

		wait := func(d time.Duration) {
			time.Sleep(d)
			synctest.Wait()
		}
		wait(3*time.Second + time.Millisecond)
		assert.Equal(t, 1, p.current(), "idle: one P")

		p.setLoad(0.9, 0, 0) // one P nearly full
		wait(time.Second)
		assert.Equal(t, 2, p.current(), "a busy P gets a second within a window")

		p.setLoad(1.8, 0, 0) // two Ps nearly full
		wait(time.Second)
		assert.Equal(t, 3, p.current())

		p.setLoad(1.2, 0, 0) // fits three Ps, not two at half: stays
		wait(20 * time.Second)
		assert.Equal(t, 3, p.current(), "between the thresholds it does not flap")

		p.setLoad(0.3, 0, 0)
		wait(9 * time.Second)
		assert.Equal(t, 3, p.current(), "nine calm windows: not yet")
		wait(time.Second)
		assert.Equal(t, 2, p.current(), "the tenth gives one back")
		wait(10 * time.Second)
		assert.Equal(t, 1, p.current(), "and ten more the next")

		p.setLoad(0.3, 1000, 200) // a fifth of the waits a millisecond or more
		wait(time.Second)
		assert.Equal(t, 2, p.current(), "stalls add a P")
		p.setLoad(0.3, 1000, 0) // with two Ps nothing stalls
		wait(60 * time.Second)
		assert.Equal(t, 2, p.current(), "and keep it: one fewer would stall again")

		c.Stop()
		c.Stop() // idempotent
		assert.Equal(t, 4, p.current(), "Stop gives the runtime's Ps back")
		assert.Equal(t, []string{"1->2 busy", "2->3 busy", "3->2 calm", "2->1 calm", "1->2 stalls"}, changes,
			"OnChange is told of each change and why, not of Stop")
	})
}

func TestControllerStartsAtMin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakeProcess{since: time.Now()}
		c := Start(Config{Max: 4, Min: 2, CPUTime: p.cpuTime, Waits: p.schedWaits, Set: p.set})
		require.NotNil(t, c)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		assert.Equal(t, 2, p.current(), "idle, never below Min")
		c.Stop()
		assert.Equal(t, []int{2, 4}, p.procs)
	})
}

func TestStartWithOneCPUDoesNothing(t *testing.T) {
	p := &fakeProcess{since: time.Now()}
	c := Start(Config{Max: 1, CPUTime: p.cpuTime, Set: p.set})
	assert.Nil(t, c)
	assert.Empty(t, p.procs)
	c.Stop() // safe on nil
}

func TestCountWaits(t *testing.T) {
	// Buckets as the runtime gives them: bucket i holds [buckets[i], buckets[i+1]).
	buckets := []float64{0, 1e-4, 5e-4, 1e-3, 4e-3, 16e-3}
	prev := []uint64{10, 5, 0, 0, 0}
	n, long := countWaits(buckets, []uint64{110, 25, 3, 7, 1}, prev, time.Millisecond)
	assert.Equal(t, uint64(100+20+3+7+1), n)
	assert.Equal(t, uint64(7+1), long, "the buckets from 1 ms on")
	assert.Equal(t, []uint64{110, 25, 3, 7, 1}, prev, "the next window starts here")
	n, long = countWaits(buckets, []uint64{110, 25, 3, 7, 1}, prev, time.Millisecond)
	assert.Zero(t, n)
	assert.Zero(t, long)
}

// The runtime exports the histogram this package reads, and goroutines that wait for a
// P show in it.
func TestSchedWaitsReadsTheRuntime(t *testing.T) {
	w := newSchedWaits()
	w.window(time.Millisecond)
	done := make(chan struct{})
	for range 200 { // the runtime records one goroutine wait in eight
		go func() { done <- struct{}{} }()
		<-done
	}
	n, _ := w.window(time.Millisecond)
	assert.Positive(t, n)
}
