package tunnel

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// startPeer runs a Peer to addr; it is closed at test end.
func startPeer(t *testing.T, addr string, mod func(*PeerConfig)) *Peer {
	t.Helper()
	cfg := PeerConfig{Name: "origin", Address: addr, Connections: 1, DialTimeout: time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	p := NewPeer(context.Background(), cfg, nil, nil)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// peerExchange is exchange over a stream the Peer picks.
func peerExchange(ctx context.Context, p *Peer, msg []byte) ([]byte, error) {
	st, err := p.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	return exchangeOn(st, msg)
}

// exchangeOn sends msg on an open stream and reads the whole answer, then closes it.
func exchangeOn(st *Stream, msg []byte) ([]byte, error) {
	defer st.Close()
	if _, err := st.Write(msg); err != nil {
		return nil, err
	}
	if err := st.CloseWrite(); err != nil {
		return nil, err
	}
	return io.ReadAll(st)
}

func waitSessions(t *testing.T, p *Peer, n int) []*Session {
	t.Helper()
	require.Eventually(t, func() bool { return len(p.sessionsSnapshot()) == n }, 3*time.Second, 2*time.Millisecond, "peer never had %d sessions", n)
	return p.sessionsSnapshot()
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestPeerConnectsAndReady(t *testing.T) {
	ts := startServer(t, nil, 0, echoHandler)
	p := startPeer(t, ts.addr, func(c *PeerConfig) { c.Connections = 3 })
	require.Equal(t, "origin", p.Name())
	require.Eventually(t, p.Ready, 3*time.Second, 2*time.Millisecond)
	ss := waitSessions(t, p, 3)
	require.Eventually(t, func() bool { return len(ts.sessions()) == 3 }, 2*time.Second, 2*time.Millisecond)
	for _, s := range ss {
		require.NoError(t, s.Err())
		require.False(t, s.Draining())
	}
	got, err := peerExchange(context.Background(), p, []byte("hi"))
	require.NoError(t, err)
	require.Equal(t, []byte("re:hi"), got)
}

func TestPeerSpreadsStreamsLeastLoaded(t *testing.T) {
	ts := startServer(t, nil, 0, echoHandler)
	p := startPeer(t, ts.addr, func(c *PeerConfig) { c.Connections = 3 })
	ss := waitSessions(t, p, 3)
	perSession := func(sts []*Stream) map[*Session][]*Stream {
		m := map[*Session][]*Stream{}
		for _, st := range sts {
			m[st.Session()] = append(m[st.Session()], st)
		}
		return m
	}
	var sts []*Stream
	for range 9 {
		st, err := p.OpenStream(context.Background())
		require.NoError(t, err)
		sts = append(sts, st)
	}
	m := perSession(sts)
	require.Len(t, m, 3)
	for _, s := range ss {
		require.Len(t, m[s], 3, "streams not spread evenly")
		require.Equal(t, 3, s.NumStreams())
	}
	// Free one session: the next streams go there until it is as loaded as the others.
	for _, st := range m[ss[1]] {
		require.NoError(t, st.Close())
	}
	var more []*Stream
	for range 3 {
		st, err := p.OpenStream(context.Background())
		require.NoError(t, err)
		more = append(more, st)
	}
	require.Len(t, perSession(more)[ss[1]], 3, "new streams did not go to the least loaded session")
	for _, st := range append(sts, more...) {
		_ = st.Close()
	}
}

func TestPeerNoListenerFailsFast(t *testing.T) {
	const dialTimeout = 300 * time.Millisecond
	t.Run("refused", func(t *testing.T) {
		p := startPeer(t, closedAddr(t), func(c *PeerConfig) { c.DialTimeout = dialTimeout })
		begin := time.Now()
		st, err := p.OpenStream(context.Background())
		took := time.Since(begin)
		require.Nil(t, st)
		require.ErrorIs(t, err, ErrNoPeer)
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		require.ErrorContains(t, err, "connection refused")
		require.Less(t, took, dialTimeout+time.Second)
		require.False(t, p.Ready())
	})
	t.Run("ctx", func(t *testing.T) {
		p := startPeer(t, closedAddr(t), func(c *PeerConfig) { c.DialTimeout = 5 * time.Second })
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		begin := time.Now()
		_, err := p.OpenStream(ctx)
		require.ErrorIs(t, err, ErrNoPeer)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(begin), time.Second)
	})
	t.Run("blackhole", func(t *testing.T) {
		// A dial that never completes is bounded by DialTimeout too.
		p := startPeer(t, "192.0.2.1:9", func(c *PeerConfig) {
			c.DialTimeout = dialTimeout
			c.Dial = func(ctx context.Context, _ string) (net.Conn, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}
		})
		begin := time.Now()
		_, err := p.OpenStream(context.Background())
		require.ErrorIs(t, err, ErrNoPeer)
		require.Less(t, time.Since(begin), dialTimeout+time.Second)
	})
}

func TestPeerReconnectsAfterServerClosesSession(t *testing.T) {
	ts := startServer(t, nil, 0, echoHandler)
	p := startPeer(t, ts.addr, nil)
	old := waitSessions(t, p, 1)[0]
	got, err := peerExchange(context.Background(), p, []byte("one"))
	require.NoError(t, err)
	require.Equal(t, []byte("re:one"), got)

	var victim []*Session
	require.Eventually(t, func() bool { victim = ts.sessions(); return len(victim) == 1 }, time.Second, 2*time.Millisecond)
	require.NoError(t, victim[0].Close()) // the origin kills the connection
	select {
	case <-old.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("peer did not notice the server closed the connection")
	}
	require.Eventually(t, func() bool {
		ss := p.sessionsSnapshot()
		return len(ss) == 1 && ss[0] != old && p.Ready()
	}, 3*time.Second, 2*time.Millisecond, "no replacement session")
	got, err = peerExchange(context.Background(), p, []byte("two"))
	require.NoError(t, err)
	require.Equal(t, []byte("re:two"), got)
}

// Dial failures back off exponentially with jitter, capped at BackoffMax. It runs in a
// synctest bubble: the dialer fails at once and time is the bubble's fake clock, so the
// gaps between attempts are exactly the backoff the Peer chose, on any machine at any
// load, and the test takes no wall time.
func TestPeerBackoffJitteredExponential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bmin, bmax = 10 * time.Millisecond, 80 * time.Millisecond
		var mu sync.Mutex
		var at []time.Time
		p := NewPeer(context.Background(), PeerConfig{
			Name: "origin", Address: "origin.invalid:1", Connections: 1, DialTimeout: time.Second,
			BackoffMin: bmin, BackoffMax: bmax,
			Dial: func(ctx context.Context, _ string) (net.Conn, error) {
				mu.Lock()
				at = append(at, time.Now())
				mu.Unlock()
				return nil, errors.New("test: dial refused")
			},
		}, nil, nil)
		time.Sleep(2 * time.Second) // fake time: every timer of the Peer fires on schedule
		require.NoError(t, p.Close())
		synctest.Wait() // the Peer's goroutines have exited

		mu.Lock()
		defer mu.Unlock()
		require.GreaterOrEqual(t, len(at), 2*int(time.Second/bmax), "attempts in 2 s of backoff")
		backoff := bmin
		var capped []time.Duration
		for i := 1; i < len(at); i++ {
			g := at[i].Sub(at[i-1])
			// Full jitter in [backoff/2, backoff): never a reconnect storm, never longer.
			require.GreaterOrEqual(t, g, backoff/2, "gap %d below half the backoff %v", i, backoff)
			require.Less(t, g, backoff, "gap %d not below the backoff %v", i, backoff)
			if backoff == bmax {
				capped = append(capped, g)
			}
			backoff = min(2*backoff, bmax)
		}
		// Jitter: the capped delays are not all the same.
		require.Greater(t, len(slices.Compact(slices.Sorted(slices.Values(capped)))), 1, "no jitter: %v", capped)
	})
}

// TestPeerBacksOffWhenSessionsDieAtOnce: a peer that completes the handshake and then drops
// the connection (or sends GOAWAY at once) used to be redialled with no delay, hundreds of
// times a second. A session that dies young now counts as a failure for the backoff.
func TestPeerBacksOffWhenSessionsDieAtOnce(t *testing.T) {
	for _, mode := range []string{"close", "goaway"} {
		t.Run(mode, func(t *testing.T) {
			// A synctest bubble with in-memory connections: 500 ms of the bubble's fake
			// time, so the count of reconnects does not depend on the machine's load.
			synctest.Test(t, func(t *testing.T) {
				var handshakes atomic.Int64
				var mu sync.Mutex
				var keep []*Session
				var wg sync.WaitGroup
				var dials atomic.Int64
				p := NewPeer(context.Background(), PeerConfig{Name: "storm", Address: "pipe", Connections: 1,
					BackoffMin: 50 * time.Millisecond, BackoffMax: time.Second,
					Dial: func(ctx context.Context, _ string) (net.Conn, error) {
						if dials.Add(1) > 100 {
							// A storm: redials with no delay would keep fake time from
							// advancing; a failed dial backs off, so the test ends.
							return nil, errors.New("test: reconnect storm")
						}
						c, srv := net.Pipe()
						wg.Add(1)
						go func() {
							defer wg.Done()
							s, err := ServerSession(context.Background(), srv, &Config{KeepaliveInterval: 0}, nil)
							if err != nil {
								return
							}
							handshakes.Add(1)
							if mode == "close" {
								_ = s.Close()
								return
							}
							s.GoAway(frame.CodeNoError, "draining")
							mu.Lock()
							keep = append(keep, s)
							mu.Unlock()
						}()
						return c, nil
					}}, nil, nil)
				time.Sleep(500 * time.Millisecond)
				_ = p.Close()
				mu.Lock()
				for _, s := range keep {
					_ = s.Close()
				}
				mu.Unlock()
				wg.Wait()
				n := handshakes.Load()
				t.Logf("%s: %d handshakes in 500 ms with BackoffMin 50 ms", mode, n)
				// Without backoff for sessions that die young this was hundreds; with
				// backoff from 50 ms doubling, at most about log2(500/25)+2 attempts fit.
				require.GreaterOrEqual(t, n, int64(2), "the Peer kept trying")
				require.LessOrEqual(t, n, int64(8), "reconnect storm")
			})
		})
	}
}

// GOAWAY makes the Peer open a replacement session while the old one finishes its streams.
func TestPeerGoAwayOpensReplacement(t *testing.T) {
	ts := startServer(t, nil, 0, echoHandler)
	p := startPeer(t, ts.addr, nil)
	old := waitSessions(t, p, 1)[0]
	st, err := p.OpenStream(context.Background())
	require.NoError(t, err)
	require.Same(t, old, st.Session())
	_, err = st.Write([]byte("part1,"))
	require.NoError(t, err)
	require.NoError(t, st.Flush())
	var srvSide *Session
	require.Eventually(t, func() bool {
		ss := ts.sessions()
		if len(ss) == 1 && ss[0].NumStreams() == 1 {
			srvSide = ss[0]
			return true
		}
		return false
	}, 2*time.Second, 2*time.Millisecond)

	srvSide.GoAway(frame.CodeNoError, "restarting")
	require.Eventually(t, func() bool {
		ss := p.sessionsSnapshot()
		return len(ss) == 2 && p.Ready()
	}, 3*time.Second, 2*time.Millisecond, "no replacement session after GOAWAY")
	require.True(t, old.Draining())
	require.NoError(t, old.Err())

	// New streams go to the replacement.
	st2, err := p.OpenStream(context.Background())
	require.NoError(t, err)
	require.NotSame(t, old, st2.Session())
	_ = st2.Close()
	got, err := peerExchange(context.Background(), p, []byte("new"))
	require.NoError(t, err)
	require.Equal(t, []byte("re:new"), got)

	// The stream on the draining session completes.
	_, err = st.Write([]byte("part2"))
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	got, err = io.ReadAll(st)
	require.NoError(t, err)
	require.Equal(t, []byte("re:part1,part2"), got)
	require.NoError(t, st.Close())
	require.Eventually(t, func() bool { return old.NumStreams() == 0 }, time.Second, 2*time.Millisecond)

	// When the origin closes the drained session, the Peer forgets it.
	require.NoError(t, srvSide.Close())
	require.Eventually(t, func() bool {
		ss := p.sessionsSnapshot()
		return len(ss) == 1 && ss[0] != old
	}, 2*time.Second, 2*time.Millisecond)
}

// TestPeerOpenStreamWaitsForFreeStreamSlot: when every session is at the peer's
// max_streams, OpenStream used to wait for the set of sessions to change and then report
// "no connection up". A finishing stream now wakes it, and only the caller's deadline
// ends the wait, with ErrStreamLimit (MaxConnections is Connections here: no extra one).
func TestPeerOpenStreamWaitsForFreeStreamSlot(t *testing.T) {
	// In a synctest bubble over net.Pipe: "a freed slot wakes the waiter at once" is a
	// statement about fake time, exact on any machine.
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		srv := NewServer(ServerConfig{Session: &Config{MaxStreams: 2, KeepaliveInterval: 0}}, nil, nil, echoHandler)
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		p := NewPeer(context.Background(), PeerConfig{Name: "origin", Address: "pipe", Connections: 1,
			DialTimeout: 1500 * time.Millisecond,
			Dial:        func(context.Context, string) (net.Conn, error) { return ln.dial() },
			Session:     &Config{KeepaliveInterval: 0}}, nil, nil)
		synctest.Wait()
		require.True(t, p.Ready())
		a, err := p.OpenStream(context.Background())
		require.NoError(t, err)
		b, err := p.OpenStream(context.Background())
		require.NoError(t, err)
		go func() {
			time.Sleep(50 * time.Millisecond)
			_ = a.Close()
		}()
		begin := time.Now()
		st, err := p.OpenStream(context.Background())
		took := time.Since(begin)
		require.NoError(t, err, "the freed slot is used")
		require.Equal(t, 50*time.Millisecond, took, "the waiter wakes when the slot frees, not at a timeout")
		_ = st.Close()

		// With both slots held to the end, the wait lasts as long as the caller's
		// deadline (the exchange's, not the dial timeout) and ends with ErrStreamLimit.
		c, err := p.OpenStream(context.Background())
		require.NoError(t, err)
		begin = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 7*time.Second)
		_, err = p.OpenStream(ctx)
		cancel()
		require.ErrorIs(t, err, ErrStreamLimit)
		require.Equal(t, 7*time.Second, time.Since(begin))

		_ = b.Close()
		_ = c.Close()
		require.NoError(t, p.Close())
		require.NoError(t, ln.Close())
		require.NoError(t, srv.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})
}

// Close stops every goroutine the Peer started, including the ones that wait for a
// draining session to end.
func TestPeerCloseStopsGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	func() {
		ts := newTestServer(t, nil, 0, echoHandler)
		defer ts.stop(t)
		p := NewPeer(context.Background(), PeerConfig{Name: "g", Address: ts.addr, Connections: 2, BackoffMin: 10 * time.Millisecond}, nil, nil)
		ss := waitSessions(t, p, 2)
		for range 10 {
			got, err := peerExchange(context.Background(), p, []byte("x"))
			require.NoError(t, err)
			require.Equal(t, []byte("re:x"), got)
		}
		// One session drains: the Peer replaces it and watches the old one.
		for _, s := range ts.sessions() {
			if s.RemoteAddr().String() == ss[0].LocalAddr().String() {
				s.GoAway(frame.CodeNoError, "drain")
			}
		}
		require.Eventually(t, func() bool { return len(p.sessionsSnapshot()) == 3 }, 2*time.Second, 2*time.Millisecond)
		require.NoError(t, p.Close())
		require.Empty(t, p.sessionsSnapshot())
		for _, s := range ss {
			require.Error(t, s.Err())
		}
		_, err := p.OpenStream(context.Background())
		require.ErrorIs(t, err, ErrNoPeer)
		require.NoError(t, p.Close()) // idempotent
	}()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after Close:\n%s", base, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestPeerExtraSessionAtStreamLimit: with every session at the peer's stream limit, an
// exchange neither fails nor waits for a stream to end: the peer opens one more session
// (up to MaxConnections) and the exchange runs on it. Once idle for extraSessionIdle the
// extra session closes again; the kept one stays.
func TestPeerExtraSessionAtStreamLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, m, dials := pipePeer(t, 2)
		var held []*Stream
		for range 2 {
			st, err := p.OpenStream(context.Background())
			require.NoError(t, err)
			held = append(held, st)
		}

		begin := time.Now()
		st, err := p.OpenStream(context.Background())
		require.NoError(t, err, "an extra session takes the exchange")
		require.Zero(t, time.Since(begin), "no stream ended: the wait was for the extra session's handshake alone")
		require.Equal(t, int32(2), dials.Load())
		require.Len(t, p.sessionsSnapshot(), 2)
		got, err := exchangeOn(st, []byte("three"))
		require.NoError(t, err)
		require.Equal(t, []byte("re:three"), got)
		// The exchange's stream slot is freed once both ends' closes have crossed the
		// pipe; let that settle so the next two opens find the extra session's two free
		// slots instead of waiting for one (which would count a second "ok" wait).
		synctest.Wait()

		// MaxConnections reached: the next exchange waits for a stream (here: until its
		// deadline) and no third session is dialled.
		for range 2 {
			st, err := p.OpenStream(context.Background())
			require.NoError(t, err, "the extra session has two streams")
			held = append(held, st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = p.OpenStream(ctx)
		cancel()
		require.ErrorIs(t, err, ErrStreamLimit)
		require.Equal(t, int32(2), dials.Load(), "no session beyond MaxConnections")
		require.Equal(t, 1.0, testutil.ToFloat64(m.streamWaits.WithLabelValues("origin", "deadline")))
		require.Equal(t, 1.0, testutil.ToFloat64(m.streamWaits.WithLabelValues("origin", "ok")))

		for _, h := range held {
			_ = h.Close()
		}
		time.Sleep(extraSessionIdle + 2*extraSessionCheck)
		synctest.Wait()
		require.Len(t, p.sessionsSnapshot(), 1, "the idle extra session closed, the kept one stayed")
		got, err = peerExchange(context.Background(), p, []byte("after"))
		require.NoError(t, err)
		require.Equal(t, []byte("re:after"), got)

	})
}

// TestPeerBulkStreamsWaitForRoom: bulk streams fill a session up to its bulk limit and
// then wait for one of them to end: no extra session is dialled for them, and an
// ordinary exchange still opens at once on the streams left.
func TestPeerBulkStreamsWaitForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, m, dials := pipePeer(t, 16)
		ctx := context.Background()
		var held []*Stream
		for range BulkLimit(16) {
			st, err := p.OpenBulkStream(ctx)
			require.NoError(t, err)
			held = append(held, st)
		}

		waited := make(chan error, 1)
		var late *Stream
		go func() {
			var err error
			late, err = p.OpenBulkStream(ctx)
			waited <- err
		}()
		synctest.Wait()
		select {
		case err := <-waited:
			t.Fatalf("a bulk stream opened beyond the bulk limit (err %v)", err)
		default:
		}
		require.Equal(t, int32(1), dials.Load(), "no extra session for bulk streams")
		st, err := p.OpenStream(ctx)
		require.NoError(t, err, "an ordinary exchange opens at once")
		got, err := exchangeOn(st, []byte("urgent"))
		require.NoError(t, err)
		require.Equal(t, []byte("re:urgent"), got)
		require.Zero(t, testutil.ToFloat64(m.streamWaits.WithLabelValues("origin", "ok")), "bulk waits are not stream waits")

		got, err = exchangeOn(held[0], []byte("bulk"))
		require.NoError(t, err)
		require.Equal(t, []byte("re:bulk"), got)
		synctest.Wait()
		require.NoError(t, <-waited, "the waiting bulk open took the freed stream")
		require.Equal(t, int32(1), dials.Load())

		for _, h := range append(held[1:], late) {
			_ = h.Close()
		}
	})
}

// pipePeer starts, in a synctest bubble, a tunnel server whose sessions allow
// maxStreams and a peer of one kept session (two at most) dialling it over pipes; both
// stop when the test ends. dials counts the peer's dials.
func pipePeer(t *testing.T, maxStreams uint32) (p *Peer, m *Metrics, dials *atomic.Int32) {
	ln := newPipeListener()
	srv := NewServer(ServerConfig{Session: &Config{MaxStreams: maxStreams, KeepaliveInterval: 0}}, nil, nil, echoHandler)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	dials = new(atomic.Int32)
	m = NewMetrics(nil)
	p = NewPeer(context.Background(), PeerConfig{Name: "origin", Address: "pipe", Connections: 1, MaxConnections: 2,
		Dial: func(context.Context, string) (net.Conn, error) {
			dials.Add(1)
			return ln.dial()
		},
		Session: &Config{KeepaliveInterval: 0}}, m, nil)
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		require.NoError(t, ln.Close())
		require.NoError(t, srv.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})
	synctest.Wait()
	require.True(t, p.Ready())
	return p, m, dials
}

// TestPeerWaitingCallCutsBackoffShort: after a cut, a slot whose dials failed sits in a
// reconnect backoff of up to BackoffMax. A call that waits for a session must not wait
// that out once the link is back: the slot dials within waitingDialInterval.
func TestPeerWaitingCallCutsBackoffShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		srv := NewServer(ServerConfig{Session: &Config{KeepaliveInterval: 0}}, nil, nil, echoHandler)
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		var linkUp atomic.Bool
		p := NewPeer(context.Background(), PeerConfig{Name: "origin", Address: "pipe", Connections: 1,
			DialTimeout: 10 * time.Second, BackoffMin: 8 * time.Second, BackoffMax: 8 * time.Second,
			Dial: func(context.Context, string) (net.Conn, error) {
				if !linkUp.Load() {
					return nil, errors.New("test: link down")
				}
				return ln.dial()
			},
			Session: &Config{KeepaliveInterval: 0}}, nil, nil)
		time.Sleep(20 * time.Second) // no caller: the slot dials every 4-8 s
		require.False(t, p.Ready())

		linkUp.Store(true)
		begin := time.Now()
		got, err := peerExchange(context.Background(), p, []byte("waited"))
		require.NoError(t, err)
		require.Equal(t, []byte("re:waited"), got)
		require.LessOrEqual(t, time.Since(begin), waitingDialInterval, "the waiting call's kick dialled at once, not after the %v backoff", 8*time.Second)

		require.NoError(t, p.Close())
		require.NoError(t, ln.Close())
		require.NoError(t, srv.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})
}
