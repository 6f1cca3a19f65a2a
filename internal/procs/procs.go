// Package procs fits the Go runtime's GOMAXPROCS to the load a gateway carries.
//
// Why: a gateway spends a few tens of microseconds of CPU per exchange and waits the
// rest of the time. With more Ps than it keeps busy, every goroutine the network makes
// runnable wakes an idle thread (a futex) to look for it, and the thread finds the work
// already taken; those hand-offs were the largest cost left after the runtime's monitor
// (soapgw bench cpu, 2-core VM: GOMAXPROCS=1 took 15-19 % off the CPU per exchange of the
// pair and halved its thread wake-ups, at the same exchanges/s, with 1 and 16 clients,
// for 1 KB and 400 KB messages). One P cannot use a second core, though, so a fixed 1
// would cap a busy gateway. The controller therefore adds a P as soon as the Ps it has
// are nearly all busy, and gives one back after the load has stayed low for a while:
// fast up, slow down, with a gap between the two thresholds so that it does not flap.
//
// CPU is not the only reason for a second P. A goroutine in a long system call (fsync:
// the one-way spool and ledger sync every acknowledgement) keeps its P until the runtime's
// monitor takes it back, up to 10 ms later when the process has been quiet; with one P
// every other goroutine waits that long. The one-way path on one P: client p50 10 ms
// instead of 4 ms, with 16 clients. So the controller also watches how long runnable
// goroutines wait for a P (the runtime's /sched/latencies histogram): a window in which
// many waited a millisecond or more adds a P and makes it the floor from then on, because
// one P fewer would stall the same way again. A caller that knows its work blocks in
// such calls sets Min to 2 from the start.
//
// Only cmd wires it, and only when the operator has not set GOMAXPROCS.
package procs

import (
	"sync"
	"time"
)

// Config sets the controller. The zero value of a field takes its default.
type Config struct {
	// Max is the most Ps (the runtime's own choice at start: the CPUs, or the
	// container's CPU limit). At most 1: the controller does nothing.
	Max int
	// Min is the fewest Ps, and where the controller starts (default 1; at most Max).
	Min int
	// Interval is the window over which load and waits are measured (default 1 s).
	Interval time.Duration
	// UpAt: one P more when the process used at least UpAt x its Ps of CPU over a window
	// (default 0.75).
	UpAt float64
	// DownAt and DownAfter: one P fewer after DownAfter windows in a row (default 10)
	// that used at most DownAt x (Ps - 1) of CPU (default 0.5), i.e. when the load would
	// fit one P fewer at half its capacity, and in which goroutines did not stall.
	DownAt    float64
	DownAfter int
	// StallWait and StallShare: a window stalls when at least StallShare (default 5 %)
	// of at least 50 goroutine waits for a P lasted StallWait or longer (default 1 ms).
	// A stall adds a P and raises Min to it.
	StallWait  time.Duration
	StallShare float64

	// CPUTime is the process's CPU time so far (default: getrusage, user + system).
	CPUTime func() time.Duration
	// Waits tells the waits for a P since its previous call: how many, and how many
	// lasted at least the given time (default: the runtime's /sched/latencies).
	Waits func(atLeast time.Duration) (n, long uint64)
	// Set applies a new number of Ps (runtime.GOMAXPROCS in production).
	Set func(n int)
	// OnChange, if set, is told of each change, why ("busy", "stalls" or "calm"), and the
	// CPUs the process used over the window.
	OnChange func(from, to int, why string, busy float64)
}

// minWaits is the fewest waits in a window for its stall share to count.
const minWaits = 50

func (c *Config) defaults() {
	if c.Min < 1 {
		c.Min = 1
	}
	c.Min = min(c.Min, max(c.Max, 1))
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.UpAt <= 0 {
		c.UpAt = 0.75
	}
	if c.DownAt <= 0 {
		c.DownAt = 0.5
	}
	if c.DownAfter <= 0 {
		c.DownAfter = 10
	}
	if c.StallWait <= 0 {
		c.StallWait = time.Millisecond
	}
	if c.StallShare <= 0 {
		c.StallShare = 0.05
	}
	if c.CPUTime == nil {
		c.CPUTime = processCPUTime // nil where the platform has none
	}
	if c.Waits == nil {
		c.Waits = newSchedWaits().window
	}
}

// window is what one interval measured.
type window struct {
	busy        float64 // CPUs used
	waits, long uint64  // goroutine waits for a P, and those of StallWait or longer
}

func (c *Config) stalled(w window) bool {
	return w.waits >= minWaits && float64(w.long) >= c.StallShare*float64(w.waits)
}

// state is the controller's: the Ps, their floor, and the calm windows in a row.
type state struct {
	procs, floor, calm int
}

// step decides the next state from a window; why names a change ("" for none).
func (c *Config) step(s state, w window) (next state, why string) {
	stalled := c.stalled(w)
	switch {
	case s.procs < c.Max && stalled:
		return state{procs: s.procs + 1, floor: max(s.floor, s.procs+1)}, "stalls"
	case s.procs < c.Max && w.busy >= c.UpAt*float64(s.procs):
		return state{procs: s.procs + 1, floor: s.floor}, "busy"
	case s.procs > s.floor && !stalled && w.busy <= c.DownAt*float64(s.procs-1):
		if s.calm+1 >= c.DownAfter {
			return state{procs: s.procs - 1, floor: s.floor}, "calm"
		}
		return state{procs: s.procs, floor: s.floor, calm: s.calm + 1}, ""
	}
	return state{procs: s.procs, floor: s.floor}, ""
}

// Controller runs the loop; Stop ends it.
type Controller struct {
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// Start sets Min Ps and starts adapting. It returns nil (and changes nothing) when Max is
// at most 1, Set is nil, or the process's CPU time cannot be read here.
func Start(cfg Config) *Controller {
	cfg.defaults()
	if cfg.Max <= 1 || cfg.Set == nil || cfg.CPUTime == nil {
		return nil
	}
	c := &Controller{stop: make(chan struct{}), done: make(chan struct{})}
	cfg.Set(cfg.Min)
	go c.run(cfg)
	return c
}

func (c *Controller) run(cfg Config) {
	defer close(c.done)
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	s := state{procs: cfg.Min, floor: cfg.Min}
	last, lastAt := cfg.CPUTime(), time.Now()
	cfg.Waits(cfg.StallWait) // from now on
	for {
		select {
		case <-c.stop:
			// Leave the process as the runtime would have set it.
			if s.procs != cfg.Max {
				cfg.Set(cfg.Max)
			}
			return
		case now := <-t.C:
			used := cfg.CPUTime()
			wall := now.Sub(lastAt)
			if wall <= 0 {
				continue
			}
			var w window
			w.busy = float64(used-last) / float64(wall)
			w.waits, w.long = cfg.Waits(cfg.StallWait)
			last, lastAt = used, now
			next, why := cfg.step(s, w)
			if next.procs != s.procs {
				cfg.Set(next.procs)
				if cfg.OnChange != nil {
					cfg.OnChange(s.procs, next.procs, why, w.busy)
				}
			}
			s = next
		}
	}
}

// Stop ends the loop and gives the process its Max Ps back. Safe on a nil Controller.
func (c *Controller) Stop() {
	if c == nil {
		return
	}
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.done
}
