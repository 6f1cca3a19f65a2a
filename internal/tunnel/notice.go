package tunnel

import "sync"

// Notice is a one-shot callback. Then registers f, which runs when Fire is called, or at
// once if Fire was; Cancel drops it for good (a Fire after it does nothing). One f per
// Notice. The zero value is ready. Streams of both tunnels use one for "the peer decoded
// the message" (AfterDelivered) and another for "the stream failed" (AfterFail); the TCP
// tunnel's use a third for "the message left" (AfterSent).
type Notice struct {
	mu        sync.Mutex
	fired     bool
	cancelled bool
	async     bool // f runs in a goroutine of its own (AfterNotice)
	f         func()
}

// Then runs f when the notice fires, at once if it has; never once it was cancelled.
func (n *Notice) Then(f func()) { n.then(f, false) }

func (n *Notice) then(f func(), async bool) {
	n.mu.Lock()
	if n.fired {
		n.mu.Unlock()
		runNoticed(f, async)
		return
	}
	if !n.cancelled {
		n.f, n.async = f, async
	}
	n.mu.Unlock()
}

// runNoticed runs a notice's f, in a goroutine of its own when async.
func runNoticed(f func(), async bool) {
	if async {
		go f()
	} else {
		f()
	}
}

// Fire runs the registered f, once, unless the notice was cancelled.
func (n *Notice) Fire() {
	n.mu.Lock()
	if n.fired || n.cancelled {
		n.mu.Unlock()
		return
	}
	n.fired = true
	f, async := n.f, n.async
	n.f = nil
	n.mu.Unlock()
	if f != nil {
		runNoticed(f, async)
	}
}

// Cancel drops the registered f; Fire will not run it, nor Then a later one.
func (n *Notice) Cancel() {
	n.mu.Lock()
	n.cancelled = true
	n.f = nil
	n.mu.Unlock()
}

// Stop drops the registered f and reports whether it did, that is whether f had not run
// (nor been cancelled). A later Then may register another.
func (n *Notice) Stop() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	stopped := n.f != nil
	n.f = nil
	return stopped
}

// AfterNotice registers f with n to run in a goroutine of its own when n fires (at once
// if it has), for a Fire under a lock f may take; it returns n.Stop.
func AfterNotice(n *Notice, f func()) (stop func() bool) {
	n.then(f, true)
	return n.Stop
}
