package proxy

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errClientGone is the cause of an exchange's context when its client reset the
// connection while the exchange waited for the origin.
var errClientGone = errors.New("the client reset its connection while waiting for the response")

// clientWatch watches the client's connection while the exchange waits for the origin,
// after the whole request was read from it: when the client resets the connection (it
// gave up: a timeout, a killed process), cancel is called with errClientGone, which
// resets the tunnel stream; the origin then closes its upstream connection and frees the
// exchange. Without it a call whose client is long gone would hold its slots here, at the
// origin and at the upstream until the exchange deadline, which is long by default
// (DefaultExchangeTimeout).
//
// Only a reset counts. A FIN is a half-close, which HTTP allows: a client may shut down
// its sending side after the request and still read the response (some HTTP/1.0 tools
// do), and it cannot be told from a client that closed for good without writing to it.
// Bytes from the client (a pipelined request) end the watch too: the client is there.
//
// The watch only peeks (MSG_PEEK): nothing is consumed. It starts after delay: most
// exchanges end within milliseconds, and a watch costs a goroutine, two wake-ups and
// three system calls, a fifth of the edge's work per exchange on a fast link; a client
// that gives up sooner holds its slots at most delay longer. The delay is an alarm of the
// exchange's progress clock, so an exchange that ends before it costs no timer of its own
// and no allocation (the watch lives in the exchange). Where the connection is not a
// socket (or not on unix), nothing is watched.
type clientWatch struct {
	cc     *clientConn
	rd     time.Time // the read deadline the exchange had set, restored by end
	cancel ender     // ends the exchange (its exchangeCtx)
	clock  *progressClock

	mu      sync.Mutex
	started bool
	stopped bool
	done    chan struct{} // closed when the watching goroutine returns
}

// ender ends an exchange with a cause: an *exchangeCtx, held as an interface so that
// handing it over allocates no method value.
type ender interface{ end(cause error) }

// begin watches cc from delay on (at once when delay <= 0).
func (w *clientWatch) begin(cc *clientConn, clock *progressClock, rd time.Time, delay time.Duration, cancel ender) {
	w.cc, w.clock, w.rd, w.cancel = cc, clock, rd, cancel
	if len(cc.first) > 0 {
		return // bytes of a pipelined request are already in hand
	}
	if delay <= 0 {
		w.ring()
		return
	}
	clock.setAlarm(delay, w)
}

// ring starts the watch, unless it was ended (the clock's alarm; it must not block).
func (w *clientWatch) ring() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.started {
		return
	}
	wait := resetWaiter(w.cc.Conn)
	if wait == nil {
		return
	}
	w.started, w.done = true, make(chan struct{})
	go func() {
		defer close(w.done)
		if wait() {
			w.cancel.end(errClientGone)
		}
	}()
}

// end stops the watch: before it began (the alarm is cancelled), or by waking the wait
// and waiting for its goroutine, then restoring the exchange's read deadline.
func (w *clientWatch) end() {
	if w.clock != nil {
		w.clock.cancelAlarm(w)
	}
	w.mu.Lock()
	w.stopped = true
	running := w.started
	w.mu.Unlock()
	if !running {
		return
	}
	_ = w.cc.SetReadDeadline(time.Unix(1, 0)) // wakes the wait
	<-w.done
	_ = w.cc.SetReadDeadline(w.rd)
}

// clientWatchDelay is how long an exchange waits for the origin before its client is
// watched (watchClient): far above an exchange on a LAN, far below any client timeout.
const clientWatchDelay = 100 * time.Millisecond

// startWatch starts x's clientWatch once its request was read whole from the client.
func (x *exchange) startWatch() {
	if x.ec != nil && !x.watching {
		x.watching = true
		x.watch.begin(x.cc, x.clock, x.deadline, x.e.watchDelay, x.ec)
	}
}

// endWatch stops the watch, if one was begun.
func (x *exchange) endWatch() {
	if x.watching {
		x.watch.end()
		x.watching = false
	}
}

// clientWentAway reports whether ctx ended because the client reset its connection. The
// exchange is then over without an answer (nobody would read it), recorded as bad_request
// like other clients that vanish mid-exchange.
func (x *exchange) clientWentAway(ctx context.Context) bool {
	if !errors.Is(causeOf(ctx), errClientGone) {
		return false
	}
	x.e.gatewayError(x.cc, x.id, x.upstream(), causeBadRequest, errClientGone)
	return true
}
