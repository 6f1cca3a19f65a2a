package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Timeouts no stricter than the client's (issue #17, item 5), at the origin: an upstream
// has no response timeout of its own by default, only the exchange deadline; a configured
// response_timeout still fires; an exchange the edge abandons ends the upstream call.

// A server slower than the old 30 s default cannot wait in a unit test; what can be
// checked is that by default nothing but the exchange deadline is armed for the response
// head, and that a configured response_timeout is.
func TestResponseDeadline(t *testing.T) {
	require.Zero(t, Upstream{}.withDefaults().ResponseTimeout, "no response timeout by default")

	sent := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	exchange := sent.Add(10 * time.Minute)
	require.Equal(t, exchange, responseDeadline(Upstream{}.withDefaults(), sent, exchange), "default: the exchange deadline only")
	require.Equal(t, sent.Add(30*time.Second), responseDeadline(Upstream{ResponseTimeout: 30 * time.Second}, sent, exchange))
	require.Equal(t, exchange, responseDeadline(Upstream{ResponseTimeout: time.Hour}, sent, exchange), "never past the exchange deadline")
}

// The same upstream, 300 ms to answer: with the defaults the call succeeds; with
// response_timeout 100ms it gets upstream_timeout; with no response_timeout but an
// exchange deadline of 100 ms, timeout. (That is the edge's deadline, which starts first
// and is the one that answers: the origin's, reached, resets the stream.)
func TestResponseTimeoutOnlyWhenConfigured(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	up := newUpstream(t, func(_ int, r upstreamReq) ([]byte, bool) {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-release:
		}
		return []byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n<ok/>"), false
	})
	ups := []Upstream{
		{Name: "default", Address: up.addr()},
		{Name: "strict", Address: up.addr(), ResponseTimeout: 100 * time.Millisecond},
	}
	routes := []Route{
		{PathPrefix: "/strict", Peer: "p", Upstream: "strict"},
		{Peer: "p", Upstream: "default"},
	}
	env := newEnv(t, envConfig{Upstreams: ups, Routes: routes})

	cl := env.dial()
	cl.send(soapRequest(1, "/default", "", "<x/>"))
	resp, body := cl.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "<ok/>", string(body))

	cl = env.dial()
	cl.send(soapRequest(1, "/strict", "", "<x/>"))
	f := cl.readFault()
	require.Equal(t, causeUpstreamTimeout, f.cause)
	require.Contains(t, f.text, "did not answer within 100ms")

	require.NoError(t, env.edge.Reconfigure(routes, Limits{ExchangeTimeout: 100 * time.Millisecond}))
	cl = env.dial()
	cl.send(soapRequest(1, "/default", "", "<x/>"))
	f = cl.readFault()
	require.Equal(t, causeTimeout, f.cause)
	require.Contains(t, f.text, "nothing of it moved for 100ms")
}

// thinkingUpstream reads one request and then, like a server still computing its answer,
// sends nothing; closed reports when the origin closes the connection.
func thinkingUpstream(t *testing.T) (addr string, got, closed chan struct{}) {
	got, closed = make(chan struct{}), make(chan struct{})
	addr = rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readUntil(br, "<x/>"); err != nil {
			return
		}
		close(got)
		if _, err := io.Copy(io.Discard, br); err == nil { // EOF: the origin closed
			close(closed)
		}
	})
	return addr, got, closed
}

// When the edge resets the stream of an exchange whose request the origin has read whole
// (its client went away, its deadline passed), the origin closes the upstream connection
// at once (the server sees the call abandoned) and frees the exchange, long before its
// exchange deadline.
func TestOriginAbortsUpstreamCallWhenEdgeResets(t *testing.T) {
	addr, got, closed := thinkingUpstream(t)
	ups := []Upstream{{Name: "up", Address: addr}}
	env := newEnv(t, envConfig{Upstreams: ups})
	require.NoError(t, env.origin.Reconfigure(ups, Limits{ExchangeTimeout: time.Minute}))

	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	st, err := env.cs.OpenStream(ctx)
	require.NoError(t, err)
	head := requestHead{ExchangeID: "abandoned-1", Upstream: "up", Method: "POST", Target: "/svc", ProtoMinor: 1, ContentLength: 4}
	_, err = st.Write(append(head.Append(nil), "<x/>"...))
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	<-got
	require.Equal(t, 1, len(env.origin.inflight))
	require.NoError(t, st.Close()) // unfinished: RST_STREAM
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the upstream connection stayed open after the edge abandoned the exchange")
	}
	require.Eventually(t, func() bool { return len(env.origin.inflight) == 0 }, testDeadline, time.Millisecond,
		"the exchange still holds its slot at the origin")
}

// TestOriginClockBoundsTheUpstream: with no response_timeout the origin sets no deadline
// on the upstream connection; its progress clock bounds the call. An upstream that reads
// the request and never answers, and one that never reads it (the request's write
// blocks), are both ended after the origin's exchange_timeout: the connection is closed
// and the client gets a timeout fault. In the second the edge is still sending the
// request: the origin reads the rest after the fault instead of resetting the stream
// under it (which the edge reported as tunnel_lost).
func TestOriginClockBoundsTheUpstream(t *testing.T) {
	body := strings.Repeat("<x/>", 1<<20) // 4 MiB: more than the sockets take
	for _, c := range []struct {
		name   string
		body   string
		read   bool     // the upstream reads the request
		causes []string // the fault's, one of
	}{
		{"reads and never answers", "<x/>", true, []string{causeTimeout}},
		{"never reads", body, false, []string{causeTimeout}},
	} {
		t.Run(c.name, func(t *testing.T) {
			closed, faulted := make(chan struct{}), make(chan struct{})
			addr := rawUpstream(t, func(_ net.Conn, br *bufio.Reader) {
				if c.read {
					if _, err := readUntil(br, "<x/>"); err != nil {
						return
					}
				} else {
					<-faulted // read nothing until the origin gave up
				}
				if _, err := io.Copy(io.Discard, br); err == nil { // EOF: the origin closed
					close(closed)
				}
			})
			ups := []Upstream{{Name: "up", Address: addr}}
			env := newEnv(t, envConfig{Upstreams: ups, EdgeLimits: Limits{MaxRequestBytes: 8 << 20}})
			require.NoError(t, env.origin.Reconfigure(ups, Limits{ExchangeTimeout: 150 * time.Millisecond, MaxRequestBytes: 8 << 20}))
			cl := env.dial()
			cl.send(soapRequest(1, "/svc", "", c.body))
			f := cl.readFault()
			close(faulted)
			require.Contains(t, c.causes, f.cause, f.text)
			select {
			case <-closed:
			case <-time.After(testDeadline):
				t.Fatal("the upstream connection stayed open after the exchange timed out")
			}
		})
	}
}
