package netsim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startTarget runs handle for every connection accepted on a loopback
// listener and returns its address. Cleanup closes the listener and waits
// for the handlers, which must return once their conn is closed or reset.
func startTarget(t *testing.T, handle func(c *net.TCPConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c.(*net.TCPConn))
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func echo(c *net.TCPConn) {
	_, _ = io.Copy(c, c)
	_ = c.CloseWrite()
}

func newLink(t *testing.T, target string, cfg LinkConfig) *Link {
	t.Helper()
	l, err := NewLink(t.Context(), target, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(4*time.Second)))
	return c.(*net.TCPConn)
}

// roundTrip writes one byte and reads it back from an echo target.
func roundTrip(t *testing.T, c net.Conn) {
	t.Helper()
	_, err := c.Write([]byte{'x'})
	require.NoError(t, err)
	var b [1]byte
	_, err = io.ReadFull(c, b[:])
	require.NoError(t, err)
	require.Equal(t, byte('x'), b[0])
}

func TestLinkRoundTripTime(t *testing.T) {
	const delay = 30 * time.Millisecond
	tests := []struct {
		name      string
		handshake bool
		// bounds for the first exchange on a new connection; a later
		// exchange on the same connection always costs one RTT.
		firstMin, firstMax time.Duration
	}{
		// Upper bounds leave a full RTT of slack: the minimum of three
		// trials only has to beat them once.
		{"no handshake", false, 2 * delay, 4 * delay},
		{"handshake", true, 4 * delay, 6 * delay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLink(t, startTarget(t, echo), LinkConfig{Delay: delay, Handshake: tt.handshake})
			first, again := time.Hour, time.Hour
			for range 3 {
				start := time.Now()
				c := dial(t, l.Addr())
				roundTrip(t, c)
				first = min(first, time.Since(start))
				start = time.Now()
				roundTrip(t, c)
				again = min(again, time.Since(start))
				require.NoError(t, c.Close())
			}
			require.GreaterOrEqual(t, first, tt.firstMin)
			require.Less(t, first, tt.firstMax)
			require.GreaterOrEqual(t, again, 2*delay)
			require.Less(t, again, 4*delay)
		})
	}
}

// TestLinkTransferBothWays sends 5 MB each way at the same time, each side
// half-closing when done, and checks order and content byte for byte.
func TestLinkTransferBothWays(t *testing.T) {
	const size = 5 << 20
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	up, down := make([]byte, size), make([]byte, size)
	for i := range up {
		up[i], down[i] = byte(rng.Uint32()), byte(rng.Uint32())
	}
	got := make(chan []byte, 1)
	target := startTarget(t, func(c *net.TCPConn) {
		_ = c.SetDeadline(time.Now().Add(4 * time.Second))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Write(down)
			_ = c.CloseWrite()
		}()
		b, _ := io.ReadAll(c)
		got <- b
		wg.Wait()
	})
	l := newLink(t, target, LinkConfig{Delay: 5 * time.Millisecond})

	c := dial(t, l.Addr())
	writeErr := make(chan error, 1)
	go func() {
		_, err := c.Write(up)
		if err == nil {
			err = c.CloseWrite()
		}
		writeErr <- err
	}()
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	require.NoError(t, <-writeErr)
	require.True(t, bytes.Equal(down, b), "target->client bytes differ (got %d bytes)", len(b))
	require.True(t, bytes.Equal(up, <-got), "client->target bytes differ")

	require.Eventually(t, func() bool {
		s := l.Stats()
		return s.BytesUp == size && s.BytesDown == size
	}, 2*time.Second, 5*time.Millisecond, "stats: %+v", l.Stats())
	s := l.Stats()
	require.Equal(t, int64(1), s.Connections)
	require.GreaterOrEqual(t, s.SegmentsUp, int64(size/readSize))
	require.GreaterOrEqual(t, s.SegmentsDown, int64(size/readSize))
}

func TestLinkStatsCountsChunks(t *testing.T) {
	l := newLink(t, startTarget(t, echo), LinkConfig{})
	c := dial(t, l.Addr())
	msg := []byte("0123456789")
	buf := make([]byte, len(msg))
	const writes = 10
	for range writes {
		// Waiting for the echo before the next write makes every write
		// exactly one read, hence one chunk, on both sides.
		_, err := c.Write(msg)
		require.NoError(t, err)
		_, err = io.ReadFull(c, buf)
		require.NoError(t, err)
		require.Equal(t, msg, buf)
	}
	require.Equal(t, LinkStats{
		Connections: 1,
		BytesUp:     writes * int64(len(msg)), BytesDown: writes * int64(len(msg)),
		SegmentsUp: writes, SegmentsDown: writes,
	}, l.Stats())
}

func TestLinkHalfClose(t *testing.T) {
	const delay = 30 * time.Millisecond
	eofAt := make(chan time.Time, 1)
	target := startTarget(t, func(c *net.TCPConn) {
		_ = c.SetDeadline(time.Now().Add(4 * time.Second))
		b, err := io.ReadAll(c)
		eofAt <- time.Now()
		if err != nil {
			return
		}
		// The client has half-closed; its read side must still work.
		_, _ = c.Write(append([]byte("got:"), b...))
		time.Sleep(delay)
		_, _ = c.Write([]byte(":bye"))
	})
	l := newLink(t, target, LinkConfig{Delay: delay})
	c := dial(t, l.Addr())
	_, err := c.Write([]byte("hello"))
	require.NoError(t, err)
	closedAt := time.Now()
	require.NoError(t, c.CloseWrite())

	b, err := io.ReadAll(c) // ends with the target's FIN, forwarded
	require.NoError(t, err)
	require.Equal(t, "got:hello:bye", string(b))
	require.GreaterOrEqual(t, (<-eofAt).Sub(closedAt), delay, "FIN must travel with the delay")
}

func TestLinkResetPropagates(t *testing.T) {
	tests := []struct {
		name string
		// resetter is true when the target resets; else the client does.
		targetResets bool
	}{
		{"target resets", true},
		{"client resets", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			targetErr := make(chan error, 1)
			target := startTarget(t, func(c *net.TCPConn) {
				_ = c.SetDeadline(time.Now().Add(4 * time.Second))
				var b [1]byte
				if _, err := io.ReadFull(c, b[:]); err != nil {
					targetErr <- err
					return
				}
				if tt.targetResets {
					_ = c.SetLinger(0)
					_ = c.Close()
					return
				}
				_, _ = c.Write(b[:]) // tell the client we are ready
				_, err := c.Read(b[:])
				targetErr <- err
			})
			l := newLink(t, target, LinkConfig{Delay: 10 * time.Millisecond})
			c := dial(t, l.Addr())
			_, err := c.Write([]byte{'x'})
			require.NoError(t, err)
			var b [1]byte
			if tt.targetResets {
				_, err = c.Read(b[:])
				require.ErrorIs(t, err, syscall.ECONNRESET)
				return
			}
			_, err = io.ReadFull(c, b[:])
			require.NoError(t, err)
			require.NoError(t, c.SetLinger(0))
			require.NoError(t, c.Close())
			require.ErrorIs(t, <-targetErr, syscall.ECONNRESET)
		})
	}
}

func TestLinkDialError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())

	l := newLink(t, dead, LinkConfig{})
	// The link resets the accepted conn at once, so the reset may already
	// be seen by connect; otherwise the first read sees it.
	c, err := net.DialTimeout("tcp", l.Addr(), 2*time.Second)
	if err == nil {
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(4*time.Second)))
		_, err = c.Read(make([]byte, 1))
	}
	require.ErrorIs(t, err, syscall.ECONNRESET)
	require.Eventually(t, func() bool { return l.Stats().DialErrors == 1 },
		2*time.Second, 5*time.Millisecond)
}

func TestLinkBandwidth(t *testing.T) {
	const (
		size = 200_000
		bw   = 1_000_000 // bytes/s: size takes 200 ms on the wire
	)
	done := make(chan int, 1)
	target := startTarget(t, func(c *net.TCPConn) {
		_ = c.SetDeadline(time.Now().Add(4 * time.Second))
		n, _ := io.Copy(io.Discard, c)
		done <- int(n)
	})
	l := newLink(t, target, LinkConfig{Bandwidth: bw})
	c := dial(t, l.Addr())
	start := time.Now()
	_, err := c.Write(make([]byte, size))
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	require.Equal(t, size, <-done)
	elapsed := time.Since(start)
	// Every segment but the first waits for the wire.
	require.GreaterOrEqual(t, elapsed, time.Duration(size-segmentSize)*time.Second/bw)
	require.Less(t, elapsed, 3*time.Second)
}

// waitGoroutines waits until the goroutine count is back to at most want.
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d, want <= %d\n%s", runtime.NumGoroutine(), want, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLinkCloseStopsEverything(t *testing.T) {
	tests := []struct {
		name string
		stop func(l *Link, cancel context.CancelFunc)
	}{
		{"Close", func(l *Link, _ context.CancelFunc) { require.NoError(t, l.Close()) }},
		{"cancel ctx", func(_ *Link, cancel context.CancelFunc) { cancel() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := startTarget(t, echo)
			before := runtime.NumGoroutine()

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			// A long delay keeps bytes queued inside the link at stop time.
			l, err := NewLink(ctx, target, LinkConfig{Delay: time.Second, Handshake: true})
			require.NoError(t, err)
			var conns []*net.TCPConn
			for range 3 {
				c := dial(t, l.Addr())
				_, err := c.Write(bytes.Repeat([]byte("queued"), 1000))
				require.NoError(t, err)
				conns = append(conns, c)
			}
			require.Eventually(t, func() bool { return l.Stats().Connections == 3 },
				2*time.Second, 5*time.Millisecond)

			stopped := time.Now()
			tt.stop(l, cancel)
			for _, c := range conns {
				_, err := c.Read(make([]byte, 1))
				require.Error(t, err)
				require.False(t, errors.Is(err, context.DeadlineExceeded))
			}
			require.NoError(t, l.Close()) // idempotent, and waits in both cases
			require.Less(t, time.Since(stopped), time.Second, "stop must not wait for queued bytes")
			require.Zero(t, l.Stats().BytesUp, "queued bytes must be dropped, not delivered")

			_, err = net.DialTimeout("tcp", l.Addr(), time.Second)
			require.Error(t, err, "listener must be closed")
			for _, c := range conns {
				_ = c.Close()
			}
			waitGoroutines(t, before)
		})
	}
}

func TestLinkConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     LinkConfig
		wantErr string
	}{
		{"zero", LinkConfig{}, ""},
		{"full", LinkConfig{Delay: time.Millisecond, Handshake: true, Bandwidth: 1}, ""},
		{"negative delay", LinkConfig{Delay: -1}, "LinkConfig.Delay"},
		{"negative bandwidth", LinkConfig{Bandwidth: -1}, "LinkConfig.Bandwidth"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			_, err = NewLink(t.Context(), "127.0.0.1:1", tt.cfg)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestQueueBoundsBytes(t *testing.T) {
	q := newQueue(10)
	done := make(chan struct{})
	require.True(t, q.push(chunk{data: make([]byte, 8)}, done))
	// Over the limit: push must wait for a pop.
	pushed := make(chan bool, 1)
	go func() { pushed <- q.push(chunk{data: make([]byte, 8)}, done) }()
	select {
	case <-pushed:
		t.Fatal("push over the byte limit did not wait")
	case <-time.After(20 * time.Millisecond):
	}
	c, ok := q.pop(done)
	require.True(t, ok)
	require.Len(t, c.data, 8)
	require.True(t, <-pushed)

	// An empty queue takes a chunk larger than the limit.
	_, ok = q.pop(done)
	require.True(t, ok)
	require.True(t, q.push(chunk{data: make([]byte, 100)}, done))

	// done releases waiters on both ends.
	close(done)
	require.False(t, q.push(chunk{data: make([]byte, 1)}, done))
	_, ok = q.pop(done)
	require.True(t, ok, "queued chunks are still handed out")
	_, ok = q.pop(done)
	require.False(t, ok)
}
