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

// watchClient watches the client's connection while the exchange waits for the origin,
// after the whole request was read from it: when the client resets the connection (it gave
// up: a timeout, a killed process), cancel is called with errClientGone, which resets the
// tunnel stream; the origin then closes its upstream connection and frees the exchange.
// Without it a call whose client is long gone would hold its slots here, at the origin and
// at the upstream until the exchange deadline, which is long by default
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
// that gives up sooner holds its slots at most delay longer. stop ends it (waiting for
// its goroutine and restoring the read deadline rd that the exchange had set), or
// cancels it before it started. Where the connection is not a socket (or not on unix),
// nothing is watched.
func watchClient(cc *clientConn, rd time.Time, delay time.Duration, cancel context.CancelCauseFunc) (stop func()) {
	if cc.pending {
		return func() {} // a byte of a pipelined request is already in hand
	}
	wait := resetWaiter(cc.Conn)
	if wait == nil {
		return func() {}
	}
	var (
		mu               sync.Mutex
		started, stopped bool
		done             = make(chan struct{})
	)
	watch := func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		started = true
		mu.Unlock()
		defer close(done)
		if wait() {
			cancel(errClientGone)
		}
	}
	var t *time.Timer
	if delay <= 0 {
		go watch()
	} else {
		t = time.AfterFunc(delay, watch)
	}
	return func() {
		if t != nil && t.Stop() {
			return // the exchange ended before the watch began
		}
		mu.Lock()
		stopped = true
		running := started
		mu.Unlock()
		if !running {
			return
		}
		_ = cc.SetReadDeadline(time.Unix(1, 0)) // wakes the wait
		<-done
		_ = cc.SetReadDeadline(rd)
	}
}

// clientWatchDelay is how long an exchange waits for the origin before its client is
// watched (watchClient): far above an exchange on a LAN, far below any client timeout.
const clientWatchDelay = 100 * time.Millisecond

// startWatch starts watchClient for x once its request was read whole from the client.
func (x *exchange) startWatch() {
	if x.abandon != nil && x.stopWatch == nil {
		x.stopWatch = watchClient(x.cc, x.deadline, x.e.watchDelay, x.abandon)
	}
}

// endWatch stops the watch, if one runs.
func (x *exchange) endWatch() {
	if x.stopWatch != nil {
		x.stopWatch()
		x.stopWatch = nil
	}
}

// clientWentAway reports whether ctx ended because the client reset its connection. The
// exchange is then over without an answer (nobody would read it), recorded as bad_request
// like other clients that vanish mid-exchange.
func (x *exchange) clientWentAway(ctx context.Context) bool {
	if !errors.Is(context.Cause(ctx), errClientGone) {
		return false
	}
	x.e.gatewayError(x.cc, x.id, x.upstream(), causeBadRequest, errClientGone)
	return true
}
