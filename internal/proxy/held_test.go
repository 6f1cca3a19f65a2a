package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func testHeldStore(window time.Duration, maxBytes int64) (*heldStore, *time.Time) {
	now := time.Unix(1000, 0)
	s := newHeldStore(window, maxBytes, newHeldMetrics())
	s.now = func() time.Time { return now }
	return s, &now
}

func TestHeldStoreResumeFromOffset(t *testing.T) {
	s, _ := testHeldStore(time.Minute, 1<<20)
	h, how := s.begin("x-1", nil)
	require.Equal(t, heldNew, how)
	h.record([]byte("hello "))
	h.record([]byte("world"))

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	got := make(chan []byte, 1)
	go func() {
		b, err := s.lookup("x-1").wait(ctx, 6)
		require.NoError(t, err)
		got <- b
	}()
	h.complete()
	require.Equal(t, []byte("world"), <-got)

	_, err := h.wait(ctx, 12)
	require.ErrorIs(t, err, errResumeOffset)
}

func TestHeldStoreDuplicateAndTombstone(t *testing.T) {
	s, now := testHeldStore(30*time.Second, 1<<20)
	h, _ := s.begin("a", nil)
	again, how := s.begin("a", nil)
	require.Equal(t, heldDuplicate, how, "an id already held is never run twice")
	require.Same(t, h, again)

	require.Nil(t, s.lookup("b"), "never seen")
	_, how = s.begin("b", nil)
	require.Equal(t, heldTombstoned, how, "a request arriving after its resume is refused")

	*now = now.Add(31 * time.Second)
	_, how = s.begin("b", nil)
	require.Equal(t, heldNew, how, "tombstones last one window")
}

func TestHeldStoreExpiresAfterWindow(t *testing.T) {
	s, now := testHeldStore(30*time.Second, 1<<20)
	h, _ := s.begin("a", nil)
	h.record(make([]byte, 1000))
	h.complete()
	require.NotNil(t, s.lookup("a"))
	require.Equal(t, int64(1000+heldOverhead), s.bytes)

	*now = now.Add(29 * time.Second)
	require.NotNil(t, s.lookup("a"))
	*now = now.Add(2 * time.Second)
	require.Nil(t, s.lookup("a"), "expired")
	require.Zero(t, s.bytes)
	require.Equal(t, 1.0, testutil.ToFloat64(s.m.dropped.WithLabelValues("expired")))
}

// sentStream is a Stream that tells when its message has left (tunnel.Stream.AfterSent).
type sentStream struct {
	Stream
	f func()
}

func (s *sentStream) AfterSent(f func()) { s.f = f }

// TestHeldStoreWindowStartsWhenSent: a response that waits in the tunnel's queue after
// its handler ended (a slow link) is kept until resume_window after it left, not after
// the handler ended; meanwhile a resume can take it.
func TestHeldStoreWindowStartsWhenSent(t *testing.T) {
	s, now := testHeldStore(30*time.Second, 1<<20)
	h, _ := s.begin("a", nil)
	h.record(make([]byte, 1000))
	st := &sentStream{}
	h.completeWhenSent(st)
	require.NotNil(t, st.f, "the window waits for the stream")

	*now = now.Add(10 * time.Minute) // still queued behind other responses
	got := s.lookup("a")
	require.NotNil(t, got, "kept while the response has not left")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, err := got.wait(ctx, 0)
	require.NoError(t, err)
	require.Len(t, b, 1000, "whole, for a resume")

	st.f() // the last frame is on the wire
	*now = now.Add(29 * time.Second)
	require.NotNil(t, s.lookup("a"))
	*now = now.Add(2 * time.Second)
	require.Nil(t, s.lookup("a"), "expired one window after it left")
}

// deliveredStream is a Stream that tells when its message has left (AfterSent) and when
// the edge acknowledged decoding it (AfterDelivered), as a tunnel stream with a codec.
type deliveredStream struct {
	sentStream
	delivered func()
}

func (s *deliveredStream) AfterDelivered(f func()) { s.delivered = f }

// TestHeldStoreForgetsDelivered: a response the edge acknowledged is forgotten at once,
// from anywhere in the list of finished ones, whether its window started or not; one a
// resume or a second request touched keeps its whole window.
func TestHeldStoreForgetsDelivered(t *testing.T) {
	s, now := testHeldStore(30*time.Second, 1<<20)
	streams := map[string]*deliveredStream{}
	for _, id := range []string{"a", "b", "c", "resumed", "duplicated", "unsent"} {
		h, how := s.begin(id, nil)
		require.Equal(t, heldNew, how)
		h.record(make([]byte, 1000))
		st := &deliveredStream{}
		h.completeWhenSent(st)
		require.NotNil(t, st.delivered, "%s: the store asks to hear of the delivery", id)
		streams[id] = st
		if id != "unsent" {
			st.f() // sent: its window runs
		}
	}
	require.NotNil(t, s.lookup("resumed"))
	_, how := s.begin("duplicated", nil)
	require.Equal(t, heldDuplicate, how)
	require.Equal(t, int64(6*(1000+heldOverhead)), s.bytes)

	streams["b"].delivered() // the middle of the list
	require.Nil(t, s.byID["b"], "delivered: forgotten")
	require.Equal(t, int64(5*(1000+heldOverhead)), s.bytes)
	streams["a"].delivered() // its head
	streams["c"].delivered() // and the newest sent
	streams["unsent"].delivered()
	streams["unsent"].f() // its window would start now: nothing left to queue
	streams["resumed"].delivered()
	streams["duplicated"].delivered()
	require.Equal(t, int64(2*(1000+heldOverhead)), s.bytes, "touched ones stay")
	require.NotNil(t, s.byID["resumed"])
	require.NotNil(t, s.byID["duplicated"])
	require.Equal(t, 4.0, testutil.ToFloat64(s.m.dropped.WithLabelValues("delivered")))
	require.Equal(t, 2.0, testutil.ToFloat64(s.m.entries))
	var listed []string
	for h := s.oldest; h != nil; h = h.next {
		listed = append(listed, h.id)
	}
	require.Equal(t, []string{"resumed", "duplicated"}, listed)
	require.False(t, s.neverArrived("b", now.Add(-time.Second)), "a delivered id is remembered as gone")

	*now = now.Add(31 * time.Second)
	s.mu.Lock()
	s.expireLocked()
	s.mu.Unlock()
	require.Zero(t, s.bytes)
	require.Nil(t, s.oldest)
	require.Nil(t, s.newest)
	require.Equal(t, 2.0, testutil.ToFloat64(s.m.dropped.WithLabelValues("expired")))
}

func TestHeldStoreBudget(t *testing.T) {
	const budget = 8 * 1024
	s, _ := testHeldStore(time.Minute, budget)
	require.Equal(t, int64(1024), s.maxEach)

	// Over maxEach: the exchange loses its copy and cannot be resumed.
	big, _ := s.begin("big", nil)
	big.record(make([]byte, 600))
	big.record(make([]byte, 600))
	require.False(t, big.resumable())
	b, err := big.wait(context.Background(), 0)
	require.NoError(t, err)
	require.Nil(t, b, "lost")
	big.complete()
	require.Zero(t, s.bytes, "a lost exchange holds nothing once finished")

	// Finished exchanges make room for running ones, oldest first.
	for i := range 12 { // 12 x 856 B > 8 KiB
		h, _ := s.begin(fmt.Sprintf("f%d", i+1), nil)
		h.record(make([]byte, 600))
		h.complete()
	}
	require.LessOrEqual(t, s.bytes, int64(budget))
	require.True(t, s.lookup("f1") == nil, "evicted first")
	require.True(t, s.lookup("f12") != nil)
	require.Positive(t, testutil.ToFloat64(s.m.dropped.WithLabelValues("evicted")))

	// Running exchanges are never evicted: when they fill the budget, the next loses.
	var running []*heldExchange
	for i := range 20 {
		h, _ := s.begin(string(rune('A'+i)), nil)
		h.record(make([]byte, 1000))
		running = append(running, h)
	}
	// Running exchanges always count their overhead (at most max_concurrent_exchanges of
	// them); their bytes stay within the budget.
	require.LessOrEqual(t, s.bytes, int64(budget+20*heldOverhead))
	require.True(t, running[0].resumable())
	require.False(t, running[19].resumable())
	require.Positive(t, testutil.ToFloat64(s.m.lost.WithLabelValues("budget")))
	for _, h := range running {
		h.complete()
	}
}

func TestHeldTakeOverClosesOriginalStream(t *testing.T) {
	s, _ := testHeldStore(time.Minute, 1<<20)
	st := &closeCounter{}
	h, _ := s.begin("a", st)
	h.takeOver()
	h.takeOver()
	require.Equal(t, 1, st.closed)
}

type closeCounter struct {
	Stream
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }

// TestHeldStoreNeverArrived: a resume for an id the store neither holds nor forgot since
// the request's connection came up proves the request never arrived; anything it may
// have held, or forgot without a trace, does not.
func TestHeldStoreNeverArrived(t *testing.T) {
	s, now := testHeldStore(30*time.Second, 1<<20)
	connUp := now.Add(-time.Second)

	require.True(t, s.neverArrived("lost-1", connUp))
	_, err := s.lookup("lost-1").wait(context.Background(), 0)
	require.ErrorIs(t, err, errNotRun, "a second resume learns the same")
	require.False(t, s.neverArrived("lost-1", connUp), "answered once; then held as not run")
	h, how := s.begin("lost-1", nil)
	require.Equal(t, heldNew, how, "the edge sends it again: it runs as new")
	again, how := s.begin("lost-1", nil)
	require.Equal(t, heldDuplicate, how, "should the first copy arrive late, it does not run twice")
	require.Same(t, h, again)

	require.False(t, s.neverArrived("lost-1", connUp), "held")

	done, _ := s.begin("done-1", nil)
	done.complete()
	*now = now.Add(31 * time.Second)
	require.Nil(t, s.lookup("done-1"), "expired")
	require.False(t, s.neverArrived("done-1", connUp), "it was here and is forgotten: not provably absent")

	require.Nil(t, s.lookup("tombed-1"))
	require.False(t, s.neverArrived("tombed-1", connUp), "told not_held once: stays so")
	_, how = s.begin("tombed-1", nil)
	require.Equal(t, heldTombstoned, how)

	// More forgotten exchanges than the store remembers: the horizon moves past the
	// connection's start, and nothing is provable for it any more.
	at := *now
	for i := range maxGone + 1 {
		s.mu.Lock()
		s.forgetLocked(fmt.Sprint("filler-", i))
		s.mu.Unlock()
		*now = now.Add(time.Microsecond)
	}
	require.Equal(t, at, s.horizon, "the oldest record dropped for room")
	require.False(t, s.neverArrived("lost-2", at), "the connection came up when a dropped record was forgotten")
	require.True(t, s.neverArrived("lost-3", at.Add(time.Nanosecond)))
	require.Len(t, s.goneHash, maxGone, "bounded")
	require.Len(t, s.goneTime, maxGone, "bounded")
}

func TestOriginInstance(t *testing.T) {
	in := newOriginInstance()
	name := in.connection()
	since, ok := in.since(name)
	require.True(t, ok)
	require.False(t, since.After(time.Now()))
	require.False(t, since.Before(in.started))

	other := newOriginInstance()
	_, ok = other.since(name)
	require.False(t, ok, "another process (a restart, a replica) cannot vouch for this connection")
	for _, bad := range []string{"", in.id, in.id + ".", in.id + ".-1", in.id + ".01", in.id + ".x", "." + "5"} {
		_, ok := in.since(bad)
		require.False(t, ok, "%q", bad)
	}
}
