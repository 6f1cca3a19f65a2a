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
	for _, tc := range []struct {
		name        string
		cur         int
		busy        float64
		calm        int
		next, calm2 int
	}{
		{"idle at one P stays", 1, 0.0, 0, 1, 0},
		{"busy one P grows", 1, 0.75, 0, 2, 0},
		{"just below the threshold stays", 1, 0.74, 0, 1, 0},
		{"two busy Ps grow", 2, 1.6, 0, 3, 0},
		{"no more than Max", 4, 4.0, 0, 4, 0},
		{"between the thresholds: steady, calm reset", 2, 0.7, 5, 2, 0},
		{"low load counts a calm window", 2, 0.5, 3, 2, 4},
		{"the tenth calm window gives a P back", 2, 0.2, 9, 1, 0},
		{"a load that needs its Ps keeps them", 3, 1.1, 9, 3, 0},
		{"never below one P", 1, 0.0, 50, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, calm := c.step(tc.cur, tc.busy, tc.calm)
			assert.Equal(t, tc.next, next, "Ps")
			assert.Equal(t, tc.calm2, calm, "calm windows")
		})
	}
}

// fakeProcess is a process whose CPU use per second of (synctest) time the test sets.
type fakeProcess struct {
	mu    sync.Mutex
	load  float64 // CPUs in use
	used  time.Duration
	since time.Time
	procs []int // every value Set was called with
}

func (p *fakeProcess) setLoad(cpus float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance()
	p.load = cpus
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

// The controller follows a load that rises and falls: one P at start and while idle, one
// more within a window of the Ps being busy, and one fewer only after ten calm windows.
func TestControllerFollowsLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakeProcess{since: time.Now()}
		var changes []string
		c := Start(Config{Max: 4, CPUTime: p.cpuTime, Set: p.set, OnChange: func(from, to int, _ float64) {
			changes = append(changes, fmt.Sprintf("%d->%d", from, to))
		}})
		require.NotNil(t, c)
		require.Equal(t, []int{1}, p.procs, "starts at one P")

		wait := func(d time.Duration) {
			time.Sleep(d)
			synctest.Wait()
		}
		wait(3*time.Second + time.Millisecond)
		assert.Equal(t, 1, p.current(), "idle: one P")

		p.setLoad(0.9) // one P nearly full
		wait(time.Second)
		assert.Equal(t, 2, p.current(), "a busy P gets a second within a window")

		p.setLoad(1.8) // two Ps nearly full
		wait(time.Second)
		assert.Equal(t, 3, p.current())

		p.setLoad(1.2) // fits three Ps, not two at half: stays
		wait(20 * time.Second)
		assert.Equal(t, 3, p.current(), "between the thresholds it does not flap")

		p.setLoad(0.3)
		wait(9 * time.Second)
		assert.Equal(t, 3, p.current(), "nine calm windows: not yet")
		wait(time.Second)
		assert.Equal(t, 2, p.current(), "the tenth gives one back")
		wait(10 * time.Second)
		assert.Equal(t, 1, p.current(), "and ten more the next")

		c.Stop()
		c.Stop() // idempotent
		assert.Equal(t, 4, p.current(), "Stop gives the runtime's Ps back")
		assert.Equal(t, []string{"1->2", "2->3", "3->2", "2->1"}, changes, "OnChange is told of each change, not of Stop")
	})
}

func TestStartWithOneCPUDoesNothing(t *testing.T) {
	p := &fakeProcess{since: time.Now()}
	c := Start(Config{Max: 1, CPUTime: p.cpuTime, Set: p.set})
	assert.Nil(t, c)
	assert.Empty(t, p.procs)
	c.Stop() // safe on nil
}
