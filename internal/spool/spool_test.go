package spool

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
)

func open(t *testing.T, lim Limits) (*Spool, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spool.db")
	s, err := Open(path, lim)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s, path
}

// reopen closes s (the cleanup's Close of it then does nothing) and opens its file again.
func reopen(t *testing.T, s *Spool, path string, lim Limits) *Spool {
	t.Helper()
	require.NoError(t, s.Close())
	s, err := Open(path, lim)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// request builds a realistic spooled message: a tunnel request head carrying the
// message's id as its exchange id, then the SOAP body.
func request(upstream, body string) func(id string) []byte {
	return func(id string) []byte {
		h := envelope.Request{
			ExchangeID:    id,
			Upstream:      upstream,
			Method:        "POST",
			Target:        "/ws/orders",
			ProtoMinor:    1,
			ContentLength: int64(len(body)),
			Header: httpwire.Header{
				{Name: "Content-Type", Value: "text/xml; charset=utf-8"},
				{Name: "SOAPAction", Value: `"urn:notify"`},
			},
		}
		return append(h.Append(nil), body...)
	}
}

func soapBody(n int) string {
	return `<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><notify seq="` +
		fmt.Sprint(n) + `"/></soap:Body></soap:Envelope>`
}

// parse splits a spooled message into its head and body.
func parse(t *testing.T, data []byte) (*envelope.Request, string) {
	t.Helper()
	head, body, err := envelope.Split(data)
	require.NoError(t, err)
	req, err := envelope.ParseRequest(head)
	require.NoError(t, err)
	return req, string(body)
}

func put(t *testing.T, s *Spool, n int) Message {
	t.Helper()
	m, err := s.Put("peer-a", "orders", request("orders", soapBody(n)))
	require.NoError(t, err)
	return m
}

func pending(t *testing.T, s *Spool, after uint64) []Message {
	t.Helper()
	var ms []Message
	require.NoError(t, s.Pending(after, func(m Message) bool {
		m.Data = bytes.Clone(m.Data)
		ms = append(ms, m)
		return true
	}))
	return ms
}

func seqs(ms []Message) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.Seq)
	}
	return out
}

func deadSeqs(t *testing.T, s *Spool) []uint64 {
	t.Helper()
	var out []uint64
	for _, d := range deadLetters(t, s) {
		out = append(out, d.Seq)
	}
	return out
}

func deadLetters(t *testing.T, s *Spool) []Dead {
	t.Helper()
	var ds []Dead
	require.NoError(t, s.DeadLetters(func(d Dead) bool { ds = append(ds, d); return true }))
	return ds
}

// requireStats checks the counters against what the file holds.
func requireStats(t *testing.T, s *Spool) Stats {
	t.Helper()
	st := s.Stats()
	ms := pending(t, s, 0)
	require.Equal(t, len(ms), st.Messages, "messages")
	var size int64
	var oldest time.Time
	for _, m := range ms {
		size += int64(len(m.Data))
		if oldest.IsZero() || m.Accepted.Before(oldest) {
			oldest = m.Accepted
		}
	}
	require.Equal(t, size, st.Bytes, "bytes")
	require.True(t, oldest.Equal(st.Oldest), "oldest: %v, want %v", st.Oldest, oldest)
	require.Equal(t, len(deadLetters(t, s)), st.Dead, "dead letters")
	return st
}

func TestMessageID(t *testing.T) {
	require.Equal(t, "ow.0123abcd-42", MessageID("0123abcd", 42))
	require.True(t, envelope.IsOneWay(MessageID("x", 1)))
	require.Equal(t, "ow.x-18446744073709551615", MessageID("x", math.MaxUint64))
}

func TestPutGetPending(t *testing.T) {
	s, _ := open(t, Limits{})
	require.Regexp(t, `^[0-9a-f]{16}$`, s.ID())
	require.Empty(t, pending(t, s, 0))
	require.Equal(t, Stats{}, requireStats(t, s))

	var put []Message
	for i := range 5 {
		var ids []string // the ids build is called with
		before := time.Now()
		m, err := s.Put("peer-a", "orders", func(id string) []byte {
			ids = append(ids, id)
			return request("orders", soapBody(i))(id)
		})
		require.NoError(t, err)
		require.Equal(t, uint64(i+1), m.Seq)
		require.Equal(t, MessageID(s.ID(), m.Seq), m.ID)
		require.Equal(t, "peer-a", m.Peer)
		require.Equal(t, "orders", m.Upstream)
		require.False(t, m.Accepted.Before(before))
		require.Len(t, ids, 2, "build is called to size the message, then to make it")
		require.Equal(t, m.ID, ids[len(ids)-1], "the stored message is built for its id")
		req, body := parse(t, m.Data)
		require.Equal(t, m.ID, req.ExchangeID)
		require.Equal(t, soapBody(i), body)
		put = append(put, m)

		select {
		case <-s.Ready():
		default:
			t.Fatal("Put does not signal Ready")
		}
	}

	for _, want := range put {
		got, err := s.Get(want.Seq)
		require.NoError(t, err)
		require.Equal(t, want.ID, got.ID)
		require.Equal(t, want.Peer, got.Peer)
		require.Equal(t, want.Upstream, got.Upstream)
		require.True(t, want.Accepted.Equal(got.Accepted))
		require.Equal(t, want.Data, got.Data)
	}
	_, err := s.Get(99)
	require.ErrorIs(t, err, ErrNotFound)

	require.Equal(t, []uint64{1, 2, 3, 4, 5}, seqs(pending(t, s, 0)))
	require.Equal(t, []uint64{3, 4, 5}, seqs(pending(t, s, 2)))
	require.Empty(t, seqs(pending(t, s, 5)))
	require.Empty(t, seqs(pending(t, s, math.MaxUint64)))
	var first []uint64
	require.NoError(t, s.Pending(0, func(m Message) bool { first = append(first, m.Seq); return len(first) < 2 }))
	require.Equal(t, []uint64{1, 2}, first, "stops when fn returns false")
	for i, m := range pending(t, s, 0) {
		require.Equal(t, put[i].ID, m.ID)
		require.Equal(t, put[i].Data, m.Data)
	}
	requireStats(t, s)
}

func TestDelete(t *testing.T) {
	s, _ := open(t, Limits{})
	for i := range 3 {
		put(t, s, i)
	}
	require.NoError(t, s.Delete(2))
	require.ErrorIs(t, s.Delete(2), ErrNotFound)
	require.ErrorIs(t, s.Delete(7), ErrNotFound)
	_, err := s.Get(2)
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, []uint64{1, 3}, seqs(pending(t, s, 0)))
	require.Equal(t, 2, requireStats(t, s).Messages)

	require.NoError(t, s.Delete(1))
	require.NoError(t, s.Delete(3))
	require.Equal(t, Stats{}, requireStats(t, s))
	require.Equal(t, uint64(4), put(t, s, 9).Seq, "seqs are never reused")
}

func TestKill(t *testing.T) {
	s, _ := open(t, Limits{})
	m1, m2, m3 := put(t, s, 1), put(t, s, 2), put(t, s, 3)
	answer := []byte("HTTP/1.1 500 Internal Server Error\r\n\r\n<soap:Fault/>")
	require.NoError(t, s.Kill(m2.Seq, "refused: 500", answer))
	require.NoError(t, s.Kill(m1.Seq, "in doubt", nil))
	require.ErrorIs(t, s.Kill(m2.Seq, "again", nil), ErrNotFound)
	require.ErrorIs(t, s.Delete(m2.Seq), ErrNotFound, "a dead letter is not pending")

	require.Equal(t, []uint64{m3.Seq}, seqs(pending(t, s, 0)))
	ds := deadLetters(t, s)
	require.Len(t, ds, 2)
	require.Equal(t, m1.Seq, ds[0].Seq)
	require.Equal(t, "in doubt", ds[0].Reason)
	require.Empty(t, ds[0].Answer)
	require.Equal(t, m2.Seq, ds[1].Seq)
	require.Equal(t, m2.ID, ds[1].ID)
	require.Equal(t, m2.Peer, ds[1].Peer)
	require.Equal(t, m2.Upstream, ds[1].Upstream)
	require.True(t, m2.Accepted.Equal(ds[1].Accepted))
	require.Equal(t, m2.Data, ds[1].Data)
	require.Equal(t, "refused: 500", ds[1].Reason)
	require.Equal(t, answer, ds[1].Answer)

	var n int
	require.NoError(t, s.DeadLetters(func(Dead) bool { n++; return false }))
	require.Equal(t, 1, n, "stops when fn returns false")

	st := requireStats(t, s)
	require.Equal(t, 1, st.Messages)
	require.Equal(t, 2, st.Dead)
	require.True(t, m3.Accepted.Equal(st.Oldest))
}

func TestRequeue(t *testing.T) {
	s, _ := open(t, Limits{})
	m1 := put(t, s, 1)
	put(t, s, 2)
	require.NoError(t, s.Kill(m1.Seq, "refused", []byte("answer")))
	<-s.Ready() // drained; Requeue signals again

	m, err := s.Requeue(m1.Seq)
	require.NoError(t, err)
	require.Equal(t, uint64(3), m.Seq, "a new seq, after every message put before")
	require.Equal(t, MessageID(s.ID(), 3), m.ID)
	require.NotEqual(t, m1.ID, m.ID)
	require.Equal(t, m1.Peer, m.Peer)
	require.Equal(t, m1.Upstream, m.Upstream)
	require.True(t, m1.Accepted.Equal(m.Accepted), "accepted when the client sent it")
	req, body := parse(t, m.Data)
	require.Equal(t, m.ID, req.ExchangeID, "the envelope head carries the new id")
	old, oldBody := parse(t, m1.Data)
	old.ExchangeID = m.ID
	require.Equal(t, old, req, "nothing else in the head changed")
	require.Equal(t, oldBody, body)
	select {
	case <-s.Ready():
	default:
		t.Fatal("Requeue does not signal Ready")
	}

	got, err := s.Get(m.Seq)
	require.NoError(t, err)
	require.Equal(t, m.Data, got.Data)
	require.Equal(t, []uint64{2, 3}, seqs(pending(t, s, 0)))
	require.Empty(t, deadSeqs(t, s))
	st := requireStats(t, s)
	require.Equal(t, 2, st.Messages)
	require.Zero(t, st.Dead)
	require.True(t, m1.Accepted.Equal(st.Oldest))

	_, err = s.Requeue(m1.Seq)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.Requeue(2)
	require.ErrorIs(t, err, ErrNotFound, "pending, not dead")
	require.Equal(t, uint64(4), put(t, s, 4).Seq)
}

// A dead letter whose message does not carry its id in its head is not requeued.
func TestRequeueForeignMessage(t *testing.T) {
	s, _ := open(t, Limits{})
	m, err := s.Put("p", "u", request("u", "body")) // fine
	require.NoError(t, err)
	other, err := s.Put("p", "u", func(string) []byte { return request("u", "body")("ow.other-1") })
	require.NoError(t, err)
	junk, err := s.Put("p", "u", func(string) []byte { return []byte("not a tunnel message") })
	require.NoError(t, err)
	for _, seq := range []uint64{m.Seq, other.Seq, junk.Seq} {
		require.NoError(t, s.Kill(seq, "refused", nil))
	}
	_, err = s.Requeue(other.Seq)
	require.ErrorContains(t, err, `carries exchange id "ow.other-1"`)
	_, err = s.Requeue(junk.Seq)
	require.ErrorIs(t, err, envelope.ErrMalformed)
	require.Len(t, deadSeqs(t, s), 3, "kept")
	_, err = s.Requeue(m.Seq)
	require.NoError(t, err)
	st := requireStats(t, s)
	require.Equal(t, 1, st.Messages)
	require.Equal(t, 2, st.Dead)
}

func TestPurge(t *testing.T) {
	s, _ := open(t, Limits{})
	m1, m2 := put(t, s, 1), put(t, s, 2)
	require.NoError(t, s.Kill(m1.Seq, "refused", nil))
	require.ErrorIs(t, s.Purge(m2.Seq), ErrNotFound, "pending, not dead")
	require.NoError(t, s.Purge(m1.Seq))
	require.ErrorIs(t, s.Purge(m1.Seq), ErrNotFound)
	require.Empty(t, deadSeqs(t, s))
	st := requireStats(t, s)
	require.Zero(t, st.Dead)
	require.Equal(t, 1, st.Messages)
}

func TestLimits(t *testing.T) {
	fixed := func(n int) func(string) []byte { // n bytes whatever the id
		return func(string) []byte { return bytes.Repeat([]byte{'x'}, n) }
	}
	for _, tc := range []struct {
		name  string
		lim   Limits
		sizes []int // the messages put, in order
		full  []int // the indexes refused
	}{
		{"messages", Limits{MaxMessages: 3}, []int{10, 10, 10, 10, 10}, []int{3, 4}},
		{"bytes", Limits{MaxBytes: 100}, []int{40, 40, 21, 20, 1}, []int{2, 4}},
		{"bytes exactly", Limits{MaxBytes: 100}, []int{50, 50, 1}, []int{2}},
		{"one message over", Limits{MaxBytes: 100}, []int{101, 100}, []int{0}},
		{"both", Limits{MaxMessages: 2, MaxBytes: 100}, []int{60, 60, 30, 10}, []int{1, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := open(t, tc.lim)
			full := map[int]bool{}
			for _, i := range tc.full {
				full[i] = true
			}
			var seq uint64
			for i, n := range tc.sizes {
				before := s.Stats()
				m, err := s.Put("p", "u", fixed(n))
				if full[i] {
					require.ErrorIs(t, err, ErrFull, "message %d", i)
					require.Equal(t, before, s.Stats(), "counters unchanged")
					continue
				}
				require.NoError(t, err, "message %d", i)
				seq++
				require.Equal(t, seq, m.Seq, "a refused message takes no seq")
			}
			st := requireStats(t, s)
			require.Equal(t, len(tc.sizes)-len(tc.full), st.Messages)
		})
	}
}

// Delivering a message makes room for another.
func TestLimitsFreedByDeleteAndKill(t *testing.T) {
	s, _ := open(t, Limits{MaxMessages: 2})
	m1, m2 := put(t, s, 1), put(t, s, 2)
	_, err := s.Put("p", "u", request("u", "x"))
	require.ErrorIs(t, err, ErrFull)
	require.NoError(t, s.Delete(m1.Seq))
	m3 := put(t, s, 3)
	_, err = s.Put("p", "u", request("u", "x"))
	require.ErrorIs(t, err, ErrFull)
	require.NoError(t, s.Kill(m2.Seq, "refused", nil))
	put(t, s, 4)
	require.Equal(t, []uint64{m3.Seq, 4}, seqs(pending(t, s, 0)))
	requireStats(t, s)
}

// Realistic messages (whose size depends on their id) are counted at their real size.
func TestBytesCounted(t *testing.T) {
	s, _ := open(t, Limits{})
	var total int64
	for i := range 12 { // ids of one and two digits
		total += int64(len(put(t, s, i).Data))
	}
	require.Equal(t, total, requireStats(t, s).Bytes)
}

func TestMaxDead(t *testing.T) {
	s, path := open(t, Limits{MaxDead: 2})
	var ms []Message
	for i := range 5 {
		ms = append(ms, put(t, s, i))
	}
	for _, m := range ms[:4] {
		require.NoError(t, s.Kill(m.Seq, fmt.Sprint("reason ", m.Seq), nil))
	}
	ds := deadLetters(t, s)
	require.Len(t, ds, 2, "the oldest dropped")
	require.Equal(t, []uint64{3, 4}, []uint64{ds[0].Seq, ds[1].Seq})
	require.Equal(t, "reason 3", ds[0].Reason)
	require.Equal(t, 2, requireStats(t, s).Dead)

	require.NoError(t, s.Purge(3))
	require.NoError(t, s.Kill(ms[4].Seq, "last", nil))
	require.Equal(t, 2, requireStats(t, s).Dead)

	s = reopen(t, s, path, Limits{MaxDead: 2})
	require.Equal(t, 2, requireStats(t, s).Dead)
}

// Dead letters killed together (in one group commit) keep to MaxDead.
func TestMaxDeadConcurrentKills(t *testing.T) {
	const n, maxDead = 200, 10
	s, path := open(t, Limits{MaxDead: maxDead})
	var ms []Message
	for i := range n {
		ms = append(ms, put(t, s, i))
	}
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { assert.NoError(t, s.Kill(m.Seq, "refused", nil)) })
	}
	wg.Wait()
	require.Len(t, deadSeqs(t, s), maxDead)
	require.Equal(t, maxDead, requireStats(t, s).Dead)

	// Purges and requeues at once keep the count right too.
	ds := deadLetters(t, s)
	for i, d := range ds {
		wg.Go(func() {
			if i%2 == 0 {
				assert.NoError(t, s.Purge(d.Seq))
			} else {
				_, err := s.Requeue(d.Seq)
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	requireStats(t, s)
	require.Zero(t, s.Stats().Dead)

	s = reopen(t, s, path, Limits{MaxDead: maxDead})
	st := requireStats(t, s)
	require.Equal(t, maxDead/2, st.Messages)
}

func TestStatsAfterReopen(t *testing.T) {
	s, path := open(t, Limits{})
	id := s.ID()
	var ms []Message
	for i := range 4 {
		ms = append(ms, put(t, s, i))
	}
	require.NoError(t, s.Kill(ms[0].Seq, "refused", []byte("no")))
	require.NoError(t, s.Delete(ms[2].Seq))
	want := requireStats(t, s)
	require.Equal(t, 2, want.Messages)
	require.Equal(t, int64(len(ms[1].Data)+len(ms[3].Data)), want.Bytes)
	require.True(t, ms[1].Accepted.Equal(want.Oldest))
	require.Equal(t, 1, want.Dead)

	s = reopen(t, s, path, Limits{})
	require.Equal(t, id, s.ID(), "the spool keeps its id")
	requireSameStats(t, want, requireStats(t, s))
	for _, m := range []Message{ms[1], ms[3]} {
		g, err := s.Get(m.Seq)
		require.NoError(t, err)
		require.Equal(t, m.ID, g.ID)
		require.Equal(t, m.Data, g.Data)
	}
	require.Equal(t, uint64(5), put(t, s, 5).Seq, "seqs go on after a restart")
	ds := deadLetters(t, s)
	require.Len(t, ds, 1)
	require.Equal(t, []byte("no"), ds[0].Answer)
}

func TestLocked(t *testing.T) {
	_, path := open(t, Limits{})
	_, err := Open(path, Limits{})
	require.ErrorIs(t, err, ErrLocked)
}

func TestClosed(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "spool.db"), Limits{MaxMessages: 1})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = s.Put("p", "u", request("u", "x"))
	require.Error(t, err)
	require.Zero(t, s.Stats().Messages, "the reservation is given back")
}

func TestConcurrentPuts(t *testing.T) {
	const goroutines, each = 32, 50
	s, path := open(t, Limits{})
	var wg sync.WaitGroup
	got := make(chan Message, goroutines*each)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				m, err := s.Put(fmt.Sprint("peer-", g), "u", request("u", soapBody(g*each+i)))
				if !assert.NoError(t, err) {
					return
				}
				got <- m
			}
		})
	}
	wg.Wait()
	close(got)
	bySeq := map[uint64]Message{}
	for m := range got {
		_, dup := bySeq[m.Seq]
		require.False(t, dup, "seq %d given twice", m.Seq)
		bySeq[m.Seq] = m
		req, _ := parse(t, m.Data)
		require.Equal(t, m.ID, req.ExchangeID)
	}
	require.Len(t, bySeq, goroutines*each)
	ms := pending(t, s, 0)
	require.Len(t, ms, goroutines*each)
	for i, m := range ms {
		require.Equal(t, uint64(i+1), m.Seq, "in order, no gaps")
		require.Equal(t, bySeq[m.Seq].Data, m.Data)
	}
	want := requireStats(t, s)

	s = reopen(t, s, path, Limits{})
	requireSameStats(t, want, requireStats(t, s))
}

func requireSameStats(t *testing.T, want, got Stats) {
	t.Helper()
	require.Equal(t, want.Messages, got.Messages, "messages")
	require.Equal(t, want.Bytes, got.Bytes, "bytes")
	require.True(t, want.Oldest.Equal(got.Oldest), "oldest: %v, want %v", got.Oldest, want.Oldest)
	require.Equal(t, want.Dead, got.Dead, "dead letters")
}

// Under concurrency the limits hold exactly: of many Puts racing for N places, exactly
// N get them.
func TestConcurrentLimits(t *testing.T) {
	const goroutines, each = 32, 10
	const size = 100
	fixed := func(string) []byte { return bytes.Repeat([]byte{'x'}, size) }
	for _, tc := range []struct {
		name string
		lim  Limits
		want int
	}{
		{"messages", Limits{MaxMessages: 77}, 77},
		{"bytes", Limits{MaxBytes: 55*size + size/2}, 55},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := open(t, tc.lim)
			var wg sync.WaitGroup
			var mu sync.Mutex
			ok, full := 0, 0
			start := make(chan struct{})
			for range goroutines {
				wg.Go(func() {
					<-start
					for range each {
						_, err := s.Put("p", "u", fixed)
						mu.Lock()
						if err == nil {
							ok++
						} else {
							assert.ErrorIs(t, err, ErrFull)
							full++
						}
						mu.Unlock()
						st := s.Stats()
						assert.LessOrEqual(t, st.Messages, tc.want)
						assert.LessOrEqual(t, st.Bytes, int64(tc.want*size))
					}
				})
			}
			close(start)
			wg.Wait()
			require.Equal(t, tc.want, ok)
			require.Equal(t, goroutines*each-tc.want, full)
			st := requireStats(t, s)
			require.Equal(t, tc.want, st.Messages)
			require.Equal(t, int64(tc.want*size), st.Bytes)
		})
	}
}

// A consumer that settles messages as soon as they are committed (possibly before the Put
// that stored them has returned) leaves the counters right.
func TestConcurrentPutAndSettle(t *testing.T) {
	const goroutines, each = 16, 40
	s, _ := open(t, Limits{})
	stop := make(chan struct{})
	consumed := make(chan int)
	go func() {
		n := 0
		var next uint64
		for {
			stopping := false
			select {
			case <-stop: // every Put has returned: this read sees all
				stopping = true
			default:
			}
			var batch []uint64
			assert.NoError(t, s.Pending(next, func(m Message) bool {
				batch = append(batch, m.Seq)
				return true
			}))
			for _, seq := range batch {
				if seq%3 == 0 {
					assert.NoError(t, s.Kill(seq, "refused", nil))
				} else {
					assert.NoError(t, s.Delete(seq))
				}
				next = seq
				n++
			}
			if len(batch) == 0 {
				if stopping {
					consumed <- n
					return
				}
				runtime.Gosched()
			}
		}
	}()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := range each {
				_, err := s.Put("p", "u", request("u", soapBody(i)))
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	close(stop)
	require.Equal(t, goroutines*each, <-consumed)
	st := requireStats(t, s)
	require.Zero(t, st.Messages)
	require.Zero(t, st.Bytes)
	require.True(t, st.Oldest.IsZero(), "oldest %v", st.Oldest)
}

// A message settled (delivered or killed) before the Put or Requeue that stored it has
// counted it (a forwarder reads it as soon as it is committed) is not counted once that
// Put or Requeue does.
func TestSettledBeforeCounted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		requeue bool // the message is requeued, not put
		kill    bool // settled by Kill, not Delete
	}{
		{"put, delete", false, false},
		{"put, kill", false, true},
		{"requeue, delete", true, false},
		{"requeue, kill", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := open(t, Limits{})
			other := put(t, s, 0) // stays pending: Oldest is its
			var dead Message
			if tc.requeue {
				dead = put(t, s, 1)
				require.NoError(t, s.Kill(dead.Seq, "refused", nil))
			}
			var hooked []uint64
			testHookCommitted = func(m Message) {
				hooked = append(hooked, m.Seq)
				if tc.kill {
					require.NoError(t, s.Kill(m.Seq, "refused", nil))
				} else {
					require.NoError(t, s.Delete(m.Seq))
				}
			}
			defer func() { testHookCommitted = nil }()
			var err error
			if tc.requeue {
				_, err = s.Requeue(dead.Seq)
			} else {
				_, err = s.Put("p", "u", request("u", soapBody(2)))
			}
			require.NoError(t, err)
			require.Len(t, hooked, 1)
			st := requireStats(t, s)
			require.Equal(t, 1, st.Messages)
			require.Equal(t, int64(len(other.Data)), st.Bytes)
			require.True(t, other.Accepted.Equal(st.Oldest))
			require.NoError(t, s.Delete(other.Seq))
			st = requireStats(t, s)
			require.Equal(t, Stats{Dead: st.Dead}, st)
			s.mu.Lock()
			require.Empty(t, s.gone)
			require.Empty(t, s.oldest)
			s.mu.Unlock()
		})
	}
}

// A file whose dead letters' count is missing or wrong is counted again when opened.
func TestDeadCountRepaired(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count []byte // nil: no count
	}{
		{"missing", nil},
		{"wrong", binary.BigEndian.AppendUint64(nil, 99)},
		{"unreadable", []byte{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, path := open(t, Limits{MaxDead: 3})
			for i := range 5 {
				m := put(t, s, i)
				if i < 3 {
					require.NoError(t, s.Kill(m.Seq, "refused", nil))
				}
			}
			require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
				if tc.count == nil {
					return tx.Bucket(bucketMeta).Delete(keyDeadCount)
				}
				return tx.Bucket(bucketMeta).Put(keyDeadCount, tc.count)
			}))
			s = reopen(t, s, path, Limits{MaxDead: 3})
			require.Equal(t, 3, requireStats(t, s).Dead)
			require.NoError(t, s.Kill(4, "refused", nil))
			require.NoError(t, s.Kill(5, "refused", nil))
			require.Equal(t, []uint64{3, 4, 5}, deadSeqs(t, s))
			require.Equal(t, 3, requireStats(t, s).Dead)
		})
	}
}
