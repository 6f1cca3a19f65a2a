package proxy

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/testutil"
)

// Timeouts no stricter than the client's (issue #17, item 5), at the edge: a long exchange
// deadline by default, and a client that gives up (resets its connection) ends the
// exchange through both gateways and the upstream call.

func TestExchangeTimeoutDefault(t *testing.T) {
	require.Equal(t, 10*time.Minute, DefaultExchangeTimeout)
	require.Equal(t, DefaultExchangeTimeout, Limits{}.withDefaults().ExchangeTimeout)
}

// A client that resets its connection while the upstream is still thinking ends the
// exchange: the edge resets the tunnel stream, the origin closes the upstream connection
// (the server sees the call abandoned) and both gateways free the exchange, long before
// the exchange deadline.
func TestClientResetAbortsUpstreamCall(t *testing.T) {
	for _, tc := range []struct {
		name    string
		chunked bool
		delay   time.Duration
	}{
		{"content-length", false, 0},
		{"chunked", true, 0},                                    // a streamed request: watched once the body is sent
		{"content-length/watch-delay", false, clientWatchDelay}, // as in production: watched after clientWatchDelay
	} {
		chunked := tc.chunked
		t.Run(tc.name, func(t *testing.T) {
			addr, got, closed := thinkingUpstream(t)
			ups := []Upstream{{Name: "up", Address: addr}}
			env := newEnv(t, envConfig{Upstreams: ups, EdgeLimits: Limits{ExchangeTimeout: time.Minute}, ClientWatchDelay: tc.delay})
			require.NoError(t, env.origin.Reconfigure(ups, Limits{ExchangeTimeout: time.Minute}))

			cl := env.dial()
			if chunked {
				cl.send("POST /svc HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n<x/>\r\n0\r\n\r\n")
			} else {
				cl.send(soapRequest(1, "/svc", "", "<x/>"))
			}
			<-got
			require.Equal(t, 1, len(env.origin.inflight))
			require.NoError(t, cl.c.(*net.TCPConn).SetLinger(0))
			require.NoError(t, cl.c.Close()) // RST: the client gave up
			select {
			case <-closed:
			case <-time.After(testDeadline):
				t.Fatal("the upstream connection stayed open after the client went away")
			}
			require.Eventually(t, func() bool { return len(env.origin.inflight) == 0 && len(env.edge.inflight) == 0 },
				testDeadline, time.Millisecond, "the exchange still holds its slots")
		})
	}
}

// A client that only half-closes (FIN after its request, as some HTTP/1.0 tools do) is
// still there: the exchange goes on and it gets its response. The FIN follows the request
// at once, so the edge's watch sees it while the upstream holds the answer back.
func TestClientHalfCloseKeepsExchange(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(_ int, r upstreamReq) ([]byte, bool) {
		<-release
		return []byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n<ok/>"), false
	})
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}})
	cl := env.dial()
	cl.send(soapRequest(0, "/svc", "", "<x/>"))
	require.NoError(t, cl.c.(*net.TCPConn).CloseWrite())
	<-up.got
	close(release)
	resp, body := cl.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "<ok/>", string(body))
}

// TestWatchClientDelayed: an exchange that ends before the watch delay never starts the
// watch (no goroutine, no system call, the read deadline untouched); one that waits
// longer is watched (the clock's alarm), and a reset then cancels it.
func TestWatchClientDelayed(t *testing.T) {
	client, server := testutil.TCPPair(t)
	cc := &clientConn{Conn: server}
	rd := time.Now().Add(time.Hour)
	require.NoError(t, cc.SetReadDeadline(rd))
	clock := startProgressClock(time.Hour, time.Time{})
	defer clock.stop()

	var cause error
	var w clientWatch
	w.begin(cc, clock, rd, time.Hour, endFunc(func(err error) { cause = err }))
	before := runtime.NumGoroutine()
	w.end()
	require.NoError(t, cause)
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "nothing was started")
	_, err := client.Write([]byte("x"))
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = cc.Read(b)
	require.NoError(t, err, "the read deadline is the exchange's, not a stop's")

	gone := make(chan error, 1)
	var w2 clientWatch
	w2.begin(cc, clock, rd, time.Millisecond, endFunc(func(err error) { gone <- err }))
	defer w2.end()
	require.NoError(t, client.(*net.TCPConn).SetLinger(0))
	require.NoError(t, client.Close()) // RST
	select {
	case err := <-gone:
		require.ErrorIs(t, err, errClientGone)
	case <-time.After(testDeadline):
		t.Fatal("the delayed watch did not see the reset")
	}
}

// endFunc is a function as an ender.
type endFunc func(error)

func (f endFunc) end(err error) { f(err) }
