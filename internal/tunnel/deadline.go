package tunnel

import (
	"sync"
	"time"
)

// deadline is a stream's read or write deadline. A blocked Read or Write waits on the
// stream's signal channel (rsig, ssig) for data or credit; when the deadline passes, the
// timer marks the deadline expired and signals that channel, so the waiter wakes, sees
// it and returns ErrTimeout. It lives inside the Stream and allocates nothing until a
// deadline in the future is set (most exchanges never set one: the proxy's progress
// clock bounds them and sets a past deadline when it expires).
//
// Guarded by the stream's mu.
type deadline struct {
	timer   *time.Timer
	expired bool
	gen     uint32 // counts sets: a timer that fires after it was replaced or stopped does nothing
}

// setLocked arms d for t (zero: no deadline) and signals sig if t has passed. mu is the
// stream's mutex, held by the caller; the timer takes it when it fires.
func (d *deadline) setLocked(mu *sync.Mutex, t time.Time, sig chan struct{}) {
	d.stopLocked()
	d.expired = false
	if t.IsZero() {
		return
	}
	dur := time.Until(t)
	if dur <= 0 {
		d.expired = true
		signal(sig)
		return
	}
	gen := d.gen
	d.timer = time.AfterFunc(dur, func() {
		mu.Lock()
		fired := d.gen == gen
		if fired {
			d.expired = true
		}
		mu.Unlock()
		if fired {
			signal(sig)
		}
	})
}

// stopLocked disarms the timer without expiring the deadline, once the stream is
// forgotten: an armed timer would hold the stream (and through it, memory) until it
// fires, 60 s later for an exchange deadline, at thousands of exchanges a second.
func (d *deadline) stopLocked() {
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}
