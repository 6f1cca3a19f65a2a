package proxy

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel"
	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// soapBody is a SOAP body with bytes that must survive untouched (CRLF, NUL, non-UTF-8).
var soapBody = `<?xml version="1.0"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><Add xmlns="urn:calc"><a>1</a><b>2</b></Add></soap:Body></soap:Envelope>` +
	"\r\n\x00\xff\xfe end"

// Request and response reach the far side byte for byte: method, target, field names
// with their casing, values, order, duplicates, body; only hop-by-hop fields are dropped.
func TestEdgeOriginTransparency(t *testing.T) {
	respBody1 := `<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><AddResponse><r>3</r></AddResponse></soap:Body></soap:Envelope>`
	resp1 := "HTTP/1.1 200 Very OK\r\n" +
		"content-type: text/xml; charset=utf-8\r\n" +
		"Set-Cookie: a=1\r\n" +
		"set-cookie: b=2\r\n" +
		"X-Server: gSOAP/2.8\r\n" +
		"Content-Length: " + strconv.Itoa(len(respBody1)) + "\r\n\r\n" + respBody1
	// The second response carries hop-by-hop fields the client must not see.
	resp2Head := "HTTP/1.1 500 Internal Server Error\r\n" +
		"Content-Type: text/xml\r\n" +
		"Keep-Alive: timeout=10\r\n" +
		"Connection: Keep-Alive, X-Hop-Resp\r\n" +
		"X-Hop-Resp: secret\r\n" +
		"X-After: 1\r\n"
	respBody2 := "<fault/>"
	resp2 := resp2Head + "Content-Length: 8\r\n\r\n" + respBody2
	wantResp2 := "HTTP/1.1 500 Internal Server Error\r\n" +
		"Content-Type: text/xml\r\n" +
		"X-After: 1\r\n" +
		"Content-Length: 8\r\n\r\n" + respBody2

	up := newUpstream(t, func(n int, _ upstreamReq) ([]byte, bool) {
		if n == 0 {
			return []byte(resp1), false
		}
		return []byte(resp2), false
	})
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr(), PoolSize: 2}}})

	reqHead := func(hop bool) string {
		s := "POST /svc/Calc?x=1&y=%20 HTTP/1.1\r\n" +
			"Host: svc.example:8080\r\n" +
			"SOAPAction: \"urn:Add\"\r\n" +
			"content-type: text/xml; charset=utf-8\r\n" +
			"X-Mixed-CASE: a  b\r\n"
		if hop {
			s += "Connection: keep-alive, X-Hop\r\n" +
				"X-Hop: dropped\r\n" +
				"Keep-Alive: timeout=5\r\n" +
				"TE: trailers\r\n" +
				"Proxy-Connection: keep-alive\r\n"
		}
		return s + "X-Dup: 1\r\n" +
			"x-dup: 2\r\n" +
			"User-Agent: Axis/1.4\r\n" +
			"Content-Length: " + strconv.Itoa(len(soapBody)) + "\r\n\r\n"
	}

	cl := env.dial()
	cl.send(reqHead(true) + soapBody)
	got := cl.readExactly(len(resp1))
	require.Equal(t, resp1, string(got))
	reqs := up.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, reqHead(false)+soapBody, string(reqs[0].raw))

	// Same client connection, same pooled upstream connection. The origin pools the
	// connection only after the response left (see report), so wait for that first.
	pool := (*env.origin.pools.Load())["up"]
	require.Eventually(t, func() bool {
		pool.mu.Lock()
		defer pool.mu.Unlock()
		return len(pool.idle) == 1
	}, testDeadline, time.Millisecond)
	cl.send(reqHead(false) + soapBody)
	got = cl.readExactly(len(wantResp2))
	require.Equal(t, wantResp2, string(got))
	reqs = up.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, reqHead(false)+soapBody, string(reqs[1].raw))
	require.Equal(t, 1, up.numConns(), "the origin reuses its upstream connection")
}

// An HTTP/1.0 client never waits for a FIN: a close-delimited (or chunked) response is
// delivered with a Content-Length.
func TestEdgeOriginHTTP10Client(t *testing.T) {
	body := strings.Repeat("<r>close-delimited</r>", 500)
	up := newUpstream(t, func(_ int, r upstreamReq) ([]byte, bool) {
		if r.req.Target == "/chunked" {
			return []byte("HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nTransfer-Encoding: chunked\r\n\r\n" +
				strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"), false
		}
		return []byte("HTTP/1.0 200 OK\r\nContent-Type: text/xml\r\n\r\n" + body), true
	})
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}})

	want := "HTTP/1.0 200 OK\r\nContent-Type: text/xml\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body

	t.Run("close", func(t *testing.T) {
		cl := env.dial()
		cl.send("POST /svc HTTP/1.0\r\nHost: svc.example\r\nContent-Type: text/xml\r\nContent-Length: 3\r\n\r\nabc")
		require.Equal(t, want, string(cl.readExactly(len(want))))
		cl.requireClosed()
		r := up.requests()[0]
		require.Equal(t, "POST /svc HTTP/1.1\r\nHost: svc.example\r\nContent-Type: text/xml\r\nContent-Length: 3\r\n\r\nabc", string(r.raw),
			"the origin speaks HTTP/1.1 to the upstream, fields unchanged")
	})
	t.Run("keep-alive", func(t *testing.T) {
		wantKA := "HTTP/1.0 200 OK\r\nContent-Type: text/xml\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: keep-alive\r\n\r\n" + body
		cl := env.dial()
		for _, target := range []string{"/svc", "/chunked", "/svc"} {
			cl.send("POST " + target + " HTTP/1.0\r\nHost: svc.example\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc")
			require.Equal(t, wantKA, string(cl.readExactly(len(wantKA))), target)
		}
	})
}

// A body of unknown length goes chunked to an HTTP/1.1 client, which keeps its connection.
func TestEdgeOriginChunkedResponse(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 40<<10) // 640 KiB: several tunnel windows
	up := newUpstream(t, func(_ int, r upstreamReq) ([]byte, bool) {
		switch r.req.Target {
		case "/chunked":
			var b bytes.Buffer
			b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nTransfer-Encoding: chunked\r\nX-After: y\r\n\r\n")
			for off := 0; off < len(big); off += 100000 {
				end := min(off+100000, len(big))
				b.WriteString(strconv.FormatInt(int64(end-off), 16) + ";ext=1\r\n")
				b.Write(big[off:end])
				b.WriteString("\r\n")
			}
			b.WriteString("0\r\nX-Trailer: t\r\n\r\n")
			return b.Bytes(), false
		default:
			return append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nX-After: y\r\n\r\n"), big...), true
		}
	})
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr(), PoolSize: 4}}})
	cl := env.dial()
	for _, target := range []string{"/chunked", "/close-delimited", "/chunked"} {
		cl.send("POST " + target + " HTTP/1.1\r\nHost: svc.example\r\nContent-Length: 0\r\n\r\n")
		wantHead := "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nX-After: y\r\nTransfer-Encoding: chunked\r\n\r\n"
		head, err := cl.br.Peek(len(wantHead))
		require.NoError(t, err)
		require.Equal(t, wantHead, string(head), target)
		resp, body := cl.read("POST")
		require.True(t, resp.Chunked)
		require.False(t, resp.Close)
		require.Equal(t, len(big), len(body), target)
		require.True(t, bytes.Equal(big, body), target)
	}
}

// The origin is not an open proxy: an upstream name it does not know is a 502 Fault.
func TestOriginRefusesUnknownUpstream(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	env := newEnv(t, envConfig{
		Upstreams: []Upstream{{Name: "up", Address: up.addr()}},
		Routes:    []Route{{Peer: "p", Upstream: "ghost"}},
	})
	cl := env.dial()
	for range 2 { // the client connection survives the fault
		cl.send(soapRequest(1, "/svc", "", "<x/>"))
		f := cl.readFault()
		requireGatewayStatus(t, f, 502)
		require.Equal(t, causeUnknownUpstream, f.cause)
		require.Equal(t, causeUnknownUpstream, f.resp.Header.Get("X-Soapgw-Error"))
		require.NotEmpty(t, f.resp.Header.Get("X-Soapgw-Exchange"))
		require.Equal(t, f.exchange, f.resp.Header.Get("X-Soapgw-Exchange"))
		require.Equal(t, "soap:Server", f.code)
		require.Contains(t, f.text, `"ghost"`)
		require.Contains(t, f.text, "origin-test")
		require.False(t, f.resp.Close)
	}
	// SOAP 1.2 client: env:Receiver.
	cl.send("POST /svc HTTP/1.1\r\nHost: h\r\nContent-Type: application/soap+xml; charset=utf-8\r\nContent-Length: 4\r\n\r\n<x/>")
	f := cl.readFault()
	require.Equal(t, "env:Receiver", f.code)
	require.Equal(t, causeUnknownUpstream, f.cause)
	require.Zero(t, up.numConns(), "nothing reached any upstream")
}

func TestOriginUpstreamErrors(t *testing.T) {
	// An address nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := ln.Addr().String()
	require.NoError(t, ln.Close())

	garbage := newUpstream(t, func(int, upstreamReq) ([]byte, bool) { return []byte("SOAP/9 what\r\n\r\n"), true })
	silent := newUpstream(t, func(int, upstreamReq) ([]byte, bool) { return nil, false })

	env := newEnv(t, envConfig{
		Upstreams: []Upstream{
			{Name: "down", Address: down},
			{Name: "garbage", Address: garbage.addr()},
			{Name: "silent", Address: silent.addr(), ResponseTimeout: 200 * time.Millisecond},
		},
		Routes: []Route{
			{PathPrefix: "/down", Peer: "p", Upstream: "down"},
			{PathPrefix: "/garbage", Peer: "p", Upstream: "garbage"},
			{PathPrefix: "/silent", Peer: "p", Upstream: "silent"},
		},
	})
	cases := []struct {
		target string
		status int
		cause  string
	}{
		{"/down", 502, causeUpstreamDown},
		{"/garbage", 502, causeUpstreamBad},
		{"/silent", 504, causeUpstreamTimeout},
	}
	for _, c := range cases {
		t.Run(c.target, func(t *testing.T) {
			cl := env.dial()
			cl.send(soapRequest(1, c.target, "", "<x/>"))
			f := cl.readFault()
			requireGatewayStatus(t, f, c.status)
			require.Equal(t, c.cause, f.cause)
			require.Equal(t, c.cause, f.resp.Header.Get("X-Soapgw-Error"))
			require.Equal(t, "soap:Server", f.code)
			require.Contains(t, f.text, strings.TrimPrefix(c.target, "/"))
		})
	}
}

// Shutdown lets an exchange in flight finish, closes idle keep-alive connections at once,
// and accepts nothing new.
func TestEdgeShutdownDrains(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	up := newUpstream(t, func(_ int, r upstreamReq) ([]byte, bool) {
		if r.req.Target == "/slow" {
			<-release
		}
		return []byte("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone"), false
	})
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}})

	idle := env.dial()
	idle.send(soapRequest(1, "/fast", "", "<x/>"))
	resp, _ := idle.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	<-up.got

	busy := env.dial()
	busy.send(soapRequest(1, "/slow", "", "<x/>"))
	<-up.got // the slow exchange is at the upstream now

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		done <- env.edge.Shutdown(ctx)
	}()

	idle.requireClosed()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with an exchange in flight", err)
	default:
	}
	_, err := net.Dial("tcp", env.addrs["main"])
	require.Error(t, err, "the listener is closed")

	release <- struct{}{}
	resp, body := busy.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "done", string(body))
	busy.requireClosed()
	require.NoError(t, <-done)
	require.Zero(t, testutil.ToFloat64(env.edge.m.clientConns))
}

func TestEdgeMaxConcurrentExchanges(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	up := newUpstream(t, func(_ int, r upstreamReq) ([]byte, bool) {
		if r.req.Target == "/slow" {
			<-release
		}
		return []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), false
	})
	env := newEnv(t, envConfig{
		Upstreams:  []Upstream{{Name: "up", Address: up.addr()}},
		EdgeLimits: Limits{MaxConcurrentExchanges: 1},
	})
	first := env.dial()
	first.send(soapRequest(1, "/slow", "", "<x/>"))
	<-up.got

	second := env.dial()
	second.send("POST /fast HTTP/1.1\r\nHost: h\r\nContent-Type: application/soap+xml\r\nContent-Length: 4\r\n\r\n<x/>")
	f := second.readFault()
	requireGatewayStatus(t, f, 503)
	require.Equal(t, "env:Receiver", f.code)
	require.Equal(t, f.cause, f.resp.Header.Get("X-Soapgw-Error"))
	require.True(t, f.resp.Close)
	second.requireClosed()

	release <- struct{}{}
	resp, _ := first.read("POST")
	require.Equal(t, 200, resp.StatusCode)

	// The slot is free again once the first exchange has finished (it releases its slot
	// just after the response went out).
	require.Eventually(t, func() bool { return len(env.edge.inflight) == 0 }, testDeadline, time.Millisecond)
	third := env.dial()
	third.send(soapRequest(1, "/fast", "", "<x/>"))
	resp, _ = third.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, up.requests(), 2, "the refused exchange never reached the upstream")
}

// retryErr is a tunnel error that says whether the origin provably never saw the stream.
type retryErr struct{ retryable bool }

func (e retryErr) Error() string {
	return "test: stream failed (retryable=" + strconv.FormatBool(e.retryable) + ")"
}
func (e retryErr) Retryable() bool { return e.retryable }

// deadStream fails every operation with err.
type deadStream struct{ err error }

func (s deadStream) Read([]byte) (int, error)    { return 0, s.err }
func (s deadStream) Write([]byte) (int, error)   { return 0, s.err }
func (s deadStream) Flush() error                { return s.err }
func (s deadStream) CloseWrite() error           { return s.err }
func (s deadStream) Close() error                { return nil }
func (s deadStream) SetDeadline(time.Time) error { return nil }

func TestEdgeRetriesRefusedStream(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	var calls atomic.Int32
	env := newEnv(t, envConfig{
		Upstreams: []Upstream{{Name: "up", Address: up.addr()}},
		Opener: func(base Opener) Opener {
			return OpenerFunc(func(ctx context.Context) (Stream, error) {
				if calls.Add(1) == 1 {
					return deadStream{retryErr{true}}, nil
				}
				return base.OpenStream(ctx)
			})
		},
	})
	cl := env.dial()
	cl.send(soapRequest(1, "/svc", "", soapBody))
	resp, body := cl.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "<ok/>", string(body))
	require.Equal(t, int32(2), calls.Load())
	reqs := up.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, soapBody, string(reqs[0].body), "the replayed body is whole")
	require.InDelta(t, 1, testutil.ToFloat64(env.edge.m.retries.WithLabelValues("p")), 0)
}

// The origin's session refuses a stream (RST_STREAM REFUSED): the edge sends it again.
func TestEdgeRetriesStreamResetRefused(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	var accepted atomic.Int32
	env := newEnv(t, envConfig{
		Upstreams: []Upstream{{Name: "up", Address: up.addr()}},
		Accept: func(st *tunnel.Stream) bool {
			if accepted.Add(1) == 1 {
				st.Reset(frame.CodeRefused, "test refuses the first stream")
				return false
			}
			return true
		},
	})
	cl := env.dial()
	cl.send(soapRequest(1, "/svc", "", soapBody))
	resp, body := cl.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "<ok/>", string(body))
	require.Equal(t, int32(2), env.opens.Load())
	require.Len(t, up.requests(), 1)
	require.Equal(t, soapBody, string(up.requests()[0].body))
}

// lostStream passes the request through, then fails the response read with a
// non-retryable error once the upstream has the request (so the origin did see it).
// lostStream fails its reads once the upstream has the request: a tunnel stream lost
// after the origin received the exchange.
type lostStream struct {
	Stream
	seen <-chan upstreamReq
}

func (s lostStream) Read([]byte) (int, error) {
	<-s.seen
	return 0, retryErr{false}
}

// TestEdgeResumesAfterSend: a stream that fails after the whole request was sent is never
// sent again (the server may have it); the edge collects the response with a resume, so
// the client gets the real answer and the server runs the call once. When the response
// cannot be collected, the client is told the outcome is unknown, not that the call
// failed.
func TestEdgeResumesAfterSend(t *testing.T) {
	t.Run("stream lost after send", func(t *testing.T) {
		up := newUpstream(t, okResponse("<ok/>"))
		var calls atomic.Int32
		m := NewMetrics(nil)
		env := newEnv(t, envConfig{
			Metrics:   m,
			Upstreams: []Upstream{{Name: "up", Address: up.addr()}},
			Opener: func(base Opener) Opener {
				return OpenerFunc(func(ctx context.Context) (Stream, error) {
					st, err := base.OpenStream(ctx)
					if err != nil || calls.Add(1) > 1 {
						return st, err
					}
					return lostStream{Stream: st, seen: up.got}, nil
				})
			},
		})
		cl := env.dial()
		cl.send(soapRequest(1, "/svc", "", soapBody))
		resp, body := cl.read("POST")
		require.Equal(t, 200, resp.StatusCode, "%s", body)
		require.Equal(t, "<ok/>", string(body))
		require.Equal(t, int32(2), calls.Load(), "the exchange's stream, then one resume")
		require.Len(t, up.requests(), 1, "the request is never sent twice")
		require.Equal(t, 1.0, testutil.ToFloat64(m.held.resumes.WithLabelValues("edge", "ok")))
		require.Equal(t, 1.0, testutil.ToFloat64(m.held.resumes.WithLabelValues("origin", "ok")))
	})
	t.Run("tunnel session lost for good", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		up := newUpstream(t, func(int, upstreamReq) ([]byte, bool) {
			<-release
			return []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), false
		})
		// One session and no other: the resume never finds a connection, and the
		// exchange's deadline ends it.
		env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}},
			EdgeLimits: Limits{ExchangeTimeout: 2 * time.Second}})
		cl := env.dial()
		cl.send(soapRequest(1, "/svc", "", soapBody))
		<-up.got
		require.NoError(t, env.cs.Close())
		f := cl.readFault()
		requireGatewayStatus(t, f, 502)
		require.Equal(t, causeOutcomeUnknown, f.cause, "the server has the call: its outcome is unknown, not failed")
		require.True(t, f.resp.Close)
		require.Len(t, up.requests(), 1)
	})
}

// "Expect: 100-continue" is answered by the edge; the upstream never sees the Expect
// handshake fail, and the final response follows.
func TestEdgeExpectContinue(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}})
	cl := env.dial()
	cl.send("POST /svc HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
	interim := "HTTP/1.1 100 Continue\r\n\r\n"
	require.Equal(t, interim, string(cl.readExactly(len(interim))))
	cl.send("<x/>")
	resp, body := cl.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "<ok/>", string(body))
	require.Equal(t, "<x/>", string(up.requests()[0].body))
}

// A chunked client request reaches an upstream that does not take chunked bodies with a
// Content-Length, and one that does with chunks; the body is the same.
func TestEdgeOriginChunkedRequest(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	env := newEnv(t, envConfig{
		Upstreams: []Upstream{
			{Name: "legacy", Address: up.addr()},
			{Name: "modern", Address: up.addr(), Chunked: true},
		},
		Routes: []Route{
			{PathPrefix: "/legacy", Peer: "p", Upstream: "legacy"},
			{PathPrefix: "/modern", Peer: "p", Upstream: "modern"},
		},
	})
	for i, target := range []string{"/legacy", "/modern"} {
		cl := env.dial()
		cl.send("POST " + target + " HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
		resp, _ := cl.read("POST")
		require.Equal(t, 200, resp.StatusCode)
		r := up.requests()[i]
		require.Equal(t, "abcde", string(r.body))
		if target == "/legacy" {
			require.Equal(t, "POST /legacy HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nabcde", string(r.raw))
		} else {
			require.True(t, r.req.Chunked)
			require.False(t, r.req.Header.Has("Content-Length"))
		}
	}
}

// Regression: an HTTP/1.0 client may omit Host (many legacy SOAP stacks do). Forwarded as
// HTTP/1.1 such a request is invalid (RFC 9112 §3.2: servers answer 400), so the origin
// forwards it as HTTP/1.0, as the client sent it, rather than invent a Host.
func TestHTTP10RequestWithoutHostStaysHTTP10(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}})
	cl := env.dial()
	cl.send("POST /svc HTTP/1.0\r\nContent-Type: text/xml\r\nContent-Length: 4\r\n\r\n<x/>")
	resp, _ := cl.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	r := up.requests()[0]
	require.Equal(t, 0, r.req.ProtoMinor, "request without Host must stay HTTP/1.0 upstream:\n%s", r.raw)
	require.False(t, r.req.Header.Has("Host"), "the gateway must not invent a Host")
}

// Bodies over MaxRequestBytes get a 413 Fault (soap:Client) and never reach the upstream,
// whether the client announced the length or sent chunks.
func TestEdgeRequestTooLarge(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	env := newEnv(t, envConfig{
		Upstreams:  []Upstream{{Name: "up", Address: up.addr(), Chunked: true}},
		EdgeLimits: Limits{MaxRequestBytes: 16},
	})
	body := strings.Repeat("x", 17)
	t.Run("content-length", func(t *testing.T) {
		cl := env.dial()
		cl.send(soapRequest(1, "/svc", "", body))
		f := cl.readFault()
		requireGatewayStatus(t, f, 413)
		require.Equal(t, causeTooLarge, f.cause)
		require.Equal(t, "soap:Client", f.code)
		require.True(t, f.resp.Close)
	})
	t.Run("chunked", func(t *testing.T) {
		cl := env.dial()
		cl.send("POST /svc HTTP/1.1\r\nHost: h\r\nContent-Type: application/soap+xml\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"8\r\n12345678\r\n8\r\n12345678\r\n1\r\nX\r\n0\r\n\r\n")
		f := cl.readFault()
		requireGatewayStatus(t, f, 413)
		require.Equal(t, causeTooLarge, f.cause)
		require.Equal(t, "env:Sender", f.code)
		require.True(t, f.resp.Close)
	})
	// Exactly at the limit is fine.
	cl := env.dial()
	cl.send(soapRequest(1, "/svc", "", body[:16]))
	resp, _ := cl.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	for _, r := range up.requests() {
		require.Equal(t, body[:16], string(r.body), "no oversized body reached the upstream")
	}
}

// A response to HEAD has no body whatever its Content-Length says; the connection stays
// usable.
func TestEdgeOriginHeadRequest(t *testing.T) {
	up := newUpstream(t, func(_ int, r upstreamReq) ([]byte, bool) {
		if r.req.Method == "HEAD" {
			return []byte("HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: 1234\r\n\r\n"), false
		}
		return []byte("HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n"), false
	})
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr(), PoolSize: 1}}})
	cl := env.dial()
	want := "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: 1234\r\n\r\n"
	cl.send("HEAD /svc?wsdl HTTP/1.1\r\nHost: h\r\n\r\n")
	require.Equal(t, want, string(cl.readExactly(len(want))))
	want = "HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n"
	cl.send("GET /svc?wsdl HTTP/1.1\r\nHost: h\r\n\r\n")
	require.Equal(t, want, string(cl.readExactly(len(want))))
	cl.send("HEAD /svc?wsdl HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, body := cl.read("HEAD")
	require.Equal(t, 200, resp.StatusCode)
	require.Empty(t, body)
}

// An HTTP/1.0 client needs a Content-Length, so a close-delimited response is buffered at
// the edge; one over max_response_bytes gets a response_too_large fault (nothing of it
// was sent yet) instead of a cut connection.
func TestHTTP10ResponseOverLimitGetsFault(t *testing.T) {
	body := strings.Repeat("x", 4096)
	up := newUpstream(t, func(int, upstreamReq) ([]byte, bool) {
		return []byte("HTTP/1.0 200 OK\r\nContent-Type: text/xml\r\n\r\n" + body), true
	})
	env := newEnv(t, envConfig{
		Upstreams:  []Upstream{{Name: "up", Address: up.addr()}},
		EdgeLimits: Limits{MaxResponseBytes: 1024},
	})
	cl := env.dial()
	cl.send(soapRequest(0, "/svc", "", "<x/>"))
	f := cl.readFault()
	requireGatewayStatus(t, f, 502)
	require.Contains(t, f.text, "max_response_bytes")
	require.Equal(t, causeResponseLarge, f.cause)
	cl.requireClosed()
}

// cutEndStream delivers all of the request message but its last byte, then fails the
// read once the origin holds the exchange: a tunnel connection that died with the
// request's end in flight.
type cutEndStream struct {
	Stream
	origin *Origin
	wrote  bool
}

func (s *cutEndStream) Write(p []byte) (int, error) {
	if !s.wrote && len(p) > 1 {
		s.wrote = true
		if _, err := s.Stream.Write(p[:len(p)-1]); err != nil {
			return 0, err
		}
		return len(p), s.Stream.Flush()
	}
	return len(p), nil
}

func (s *cutEndStream) CloseWrite() error { return nil }

func (s *cutEndStream) Read([]byte) (int, error) {
	for give := time.Now().Add(testDeadline); time.Now().Before(give); runtime.Gosched() {
		s.origin.held.mu.Lock()
		n := len(s.origin.held.byID)
		s.origin.held.mu.Unlock()
		if n > 0 {
			break
		}
	}
	return 0, retryErr{false}
}

// TestEdgeResendsRequestCutAtItsEnd: the tunnel connection dies after the edge wrote the
// whole request but before its last byte reached the origin. The origin never sent it to
// the server whole, says so to the edge's resume (not_run), and the edge sends the
// request again: the client gets the real answer and the server runs it once.
func TestEdgeResendsRequestCutAtItsEnd(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	var calls atomic.Int32
	m := NewMetrics(nil)
	env := envFirstStream(t, up, m, &calls, func(env *testEnv, st Stream) Stream {
		return &cutEndStream{Stream: st, origin: env.origin}
	})
	cl := env.dial()
	cl.send(soapRequest(1, "/svc", "", soapBody))
	resp, body := cl.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "<ok/>", string(body))
	require.Equal(t, int32(3), calls.Load(), "the cut stream, the resume, the request sent again")
	require.Len(t, up.requests(), 1, "the server got it whole once")
	require.Equal(t, 1.0, testutil.ToFloat64(m.held.resumes.WithLabelValues("edge", "not_run")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.held.resumes.WithLabelValues("origin", "not_run")))
}

// unsentStream takes the request as sent and fails when the response is read, as a
// connection does that dies with the request still in its buffers: nothing reached the
// origin. Its connection's HELLO named instance.
type unsentStream struct {
	Stream
	instance string
}

func (s *unsentStream) Write(p []byte) (int, error) { return len(p), nil }
func (s *unsentStream) CloseWrite() error           { return nil }
func (s *unsentStream) Read([]byte) (int, error)    { return 0, retryErr{false} }
func (s *unsentStream) PeerInstance() string        { return s.instance }

// TestEdgeResendsRequestThatNeverReachedTheOrigin: the tunnel connection dies with the
// whole request written at the edge and none of it at the origin. The origin process that
// set that connection up knows it never got the request (its HELLO named it; nothing it
// forgot since could be it), says so to the resume (not_run), and the edge sends the
// request again: the client gets the real answer, the server runs the call once. Another
// process (a restart, a replica) cannot know that: outcome_unknown.
func TestEdgeResendsRequestThatNeverReachedTheOrigin(t *testing.T) {
	for _, tc := range []struct {
		name         string
		instance     func(o *Origin) string
		wantStatus   int
		wantCalls    int32
		wantUpstream int
		edge, origin string // resume results counted
	}{
		{"same origin process", func(o *Origin) string { return o.ConnectionInstance() }, 200, 3, 1, "not_run", "never_arrived"},
		{"another origin process", func(*Origin) string { return newOriginInstance().connection() }, 502, 2, 0, "not_held", "not_held"},
		{"an edge that names no instance", func(*Origin) string { return "" }, 502, 2, 0, "not_held", "not_held"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, okResponse("<ok/>"))
			var calls atomic.Int32
			m := NewMetrics(nil)
			env := envFirstStream(t, up, m, &calls, func(env *testEnv, st Stream) Stream {
				return &unsentStream{Stream: st, instance: tc.instance(env.origin)}
			})
			cl := env.dial()
			cl.send(soapRequest(1, "/svc", "", soapBody))
			if tc.wantStatus == 200 {
				resp, body := cl.read("POST")
				require.Equal(t, 200, resp.StatusCode, "%s", body)
				require.Equal(t, "<ok/>", string(body))
			} else {
				f := cl.readFault()
				require.Equal(t, causeOutcomeUnknown, f.cause)
			}
			require.Equal(t, tc.wantCalls, calls.Load())
			require.Len(t, up.requests(), tc.wantUpstream, "never run twice")
			require.Equal(t, 1.0, testutil.ToFloat64(m.held.resumes.WithLabelValues("edge", tc.edge)))
			require.Equal(t, 1.0, testutil.ToFloat64(m.held.resumes.WithLabelValues("origin", tc.origin)))
		})
	}
}

// envFirstStream is a pair whose edge gets its first tunnel stream through wrap (a stream
// that fails in some way) and the later ones as they are; calls counts the streams opened.
func envFirstStream(t *testing.T, up *fakeUpstream, m *Metrics, calls *atomic.Int32, wrap func(env *testEnv, st Stream) Stream) *testEnv {
	var env *testEnv
	env = newEnv(t, envConfig{
		Metrics:   m,
		Upstreams: []Upstream{{Name: "up", Address: up.addr()}},
		Opener: func(base Opener) Opener {
			return OpenerFunc(func(ctx context.Context) (Stream, error) {
				st, err := base.OpenStream(ctx)
				if err != nil || calls.Add(1) > 1 {
					return st, err
				}
				return wrap(env, st), nil
			})
		},
	})
	return env
}

// TestOriginSkipsPooledConnectionsTheServerClosed: a keep-alive server that closes an
// idle connection (its idle timeout, here 50 ms) never gets a request written into the
// closed connection: the origin checks a pooled connection before it reuses it
// (aliveProbe) and dials a new one, so every call succeeds.
func TestOriginSkipsPooledConnectionsTheServerClosed(t *testing.T) {
	const body = "<r>ok</r>"
	resp := "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	up := newUpstream(t, okResponse(body))
	up.idle.Store(int64(50 * time.Millisecond))
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr(), PoolSize: 2, IdleTimeout: time.Minute}}})
	pool := (*env.origin.pools.Load())["up"]
	cl := env.dial()
	for i := range 3 {
		cl.send("POST /svc HTTP/1.1\r\nHost: svc.example\r\nContent-Type: text/xml\r\nContent-Length: 3\r\n\r\nabc")
		require.Equal(t, resp, string(cl.readExactly(len(resp))), "call %d", i)
		// The connection went back to the pool, and the server closes it meanwhile.
		require.Eventually(t, func() bool {
			pool.mu.Lock()
			defer pool.mu.Unlock()
			return len(pool.idle) == 1 && up.closed.Load() == int32(i+1)
		}, testDeadline, time.Millisecond)
	}
	require.Equal(t, 3, up.numConns(), "a closed pooled connection is never reused")
}
