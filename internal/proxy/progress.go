package proxy

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// progressClock is an exchange's deadline measured in progress, not in time since it
// began: the exchange ends when none of its bytes has moved for stall (limits.
// exchange_timeout), or at end (limits.exchange_max_duration after it began) however
// they move. An absolute deadline cannot tell a server that hangs from a response that
// is flowing slowly because it waits behind others on a slow link: sixteen 200 KB
// responses over GPRS take eleven minutes together, and every one of them moves all
// that time. Clients behave the same way: Axis, CXF, .NET and zeep time out a read,
// not a call.
//
// The legs touch the clock when they move bytes (an atomic store, no timer reset per
// read or write); one timer checks it when the stall could have passed and re-arms for
// the time the last touch leaves.
//
// Time spent blocked writing into the tunnel is not a stall (busyStream): the stream's
// window opens as fast as the other gateway consumes it, which on a slow link shared by
// many exchanges can be minutes per window. The other gateway judges that side of the
// queue with its own clock (it resets the stream when its exchange stalls), and the
// tunnel's keepalive judges the connection. When it expires it runs the hooks registered with
// onExpire once (they unblock the legs and cancel the exchange's context with
// errNoProgress). stop ends it; after stop no hook runs.
type progressClock struct {
	stall time.Duration
	end   time.Time // hard bound; zero: none
	base  time.Time // monotonic origin of last
	last  atomic.Int64
	busy  atomic.Int32 // writes into the tunnel under way (busyStream)

	mu      sync.Mutex
	timer   *time.Timer
	hooks   []func()
	hookBuf [4]func()      // hooks' first backing array: an exchange registers 2-4
	ends    ender          // ended with errNoProgress after the hooks (endOnExpire)
	unblock deadliner      // given a past deadline before the hooks (unblockOnExpire)
	rd      progressReader // reader's: kept here, so handing it out allocates nothing
	expired bool
	stopped bool
	alarm   alarm // rings once at alarmAt (setAlarm); nil: none
	alarmAt time.Time
}

// alarm is what setAlarm rings: it runs under the clock's lock and must not block.
type alarm interface{ ring() }

// errNoProgress is the cause of an exchange's context when its progress clock expired.
var errNoProgress = errors.New("soapgw: exchange made no progress")

// startProgressClock starts a clock for an exchange that begins now. end is its hard
// bound (zero: none).
func startProgressClock(stall time.Duration, end time.Time) *progressClock {
	now := time.Now()
	c := &progressClock{stall: stall, end: end, base: now}
	c.hooks = c.hookBuf[:0]
	c.timer = time.AfterFunc(c.wait(now), c.check)
	return c
}

// touch records that the exchange moved bytes now. Safe on a nil clock.
func (c *progressClock) touch() {
	if c != nil {
		c.last.Store(int64(time.Since(c.base)))
	}
}

// wait returns how long from now until the clock expires, given the last touch.
func (c *progressClock) wait(now time.Time) time.Duration {
	due := c.base.Add(time.Duration(c.last.Load()) + c.stall)
	if !c.end.IsZero() && c.end.Before(due) {
		due = c.end
	}
	return due.Sub(now)
}

func (c *progressClock) check() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.expired {
		return
	}
	now := time.Now()
	if c.alarm != nil && !now.Before(c.alarmAt) {
		a := c.alarm
		c.alarm = nil
		a.ring()
	}
	if c.busy.Load() > 0 {
		c.touch() // blocked writing into the tunnel: the peer gateway judges that (end still holds)
	}
	if d := c.wait(now); d > 0 {
		if c.alarm != nil {
			d = min(d, c.alarmAt.Sub(now))
		}
		c.timer.Reset(d) // touched since the timer was set, or the alarm is due first
		return
	}
	c.alarm = nil
	c.expired = true
	if c.unblock != nil {
		_ = c.unblock.SetDeadline(time.Unix(1, 0))
		c.unblock = nil
	}
	for _, f := range c.hooks {
		f()
	}
	c.hooks = nil
	if c.ends != nil {
		c.ends.end(errNoProgress)
		c.ends = nil
	}
}

// deadliner is a connection or stream whose blocked reads and writes a past deadline ends.
type deadliner interface{ SetDeadline(time.Time) error }

// unblockOnExpire gives d a past deadline when the clock expires, before the hooks (at
// once if it has): onExpire's closure for the leg that most exchanges unblock, without
// allocating one. One leg: a second replaces the first.
func (c *progressClock) unblockOnExpire(d deadliner) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.stopped:
	case c.expired:
		_ = d.SetDeadline(time.Unix(1, 0))
	default:
		c.unblock = d
	}
}

// reader returns r as a progressReader of the clock. The clock holds it: one reader per
// clock at a time.
func (c *progressClock) reader(r interface{ Read([]byte) (int, error) }) *progressReader {
	c.rd = progressReader{r, c}
	return &c.rd
}

// endOnExpire ends x with errNoProgress when the clock expires, after the hooks (at once
// if it has): onExpire's closure for the common case, without allocating one.
func (c *progressClock) endOnExpire(x ender) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.stopped:
	case c.expired:
		x.end(errNoProgress)
	default:
		c.ends = x
	}
}

// onExpire registers f to run when the clock expires; at once if it has.
func (c *progressClock) onExpire(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	if c.expired {
		f()
		return
	}
	c.hooks = append(c.hooks, f)
}

// setAlarm rings a once, d from now, on the clock's own timer (an exchange's delayed
// client watch costs no timer of its own), unless cancelAlarm, stop or the clock's expiry
// comes first. One alarm at a time: a second replaces the first.
func (c *progressClock) setAlarm(d time.Duration, a alarm) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.expired {
		return
	}
	now := time.Now()
	c.alarm, c.alarmAt = a, now.Add(d)
	if d < c.wait(now) {
		c.timer.Reset(d)
	}
}

// cancelAlarm takes a back if it has not rung; afterwards it will not.
func (c *progressClock) cancelAlarm(a alarm) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.alarm == a {
		c.alarm = nil
	}
}

// Expired reports whether the clock ran out (before stop).
func (c *progressClock) Expired() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.expired
}

// stop ends the clock: no hook runs after it returns.
func (c *progressClock) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	c.hooks = nil
	c.ends = nil
	c.unblock = nil
	c.alarm = nil
	c.timer.Stop()
}

// reason says which bound ended the exchange, for faults and logs.
func (c *progressClock) reason() string {
	if !c.end.IsZero() && !time.Now().Before(c.end) {
		return fmt.Sprintf("its time was up (limits.exchange_max_duration: %s)", c.end.Sub(c.base).Round(time.Second))
	}
	return fmt.Sprintf("nothing of it moved for %s (limits.exchange_timeout)", c.stall)
}

// progressReader touches c on every read that returns bytes.
type progressReader struct {
	r interface{ Read([]byte) (int, error) }
	c *progressClock
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.c.touch()
	}
	return n, err
}

// busyStream is a Stream whose writes (and flushes) hold c while they block: waiting for
// the tunnel's window is not a stall of the exchange (see progressClock); a write that
// returns touches it.
type busyStream struct {
	Stream
	c *progressClock
}

func (s busyStream) Write(p []byte) (int, error) {
	s.c.enter()
	defer s.c.leave()
	return s.Stream.Write(p)
}

func (s busyStream) Flush() error {
	s.c.enter()
	defer s.c.leave()
	return s.Stream.Flush()
}

// enter and leave bracket a write into the tunnel. Safe on a nil clock.
func (c *progressClock) enter() {
	if c != nil {
		c.busy.Add(1)
	}
}

func (c *progressClock) leave() {
	if c != nil {
		c.busy.Add(-1)
		c.touch()
	}
}
