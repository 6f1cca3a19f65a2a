package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
	soaptest "github.com/soapgw/soapgw/internal/testutil"
)

// watchedClock starts a clock (stopped at the test's end) and reports on expired how long
// after its start it expired.
func watchedClock(t *testing.T, stall time.Duration, end time.Time) (*progressClock, chan time.Duration) {
	start := time.Now()
	c := startProgressClock(stall, end)
	t.Cleanup(c.stop)
	expired := make(chan time.Duration, 1)
	c.onExpire(func() { expired <- time.Since(start) })
	return c, expired
}

func TestProgressClockExpiresOnlyAfterAStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, expired := watchedClock(t, time.Second, time.Time{})
		for range 5 { // 4 s of an exchange that keeps moving
			time.Sleep(800 * time.Millisecond)
			c.touch()
		}
		synctest.Wait()
		require.Empty(t, expired, "expired while its bytes moved")
		require.False(t, c.Expired())
		require.Equal(t, 5*800*time.Millisecond+time.Second, <-expired, "expires a stall after the last touch")
		require.True(t, c.Expired())
		require.Contains(t, c.reason(), "nothing of it moved for 1s")

		ran := false
		c.onExpire(func() { ran = true })
		require.True(t, ran, "a hook registered after expiry runs at once")
	})
}

func TestProgressClockHardBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, expired := watchedClock(t, time.Second, time.Now().Add(3*time.Second))
		for range 10 {
			time.Sleep(500 * time.Millisecond)
			c.touch()
		}
		require.Equal(t, 3*time.Second, <-expired, "touches do not extend the hard bound")
		require.Contains(t, c.reason(), "exchange_max_duration: 3s")
	})
}

// ringAt records when an alarm rang, after the clock's start.
type ringAt struct {
	start time.Time
	rang  chan time.Duration
}

func (r *ringAt) ring() { r.rang <- time.Since(r.start) }

// The clock's alarm rings once on the clock's own timer, at its time, without touching
// the stall; not once cancelled, stopped, or after the clock expired first.
func TestProgressClockAlarm(t *testing.T) {
	newAlarm := func() *ringAt { return &ringAt{start: time.Now(), rang: make(chan time.Duration, 1)} }
	t.Run("rings", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, expired := watchedClock(t, time.Second, time.Time{})
			a := newAlarm()
			c.setAlarm(100*time.Millisecond, a)
			require.Equal(t, 100*time.Millisecond, <-a.rang)
			synctest.Wait()
			require.Empty(t, expired)
			require.Equal(t, time.Second, <-expired, "the stall is counted as before")
			require.Empty(t, a.rang, "rings once")
		})
	})
	t.Run("cancelled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, expired := watchedClock(t, time.Second, time.Time{})
			a := newAlarm()
			c.setAlarm(100*time.Millisecond, a)
			time.Sleep(50 * time.Millisecond)
			c.cancelAlarm(a)
			<-expired
			require.Empty(t, a.rang)
		})
	})
	t.Run("stopped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := startProgressClock(time.Second, time.Time{})
			a := newAlarm()
			c.setAlarm(100*time.Millisecond, a)
			c.stop()
			time.Sleep(time.Minute)
			require.Empty(t, a.rang)
		})
	})
	t.Run("after expiry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, expired := watchedClock(t, time.Second, time.Time{})
			a := newAlarm()
			c.setAlarm(2*time.Second, a)
			require.Equal(t, time.Second, <-expired)
			time.Sleep(time.Minute)
			require.Empty(t, a.rang, "the exchange is over")
		})
	})
}

func TestProgressClockStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startProgressClock(time.Second, time.Time{})
		ran := false
		c.onExpire(func() { ran = true })
		c.stop()
		time.Sleep(time.Minute)
		c.onExpire(func() { ran = true })
		require.False(t, ran, "no hook runs after stop")
		require.False(t, c.Expired())
		var nilClock *progressClock
		nilClock.touch() // legs without a clock
	})
}

// TestProgressClockEndsTheExchange: when the clock expires, unblockOnExpire's leg gets a
// past deadline before the hooks run and endOnExpire's exchange ends with errNoProgress
// after them; at once when it had expired; never after stop.
func TestProgressClockEndsTheExchange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := watchParent(context.Background()).newExchange(false)
		c := startProgressClock(time.Second, time.Time{})
		defer c.stop()
		leg := &deadlineLeg{}
		var mu sync.Mutex
		var hookSaw []string
		c.onExpire(func() {
			mu.Lock()
			defer mu.Unlock()
			hookSaw = append(hookSaw, fmt.Sprint(leg.set(), x.Err() != nil))
		})
		c.endOnExpire(x)
		c.unblockOnExpire(leg)
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, x.Err(), "not before the stall")
		require.False(t, leg.set())
		time.Sleep(time.Second)
		require.ErrorIs(t, causeOf(x), errNoProgress)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"true false"}, hookSaw, "the leg was unblocked before the hooks, the exchange ended after")

		late, lateLeg := watchParent(context.Background()).newExchange(false), &deadlineLeg{}
		c.endOnExpire(late)
		c.unblockOnExpire(lateLeg)
		require.ErrorIs(t, causeOf(late), errNoProgress, "registered after expiry: at once")
		require.True(t, lateLeg.set(), "registered after expiry: at once")

		stopped := startProgressClock(time.Second, time.Time{})
		spared, sparedLeg := watchParent(context.Background()).newExchange(false), &deadlineLeg{}
		stopped.endOnExpire(spared)
		stopped.unblockOnExpire(sparedLeg)
		stopped.stop()
		time.Sleep(time.Minute)
		require.NoError(t, spared.Err(), "a stopped clock ends nothing")
		require.False(t, sparedLeg.set())
	})
}

// deadlineLeg records that a past deadline was set on it.
type deadlineLeg struct{ past atomic.Bool }

func (d *deadlineLeg) SetDeadline(t time.Time) error {
	d.past.Store(!t.IsZero() && t.Before(time.Now()))
	return nil
}

func (d *deadlineLeg) set() bool { return d.past.Load() }

// trickleUpstream answers one request with a chunked response: chunks chunks, gap apart,
// after stallAfter chunks a pause of stall (0: none). It returns the body it sends.
func trickleUpstream(t *testing.T, chunks int, gap time.Duration, stallAfter int, stall time.Duration) (addr, body string) {
	var b strings.Builder
	for i := range chunks {
		fmt.Fprintf(&b, "<part n=%q/>", fmt.Sprint(i))
	}
	body = b.String()
	addr = rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readUntil(br, "<x/>"); err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return
		}
		for i := range chunks {
			if i == stallAfter && stall > 0 {
				time.Sleep(stall)
			}
			part := fmt.Sprintf("<part n=%q/>", fmt.Sprint(i))
			if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(part), part); err != nil {
				return
			}
			time.Sleep(gap)
		}
		_, _ = io.WriteString(c, "0\r\n\r\n")
	})
	return addr, body
}

// A response that keeps flowing is not cut, however much longer than exchange_timeout it
// takes (a slow link, a server streaming its answer); one that stops flowing for
// exchange_timeout is, at both gateways.
func TestExchangeTimeoutMeasuresProgress(t *testing.T) {
	const stall = time.Second
	limits := Limits{ExchangeTimeout: stall}
	// call sends a request through a pair with limits at both ends to the upstream at addr.
	call := func(t *testing.T, addr string) (*client, time.Time) {
		ups := []Upstream{{Name: "up", Address: addr}}
		env := newEnv(t, envConfig{Upstreams: ups, EdgeLimits: limits})
		require.NoError(t, env.origin.Reconfigure(ups, limits))
		cl := env.dial()
		_ = cl.c.SetDeadline(time.Now().Add(2 * testDeadline)) // the upstream's own bound
		start := time.Now()
		cl.send(soapRequest(1, "/svc", "", "<x/>"))
		return cl, start
	}

	t.Run("flowing", func(t *testing.T) {
		addr, want := trickleUpstream(t, 32, stall/10, 0, 0) // 3.2 s in all, a tenth of the stall apart
		cl, start := call(t, addr)
		resp, body := cl.read("POST")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, want, string(body))
		require.Greater(t, time.Since(start), 3*stall, "the response took longer than exchange_timeout")
	})

	t.Run("stalled", func(t *testing.T) {
		addr, _ := trickleUpstream(t, 4, 0, 2, 4*stall)
		cl, start := call(t, addr)
		resp, err := httpwire.ReadResponse(cl.br, "POST", httpwire.Limits{})
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		_, err = io.ReadAll(resp.Body)
		require.Error(t, err, "the response began, so the edge aborts the connection: a truncated body must not pass for a whole one")
		require.ErrorIs(t, err, syscall.ECONNRESET)
		require.Less(t, time.Since(start), 4*stall, "the stalled exchange was not ended before the upstream went on")
	})

	t.Run("stalled over TLS", func(t *testing.T) {
		// The connection is reset below TLS: a close_notify would say the data ended.
		addr, _ := trickleUpstream(t, 4, 0, 2, 4*stall)
		cert := soaptest.SelfSigned(t)
		ups := []Upstream{{Name: "up", Address: addr}}
		env := newEnv(t, envConfig{Upstreams: ups, EdgeLimits: limits, ListenTLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
		require.NoError(t, env.origin.Reconfigure(ups, limits))
		tc, err := tls.Dial("tcp", env.addrs["main"], &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a test's own certificate
		require.NoError(t, err)
		t.Cleanup(func() { _ = tc.Close() })
		_ = tc.SetDeadline(time.Now().Add(2 * testDeadline))
		_, err = io.WriteString(tc, soapRequest(1, "/svc", "", "<x/>"))
		require.NoError(t, err)
		resp, err := httpwire.ReadResponse(bufio.NewReader(tc), "POST", httpwire.Limits{})
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		_, err = io.ReadAll(resp.Body)
		require.ErrorIs(t, err, syscall.ECONNRESET, "a truncated body must not end like a whole one")
	})
}

// The edge's own bounds end an exchange whose response stopped arriving from the tunnel,
// even when the origin's bounds are longer: its clock unblocks the stream it waits on
// (no stream deadline is armed per exchange; the clock is the one timer).
func TestEdgeBoundEndsAResponseThatStopsArriving(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits Limits
	}{
		{"exchange_max_duration", Limits{ExchangeMaxDuration: time.Second / 2}},
		{"exchange_timeout", Limits{ExchangeTimeout: time.Second / 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := trickleUpstream(t, 4, 0, 2, 4*time.Second) // two parts, then 4 s of silence
			ups := []Upstream{{Name: "up", Address: addr}}
			env := newEnv(t, envConfig{Upstreams: ups, EdgeLimits: tc.limits}) // the origin keeps its defaults
			cl := env.dial()
			_ = cl.c.SetDeadline(time.Now().Add(2 * testDeadline))
			start := time.Now()
			cl.send(soapRequest(1, "/svc", "", "<x/>"))
			resp, err := httpwire.ReadResponse(cl.br, "POST", httpwire.Limits{})
			require.NoError(t, err)
			require.Equal(t, 200, resp.StatusCode)
			_, err = io.ReadAll(resp.Body)
			require.Error(t, err, "a truncated body must not pass for a whole one")
			require.Less(t, time.Since(start), 2*time.Second, "the edge waited for the upstream instead of ending the exchange at its bound")
		})
	}
}

func TestProgressClockBusyWriteIsNoStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, expired := watchedClock(t, time.Second, time.Time{})
		c.enter() // a write into the tunnel waits for its window
		time.Sleep(10 * time.Second)
		synctest.Wait()
		require.Empty(t, expired, "blocked in a tunnel write: the other gateway judges that")
		c.leave()
		require.Equal(t, 11*time.Second, <-expired, "a stall counts from the write's end")
	})
}

// slowTunnelStream stands for an origin's tunnel stream on a slow link shared by many
// exchanges: the request is there at once, each write of the response waits for the
// stream's window for longer than exchange_timeout. A deadline set on it (the clock's
// expiry) fails the writes.
type slowTunnelStream struct {
	in    *strings.Reader
	delay time.Duration

	mu     sync.Mutex
	out    []byte
	ended  bool
	closed bool
	dl     time.Time
}

func (s *slowTunnelStream) Read(p []byte) (int, error) { return s.in.Read(p) }
func (s *slowTunnelStream) Write(p []byte) (int, error) {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dl.IsZero() && time.Now().After(s.dl) {
		return 0, os.ErrDeadlineExceeded
	}
	s.out = append(s.out, p...)
	return len(p), nil
}
func (s *slowTunnelStream) Flush() error { return nil }
func (s *slowTunnelStream) CloseWrite() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	return nil
}
func (s *slowTunnelStream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
func (s *slowTunnelStream) SetDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dl = t
	return nil
}

// TestOriginWaitingForTheTunnelIsNoStall: sixteen 2 MB responses share GPRS, and a
// stream's window opens every few minutes; the origin's writes wait that long each. That
// is the link's pace, not a stalled exchange: the response is delivered whole.
func TestOriginWaitingForTheTunnelIsNoStall(t *testing.T) {
	const stall = 300 * time.Millisecond
	body := strings.Repeat("<item>slow link</item>", 4000) // 88 KB: several writes
	up := newUpstream(t, okResponse(body))
	o, err := NewOrigin(OriginConfig{Node: "origin-test", Upstreams: []Upstream{{Name: "up", Address: up.addr()}},
		Limits: Limits{ExchangeTimeout: stall}}, nil, nil)
	require.NoError(t, err)
	defer o.Close()
	req := requestHead{ExchangeID: "slow-1", Upstream: "up", Method: "POST", Target: "/svc", ProtoMinor: 1, ContentLength: 4}
	st := &slowTunnelStream{in: strings.NewReader(string(req.Append(nil)) + "<x/>"), delay: 2 * stall}
	o.ServeStream(context.Background(), st)
	st.mu.Lock()
	defer st.mu.Unlock()
	require.True(t, st.ended, "the response was not delivered whole")
	require.True(t, strings.HasSuffix(string(st.out), body))
}
