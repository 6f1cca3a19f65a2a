package tunnel

import (
	"sync"
	"time"
)

// deadline turns an absolute time into a channel that is closed when the time passes, so a
// blocked Read or Write can select on it. Setting a new deadline re-arms it.
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	cancel chan struct{} // closed when the deadline passes
}

func newDeadline() *deadline { return &deadline{cancel: make(chan struct{})} }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // the old timer fired (or is firing): wait for it to close cancel
	}
	d.timer = nil
	closed := isClosed(d.cancel)
	if t.IsZero() {
		if closed {
			d.cancel = make(chan struct{})
		}
		return
	}
	dur := time.Until(t)
	if dur <= 0 {
		if !closed {
			close(d.cancel)
		}
		return
	}
	if closed {
		d.cancel = make(chan struct{})
	}
	c := d.cancel
	d.timer = time.AfterFunc(dur, func() { close(c) })
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// stop disarms the timer without closing cancel, once the stream is forgotten: an armed
// timer would hold the stream's deadline (and through its closure, memory) until it
// fires, 60 s later for an exchange deadline, at thousands of exchanges a second.
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}
