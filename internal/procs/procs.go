// Package procs fits the Go runtime's GOMAXPROCS to the load a gateway carries.
//
// Why: a gateway spends a few tens of microseconds of CPU per exchange and waits the
// rest of the time. With more Ps than it keeps busy, every goroutine the network makes
// runnable wakes an idle thread (a futex) to look for it, and the thread finds the work
// already taken; those hand-offs were the largest cost left after the runtime's monitor
// (soapgw bench cpu, 2-core VM: GOMAXPROCS=1 took 15-19 % off the CPU per exchange of the
// pair and halved its thread wake-ups, at the same exchanges/s, with 1 and 16 clients,
// for 1 KB and 400 KB messages). One P cannot use a second core, though, so a fixed 1
// would cap a busy gateway. The controller therefore starts at one P and adds one as soon
// as the Ps it has are nearly all busy, and gives one back after the load has stayed low
// for a while: fast up, slow down, with a gap between the two thresholds so that it does
// not flap.
//
// Only cmd wires it, and only when the operator has not set GOMAXPROCS.
package procs

import (
	"sync"
	"syscall"
	"time"
)

// Config sets the controller. The zero value of a field takes its default.
type Config struct {
	// Max is the most Ps (the runtime's own choice at start: the CPUs, or the
	// container's CPU limit). At most 1: the controller does nothing.
	Max int
	// Interval is the window over which the busy share is measured (default 1 s).
	Interval time.Duration
	// UpAt: one P more when the process used at least UpAt x its Ps of CPU over a window
	// (default 0.75).
	UpAt float64
	// DownAt and DownAfter: one P fewer after DownAfter windows in a row (default 10)
	// that used at most DownAt x (Ps - 1) of CPU (default 0.5), i.e. when the load would
	// fit one P fewer at half its capacity.
	DownAt    float64
	DownAfter int

	// CPUTime is the process's CPU time so far (default: getrusage, user + system).
	CPUTime func() time.Duration
	// Set applies a new number of Ps (runtime.GOMAXPROCS in production).
	Set func(n int)
	// OnChange, if set, is told of each change with the busy share that caused it (in
	// CPUs over the window).
	OnChange func(from, to int, busy float64)
}

func (c *Config) defaults() {
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
	if c.CPUTime == nil {
		c.CPUTime = processCPUTime
	}
}

// step decides the Ps for the next window from the busy share (CPUs used over the
// window) at cur Ps; calm counts the windows in a row that would have fit one P fewer.
func (c *Config) step(cur int, busy float64, calm int) (next, calmAfter int) {
	switch {
	case cur < c.Max && busy >= c.UpAt*float64(cur):
		return cur + 1, 0
	case cur > 1 && busy <= c.DownAt*float64(cur-1):
		if calm+1 >= c.DownAfter {
			return cur - 1, 0
		}
		return cur, calm + 1
	}
	return cur, 0
}

// Controller runs the loop; Stop ends it.
type Controller struct {
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// Start sets one P and starts adapting. It returns nil (and changes nothing) when Max is
// at most 1 or Set is nil.
func Start(cfg Config) *Controller {
	cfg.defaults()
	if cfg.Max <= 1 || cfg.Set == nil {
		return nil
	}
	c := &Controller{stop: make(chan struct{}), done: make(chan struct{})}
	cfg.Set(1)
	go c.run(cfg)
	return c
}

func (c *Controller) run(cfg Config) {
	defer close(c.done)
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	cur, calm := 1, 0
	last, lastAt := cfg.CPUTime(), time.Now()
	for {
		select {
		case <-c.stop:
			// Leave the process as the runtime would have set it.
			if cur != cfg.Max {
				cfg.Set(cfg.Max)
			}
			return
		case now := <-t.C:
			used := cfg.CPUTime()
			wall := now.Sub(lastAt)
			if wall <= 0 {
				continue
			}
			busy := float64(used-last) / float64(wall)
			last, lastAt = used, now
			next, calmAfter := cfg.step(cur, busy, calm)
			calm = calmAfter
			if next != cur {
				cfg.Set(next)
				if cfg.OnChange != nil {
					cfg.OnChange(cur, next, busy)
				}
				cur = next
			}
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

func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
