package tunnel

import (
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// logBuf collects log output; safe for concurrent use.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type testServer struct {
	*Server
	m      *Metrics
	ln     net.Listener
	addr   string
	log    *logBuf
	served chan error
}

// newTestServer runs a Server on a loopback listener; the caller stops it.
func newTestServer(t *testing.T, cfg *Config, maxConns int, h StreamHandler) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	lb := &logBuf{}
	log := slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := NewMetrics(prometheus.NewRegistry())
	ts := &testServer{Server: NewServer(ServerConfig{Session: cfg, MaxConnections: maxConns}, m, log, h), m: m, ln: ln, addr: ln.Addr().String(), log: lb, served: make(chan error, 1)}
	go func() { ts.served <- ts.Serve(ln) }()
	return ts
}

// stop closes the listener, shuts the server down and waits for Serve to return.
func (ts *testServer) stop(t *testing.T) {
	t.Helper()
	_ = ts.ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = ts.Shutdown(ctx)
	select {
	case err := <-ts.served:
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		t.Error("Serve did not return after the listener closed")
	}
}

// startServer is newTestServer stopped at test end.
func startServer(t *testing.T, cfg *Config, maxConns int, h StreamHandler) *testServer {
	t.Helper()
	ts := newTestServer(t, cfg, maxConns, h)
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

// sessions is a snapshot of the server's registered sessions.
func (ts *testServer) sessions() []*Session {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]*Session, 0, len(ts.Server.sessions))
	for s := range ts.Server.sessions {
		out = append(out, s)
	}
	return out
}

// workers is the number of stream workers running for s.
func (ts *testServer) workers(s *Session) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return int(ts.Server.sessions[s].live.Load())
}

// echoHandler is echoServer's behaviour as a StreamHandler.
func echoHandler(ctx context.Context, st *Stream) {
	defer st.Close()
	b, err := io.ReadAll(st)
	if err != nil {
		return
	}
	_, _ = st.Write([]byte("re:"))
	_, _ = st.Write(b)
	_ = st.CloseWrite()
}

// dialSession opens a client session to addr; it is closed at test end.
func dialSession(t *testing.T, addr string, cfg *Config) (*Session, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := ClientSession(ctx, conn, cfg, nil, "test")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, nil
}

func TestServerHandlerPerStream(t *testing.T) {
	const n = 8
	var running atomic.Int32
	all := make(chan struct{})
	var seen sync.Map
	ts := startServer(t, nil, 0, func(ctx context.Context, st *Stream) {
		if _, dup := seen.LoadOrStore(st, true); dup {
			t.Error("handler called twice for one stream")
		}
		if running.Add(1) == n {
			close(all)
		}
		select { // every stream has its own handler running at the same time
		case <-all:
		case <-time.After(3 * time.Second):
		}
		echoHandler(ctx, st)
	})
	c, err := dialSession(t, ts.addr, nil)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := []byte{'a' + byte(i)}
			got, err := exchange(context.Background(), c, msg)
			if err != nil || !bytes.Equal(got, append([]byte("re:"), msg...)) {
				t.Errorf("stream %d: %q, %v", i, got, err)
			}
		}()
	}
	select {
	case <-all:
	case <-time.After(3 * time.Second):
		t.Fatalf("only %d of %d handlers ran concurrently", running.Load(), n)
	}
	wg.Wait()
}

// goroutineID is the running goroutine's id, from its stack header.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	f := strings.Fields(string(b))
	return f[1] // "goroutine 123 [running]:"
}

// TestServerStreamWorkersReused: streams are served by long-lived workers, not a
// goroutine each: sequential exchanges run on a few goroutines, and after a burst
// of concurrent ones at most maxIdleWorkers stay waiting.
func TestServerStreamWorkersReused(t *testing.T) {
	var mu sync.Mutex
	ran := map[string]int{}
	release := make(chan struct{})
	var burst atomic.Int32
	ts := startServer(t, nil, 0, func(ctx context.Context, st *Stream) {
		mu.Lock()
		ran[goroutineID()]++
		mu.Unlock()
		if burst.Load() > 0 {
			burst.Add(-1)
			<-release // hold the burst's handlers so that each needs its own worker
		}
		echoHandler(ctx, st)
	})
	c, err := dialSession(t, ts.addr, nil)
	require.NoError(t, err)
	call := func() {
		got, err := exchange(context.Background(), c, []byte("x"))
		if err != nil || string(got) != "re:x" {
			t.Errorf("exchange: %q, %v", got, err)
		}
	}
	for range 200 {
		call()
	}
	mu.Lock()
	// A client may send its next request before the worker that answered is waiting
	// again: then another starts, up to the idle bound.
	require.LessOrEqual(t, len(ran), maxIdleWorkers+1, "200 sequential exchanges ran on %d goroutines", len(ran))
	clear(ran)
	mu.Unlock()

	const n = 3 * maxIdleWorkers
	burst.Store(n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() { defer wg.Done(); call() }()
	}
	require.Eventually(t, func() bool { return burst.Load() == 0 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	mu.Lock()
	require.GreaterOrEqual(t, len(ran), n, "the burst's exchanges ran at once")
	mu.Unlock()
	sessions := ts.sessions()
	require.Len(t, sessions, 1)
	require.Eventually(t, func() bool { return ts.workers(sessions[0]) <= maxIdleWorkers+1 }, 5*time.Second, time.Millisecond,
		"workers left waiting after the burst")
}

func TestServerShutdownDrains(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	var handlerDone atomic.Bool
	ts := startServer(t, nil, 0, func(ctx context.Context, st *Stream) {
		defer handlerDone.Store(true)
		defer st.Close()
		_, _ = io.ReadAll(st)
		close(started)
		<-release
		_, _ = st.Write([]byte("late answer"))
		_ = st.CloseWrite()
	})
	c, err := dialSession(t, ts.addr, nil)
	require.NoError(t, err)
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	_, err = st.Write([]byte("<req/>"))
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	<-started

	require.NoError(t, ts.ln.Close())
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		shut <- ts.Shutdown(ctx)
	}()
	require.Eventually(t, c.Draining, 2*time.Second, time.Millisecond, "client never saw GOAWAY")
	_, err = c.OpenStream(context.Background())
	require.ErrorIs(t, err, ErrGoAway)
	var r interface{ Retryable() bool }
	require.True(t, errors.As(err, &r) && r.Retryable(), "%v", err)

	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a handler was still running", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, c.Err(), "session closed before its handler finished")
	close(release)
	select {
	case err := <-shut:
		require.NoError(t, err)
	case <-time.After(3 * time.Second):
		t.Fatal("Shutdown did not return after the handler finished")
	}
	require.True(t, handlerDone.Load())
	require.Empty(t, ts.sessions())
	select {
	case <-c.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("client session still open after Shutdown")
	}
}

// pipeListener is a net.Listener whose connections are net.Pipe ends: no socket buffers,
// so a byte the server writes is only gone once the client read it.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial() (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// slowConn is a link that delivers one read's worth of bytes per delay, like a slow WAN.
type slowConn struct {
	net.Conn
	delay time.Duration
}

func (c slowConn) Read(b []byte) (int, error) {
	time.Sleep(c.delay)
	return c.Conn.Read(b)
}

// Shutdown delivers what finished handlers wrote: a handler returns as soon as its
// response is queued (CloseWrite returns once the last frame is in the send ring), so the
// sessions must write their queues before closing. Here a 2 MiB response goes over a slow
// link (a pipe read every 5 ms) to a client with an 8 MiB window: the handler finishes at
// once while the bytes are still queued. (Was a bug: Shutdown used Session.Close, which
// drops the queue; fixed by Session.CloseGracefully.)
func TestServerShutdownFlushesFinishedResponse(t *testing.T) {
	resp := bytes.Repeat([]byte("<r/>"), 512<<10) // 2 MiB
	handled := make(chan struct{})
	srv := NewServer(ServerConfig{}, nil, nil, func(ctx context.Context, st *Stream) {
		defer close(handled)
		defer st.Close()
		_, _ = io.ReadAll(st)
		_, _ = st.Write(resp)
		_ = st.CloseWrite()
	})
	ln := newPipeListener()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	conn, err := ln.dial()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	c, err := ClientSession(ctx, slowConn{conn, 5 * time.Millisecond}, &Config{StreamWindow: 8 << 20}, nil, "slow")
	require.NoError(t, err)
	defer c.Close()
	st, err := c.OpenStream(ctx)
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	<-handled
	require.NoError(t, ln.Close())
	require.NoError(t, srv.Shutdown(ctx))
	require.NoError(t, <-served)
	got, err := io.ReadAll(st)
	require.NoError(t, err, "a response the handler completed was lost by Shutdown (got %d of %d bytes)", len(got), len(resp))
	require.Equal(t, len(resp), len(got))
}

func TestServerShutdownExpiredContext(t *testing.T) {
	started := make(chan struct{})
	handlerErr := make(chan error, 1)
	ts := startServer(t, nil, 0, func(ctx context.Context, st *Stream) {
		defer st.Close()
		close(started)
		_, err := io.ReadAll(st) // the client never ends its request
		handlerErr <- err
	})
	c, err := dialSession(t, ts.addr, nil)
	require.NoError(t, err)
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	_, err = st.Write([]byte("<never-ending"))
	require.NoError(t, err)
	require.NoError(t, st.Flush())
	<-started
	require.NoError(t, ts.ln.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err = ts.Shutdown(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(begin), 2*time.Second)
	select {
	case err := <-handlerErr:
		require.ErrorIs(t, err, ErrSessionClosed)
	case <-time.After(2 * time.Second):
		t.Fatal("handler still running after Shutdown")
	}
	require.Eventually(t, func() bool { return len(ts.sessions()) == 0 }, 2*time.Second, 2*time.Millisecond)
	select {
	case <-c.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("client session still open after Shutdown")
	}
	_, err = io.ReadAll(st)
	require.ErrorIs(t, err, ErrSessionClosed)
}

// Shutdown returns ctx.Err() once ctx is done even if a handler ignores both its ctx and
// its stream (an upstream call with its own long timeout), as net/http's does. (Was a bug:
// Shutdown waited for handlers again, unbounded, after closing the sessions.)
func TestServerShutdownReturnsAtCtxDespiteStuckHandler(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	ts := startServer(t, nil, 0, func(ctx context.Context, st *Stream) {
		defer st.Close()
		close(started)
		select {
		case <-release:
		case <-time.After(3 * time.Second):
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server's cleanup
	c, err := dialSession(t, ts.addr, nil)
	require.NoError(t, err)
	st, err := c.OpenStream(context.Background())
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	<-started
	require.NoError(t, ts.ln.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- ts.Shutdown(ctx) }()
	select {
	case err := <-shut:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(time.Second):
		t.Fatal("Shutdown still blocked 1 s after its ctx expired")
	}
}

func TestServerMaxConns(t *testing.T) {
	ts := startServer(t, nil, 2, echoHandler)
	a, err := dialSession(t, ts.addr, nil)
	require.NoError(t, err)
	b, err := dialSession(t, ts.addr, nil)
	require.NoError(t, err)
	_, err = dialSession(t, ts.addr, nil)
	require.ErrorIs(t, err, ErrHandshake, "a connection beyond maxConns must be closed")
	require.Eventually(t, func() bool { return strings.Contains(ts.log.String(), "connection_limit") }, time.Second, 5*time.Millisecond)
	for _, s := range []*Session{a, b} {
		got, err := exchange(context.Background(), s, []byte("x"))
		require.NoError(t, err)
		require.Equal(t, []byte("re:x"), got)
	}
	// A slot frees when a session ends.
	require.NoError(t, a.Close())
	require.Eventually(t, func() bool {
		s, err := dialSession(t, ts.addr, nil)
		if err != nil {
			return false
		}
		got, err := exchange(context.Background(), s, []byte("y"))
		return err == nil && string(got) == "re:y"
	}, 2*time.Second, 20*time.Millisecond)
}

func TestServerHandshakeGarbageIsolated(t *testing.T) {
	ts := startServer(t, &Config{HandshakeTimeout: 300 * time.Millisecond}, 0, echoHandler)
	good, err := dialSession(t, ts.addr, nil)
	require.NoError(t, err)

	for name, garbage := range map[string][]byte{
		"http":    []byte("POST /soap HTTP/1.1\r\nHost: origin\r\nContent-Length: 0\r\n\r\n"),
		"short":   []byte{0, 0, 5},                                         // then silence: handshake timeout
		"ping":    appendFrame(nil, frame.TypePing, 0, 0, make([]byte, 8)), // valid frame, not HELLO
		"badjson": appendFrame(nil, frame.TypeHello, 0, 0, []byte("{not json")),
	} {
		t.Run(name, func(t *testing.T) {
			raw, err := net.Dial("tcp", ts.addr)
			require.NoError(t, err)
			defer raw.Close()
			_, err = raw.Write(garbage)
			require.NoError(t, err)
			_ = raw.SetReadDeadline(time.Now().Add(3 * time.Second))
			// The server closes the connection (EOF, or a reset if it left bytes unread).
			_, err = io.Copy(io.Discard, raw)
			var ne net.Error
			require.False(t, errors.As(err, &ne) && ne.Timeout(), "server kept a garbage connection open")
		})
	}
	// Counted by cause; logged at most once per cause and interval.
	require.Eventually(t, func() bool { return handshakes(ts.m, resultHello) == 4 }, 2*time.Second, 5*time.Millisecond, ts.log.String())
	require.Equal(t, 1, strings.Count(ts.log.String(), "tunnel handshake refused"), ts.log.String())
	require.Contains(t, ts.log.String(), ErrHandshake.Error())
	// The established session did not notice.
	require.NoError(t, good.Err())
	got, err := exchange(context.Background(), good, []byte("still here"))
	require.NoError(t, err)
	require.Equal(t, []byte("re:still here"), got)
	require.Len(t, ts.sessions(), 1)
}

func TestServerRejectsOtherProtocolVersion(t *testing.T) {
	future := rawHello()
	future.Proto = frame.Proto + 1

	t.Run("server", func(t *testing.T) {
		ts := startServer(t, nil, 0, echoHandler)
		raw, err := net.Dial("tcp", ts.addr)
		require.NoError(t, err)
		defer raw.Close()
		_, err = raw.Write(helloFrame(future))
		require.NoError(t, err)
		_ = raw.SetReadDeadline(time.Now().Add(3 * time.Second))
		h, _, err := readFrame(raw)
		require.NoError(t, err)
		require.Equal(t, frame.TypeHello, h.Type)
		h, p, err := readFrame(raw)
		require.NoError(t, err)
		require.Equal(t, frame.TypeGoAway, h.Type)
		_, code, reason, err := frame.ParseGoAway(p)
		require.NoError(t, err)
		require.Equal(t, frame.CodeProtocol, code)
		require.Contains(t, reason, "protocol version")
		_, _, err = readFrame(raw)
		require.ErrorIs(t, err, io.EOF)
		require.Eventually(t, func() bool { return strings.Contains(ts.log.String(), "tunnel handshake refused") }, time.Second, 5*time.Millisecond)
		require.Empty(t, ts.sessions())
	})

	t.Run("ServerSession", func(t *testing.T) {
		raw, conn := net.Pipe()
		done := make(chan error, 1)
		go func() {
			_ = raw.SetDeadline(time.Now().Add(3 * time.Second))
			_, _ = raw.Write(helloFrame(future))
			for {
				h, p, err := readFrame(raw)
				if err != nil {
					done <- err
					return
				}
				if h.Type == frame.TypeGoAway {
					_, code, _, _ := frame.ParseGoAway(p)
					if code != frame.CodeProtocol {
						done <- errors.New("GOAWAY with code " + code.String())
						return
					}
					done <- nil
					return
				}
			}
		}()
		_, err := ServerSession(context.Background(), conn, nil, nil)
		require.ErrorIs(t, err, ErrHandshake)
		require.ErrorContains(t, err, "protocol version")
		require.NoError(t, <-done)
	})

	t.Run("ClientSession", func(t *testing.T) {
		conn, raw := tcpPair(t)
		defer raw.Close()
		_, err := raw.Write(helloFrame(future))
		require.NoError(t, err)
		_, err = ClientSession(context.Background(), conn, nil, nil, "future")
		require.ErrorIs(t, err, ErrHandshake)
		code, _ := expectGoAway(t, raw)
		require.Equal(t, frame.CodeProtocol, code)
	})
}

// handshakes is the value of soapgw_tunnel_handshakes_total{result}.
func handshakes(m *Metrics, result string) int {
	return int(promtestutil.ToFloat64(m.handshakes.WithLabelValues(result)))
}
