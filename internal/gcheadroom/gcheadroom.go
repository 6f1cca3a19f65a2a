// Package gcheadroom lets a process's heap grow by at least a fixed number of bytes
// between two garbage collections, by setting the collector's percentage (GOGC) after
// every collection from the heap it found live.
//
// Why: a gateway keeps little alive (2 MB of live heap at 12,000 exchanges/s on
// loopback) but allocates 15 KB per exchange, and Go's default (GOGC=100: collect when
// the heap has doubled, and at 4 MiB at the least) then collects every 2-3 MB, thirty
// times a second. Each collection costs its marking, the write barriers it turns on and
// the caches it sweeps through. GOGC=400 took 5-18 % off the CPU per exchange of the pair
// (soapgw bench cpu, 2026-11-29) but multiplies a large heap by five; a fixed headroom
// gives the small heap the same room and a large one no more than the default, so the
// memory it costs is bounded: at most the headroom above what GOGC=100 would hold.
//
// The percentage it sets makes the next collection's goal
//
//	max(2 x live, live + headroom)
//
// where the runtime computes the goal from the percentage p as live + (live + stacks +
// globals) x p/100, but never below 4 MiB x p/100: p is chosen so that neither term
// passes live + headroom. A memory limit (GOMEMLIMIT) still applies on top: near it the
// runtime collects as often as it must.
//
// Only cmd wires it, and only when the operator has not set GOGC.
package gcheadroom

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// runtimeMinimum is the runtime's smallest heap goal at GOGC=100 (defaultHeapMinimum),
// which it scales with the percentage.
const runtimeMinimum = 4 << 20

// maxPercent bounds the percentage set, whatever the heap: with a nearly empty heap the
// runtime's scaled minimum, not the percentage, sets the goal.
const maxPercent = 10_000

// Percent returns the GC percentage that makes the heap goal max(2 x live, live +
// headroom), for a live heap of live bytes and roots (goroutine stacks and globals) of
// roots bytes; never below 100 (the runtime's default).
func Percent(live, roots, headroom uint64) int {
	goal := live + max(live, headroom)
	// live + (live + roots) x p/100 <= goal
	p := uint64(maxPercent)
	if scanned := live + roots; scanned > 0 {
		p = min(p, 100*(goal-live)/scanned)
	}
	// runtimeMinimum x p/100 <= goal
	p = min(p, 100*goal/runtimeMinimum)
	return int(max(p, 100))
}

// Sample is what the runtime reports after a collection.
type Sample struct {
	Live  uint64 // heap bytes the collection found live
	Roots uint64 // goroutine stacks and globals it scanned
}

// Config sets a Tuner. Zero fields take their defaults.
type Config struct {
	// Headroom is the least the heap may grow between collections (default 16 MiB).
	Headroom uint64
	// Read tells what the last collection found (default: runtime/metrics).
	Read func() Sample
	// Set applies a percentage and returns the previous one (default debug.SetGCPercent).
	Set func(percent int) int
}

// Tuner sets the percentage after each collection until Stop.
type Tuner struct {
	cfg Config

	mu      sync.Mutex
	stopped bool
	percent int // last set
	initial int // before Start, restored by Stop
}

// Start sets the percentage for the heap as it is now and then after every collection.
func Start(cfg Config) *Tuner {
	if cfg.Headroom == 0 {
		cfg.Headroom = 16 << 20
	}
	if cfg.Read == nil {
		cfg.Read = newRuntimeReader()
	}
	if cfg.Set == nil {
		cfg.Set = debug.SetGCPercent
	}
	t := &Tuner{cfg: cfg, percent: -1}
	t.mu.Lock()
	t.adjustLocked()
	t.mu.Unlock()
	t.arm()
	return t
}

// Percent is the percentage the tuner set last.
func (t *Tuner) Percent() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent
}

// Stop ends the tuning and restores the percentage the process had before Start.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	t.cfg.Set(t.initial)
}

// arm registers a cleanup on a new object that nothing references, so that it runs after
// the next collection; the cleanup tunes and arms again. The object is 64 bytes, outside
// the runtime's tiny allocator, whose blocks may keep a small object alive (and its
// cleanup from running) indefinitely.
func (t *Tuner) arm() {
	runtime.AddCleanup(new([64]byte), (*Tuner).afterGC, t)
}

func (t *Tuner) afterGC() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.adjustLocked()
	t.arm()
}

// adjustLocked sets the percentage for the last collection's heap, unless it is within
// 1/8 of the one set (a new percentage recomputes the goal: not worth it for a few %).
func (t *Tuner) adjustLocked() {
	s := t.cfg.Read()
	p := Percent(s.Live, s.Roots, t.cfg.Headroom)
	if t.percent >= 0 && p > t.percent-t.percent/8 && p < t.percent+t.percent/8 {
		return
	}
	prev := t.cfg.Set(p)
	if t.percent < 0 {
		t.initial = prev
	}
	t.percent = p
}

// newRuntimeReader reads the live heap and the roots from runtime/metrics.
func newRuntimeReader() func() Sample {
	samples := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}
	return func() Sample {
		metrics.Read(samples)
		var v [3]uint64
		for i, s := range samples {
			if s.Value.Kind() == metrics.KindUint64 {
				v[i] = s.Value.Uint64()
			}
		}
		return Sample{Live: v[0], Roots: v[1] + v[2]}
	}
}
