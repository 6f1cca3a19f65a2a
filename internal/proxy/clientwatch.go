package proxy

import (
	"context"
	"errors"
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
// The watch only peeks (MSG_PEEK): nothing is consumed. stop ends it, waits for its
// goroutine and restores the read deadline rd that the exchange had set. Where the
// connection is not a socket (or not on unix), nothing is watched.
func watchClient(cc *clientConn, rd time.Time, cancel context.CancelCauseFunc) (stop func()) {
	if cc.pending {
		return func() {} // a byte of a pipelined request is already in hand
	}
	wait := resetWaiter(cc.Conn)
	if wait == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if wait() {
			cancel(errClientGone)
		}
	}()
	return func() {
		_ = cc.SetReadDeadline(time.Unix(1, 0)) // wakes the wait
		<-done
		_ = cc.SetReadDeadline(rd)
	}
}

// startWatch starts watchClient for x once its request was read whole from the client.
func (x *exchange) startWatch() {
	if x.abandon != nil && x.stopWatch == nil {
		x.stopWatch = watchClient(x.cc, x.deadline, x.abandon)
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
