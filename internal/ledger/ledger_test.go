package ledger

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func openLedger(t *testing.T) (*Ledger, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path, 0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l, path
}

func requireState(t *testing.T, l *Ledger, id string, want State) Record {
	t.Helper()
	rec, err := l.Get(id)
	require.NoError(t, err)
	require.Equal(t, want, rec.State, "Get(%q)", id)
	return rec
}

func begin(t *testing.T, l *Ledger, id string, redeliverInDoubt bool) Record {
	t.Helper()
	rec, err := l.Begin(id, redeliverInDoubt)
	require.NoError(t, err)
	return rec
}

// keys counts the records of both buckets: the time index must follow the ids.
func keys(t *testing.T, l *Ledger) (ids, byTime int) {
	t.Helper()
	require.NoError(t, l.db.View(func(tx *bolt.Tx) error {
		ids = tx.Bucket(bucketIDs).Stats().KeyN
		byTime = tx.Bucket(bucketByTime).Stats().KeyN
		return nil
	}))
	return ids, byTime
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Absent: "absent", Sending: "sending", Done: "done", InDoubt: "in_doubt", InProgress: "in_progress", Sent: "sent", 9: "state(9)"} {
		require.Equal(t, want, s.String())
	}
}

func TestLifecycle(t *testing.T) {
	l, _ := openLedger(t)
	const id = "ow.abc-1"

	requireState(t, l, id, Absent)
	before := time.Now()
	rec := begin(t, l, id, false)
	require.Equal(t, Absent, rec.State, "claimed")
	got := requireState(t, l, id, Sending)
	require.False(t, got.Time.Before(before.Truncate(0)))

	require.Equal(t, InProgress, begin(t, l, id, false).State, "a second delivery while the first runs")
	require.Equal(t, InProgress, begin(t, l, id, true).State, "even when in-doubt ids are redelivered")

	require.NoError(t, l.MarkSent(id))
	requireState(t, l, id, Sent) // in progress: not in doubt
	require.Equal(t, InProgress, begin(t, l, id, true).State)

	require.NoError(t, l.Done(id, 202))
	got = requireState(t, l, id, Done)
	require.Equal(t, 202, got.Status)
	for _, redeliver := range []bool{false, true} {
		rec = begin(t, l, id, redeliver)
		require.Equal(t, Done, rec.State)
		require.Equal(t, 202, rec.Status)
		require.True(t, got.Time.Equal(rec.Time))
	}
	requireState(t, l, id, Done) // a refused Begin changes nothing

	ids, byTime := keys(t, l)
	require.Equal(t, 1, ids)
	require.Equal(t, 1, byTime)
}

func TestForget(t *testing.T) {
	for _, sent := range []bool{false, true} {
		t.Run(fmt.Sprintf("sent=%v", sent), func(t *testing.T) {
			l, _ := openLedger(t)
			const id = "ow.abc-2"
			require.Equal(t, Absent, begin(t, l, id, false).State)
			if sent {
				require.NoError(t, l.MarkSent(id))
			}
			require.NoError(t, l.Forget(id))
			requireState(t, l, id, Absent)
			ids, byTime := keys(t, l)
			require.Zero(t, ids)
			require.Zero(t, byTime)

			require.Equal(t, Absent, begin(t, l, id, false).State, "may be delivered again")
			require.NoError(t, l.Done(id, 200))
			requireState(t, l, id, Done)

			require.NoError(t, l.Forget("ow.never-seen"))
		})
	}
}

func TestAbandon(t *testing.T) {
	for _, redeliver := range []bool{false, true} {
		t.Run(fmt.Sprintf("redeliverInDoubt=%v", redeliver), func(t *testing.T) {
			l, _ := openLedger(t)
			const id = "ow.abc-3"
			require.Equal(t, Absent, begin(t, l, id, false).State)
			require.NoError(t, l.MarkSent(id))
			sent := requireState(t, l, id, Sent)
			l.Abandon(id)
			requireState(t, l, id, InDoubt)

			rec := begin(t, l, id, redeliver)
			if !redeliver {
				require.Equal(t, InDoubt, rec.State)
				require.True(t, sent.Time.Equal(rec.Time), "the time it was sent")
				requireState(t, l, id, InDoubt) // not claimed: nobody delivers it
				require.Equal(t, InDoubt, begin(t, l, id, false).State, "nor left in progress")
				return
			}
			require.Equal(t, Absent, rec.State, "claimed again")
			requireState(t, l, id, Sending)
			require.Equal(t, InProgress, begin(t, l, id, true).State)
			require.NoError(t, l.Done(id, 200))
			requireState(t, l, id, Done)
			ids, byTime := keys(t, l)
			require.Equal(t, 1, ids)
			require.Equal(t, 1, byTime, "the old claim's time key is gone")
		})
	}
}

// A delivery abandoned before MarkSent never reached the server whole: it left nothing
// on disk, is not in doubt and is claimed again.
func TestAbandonBeforeSent(t *testing.T) {
	l, _ := openLedger(t)
	const id = "ow.abc-4"
	require.Equal(t, Absent, begin(t, l, id, false).State)
	l.Abandon(id)
	requireState(t, l, id, Absent)
	require.Equal(t, Absent, begin(t, l, id, false).State)
	require.NoError(t, l.Done(id, 200))
	ids, byTime := keys(t, l)
	require.Equal(t, 1, ids)
	require.Equal(t, 1, byTime)
}

// A claim whose process died (Close without Done) is delivered again after a restart if
// it was not sent whole, and is in doubt if it was.
func TestClaimSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path, 0)
	require.NoError(t, err)
	require.Equal(t, Absent, begin(t, l, "ow.x-1", false).State)
	require.NoError(t, l.MarkSent("ow.x-1"))
	require.Equal(t, Absent, begin(t, l, "ow.x-2", false).State)
	require.NoError(t, l.Done("ow.x-2", 204))
	require.Equal(t, Absent, begin(t, l, "ow.x-3", false).State)
	require.NoError(t, l.Close()) // the process dies: x-1 sent, x-3 claimed

	l, err = Open(path, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()
	requireState(t, l, "ow.x-1", InDoubt)
	require.Equal(t, 204, requireState(t, l, "ow.x-2", Done).Status)
	requireState(t, l, "ow.x-3", Absent) // a claim is not written: nothing to read as in doubt
	require.Equal(t, []string{"ow.x-1"}, inDoubt(t, l))

	require.Equal(t, InDoubt, begin(t, l, "ow.x-1", false).State)
	require.Equal(t, Absent, begin(t, l, "ow.x-1", true).State)
	require.NoError(t, l.Done("ow.x-1", 200))
	requireState(t, l, "ow.x-1", Done)

	require.Equal(t, Absent, begin(t, l, "ow.x-3", false).State, "never sent whole: delivered again")
	require.NoError(t, l.Done("ow.x-3", 200))
	require.Empty(t, inDoubt(t, l))
}

func TestCloseTwice(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "ledger.db"), time.Hour)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.NoError(t, l.Close())
}

func TestClosed(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "ledger.db"), 0)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	_, err = l.Begin("ow.x-1", false)
	require.Error(t, err)
	// A failed Begin does not leave the id in progress.
	l.mu.Lock()
	require.Empty(t, l.inflight)
	l.mu.Unlock()
}

func TestLocked(t *testing.T) {
	l, path := openLedger(t)
	_ = l
	_, err := Open(path, 0)
	require.ErrorIs(t, err, ErrLocked)
}

func inDoubt(t *testing.T, l *Ledger) []string {
	t.Helper()
	var ids []string
	require.NoError(t, l.InDoubt(func(id string, rec Record) bool {
		require.Equal(t, InDoubt, rec.State)
		ids = append(ids, id)
		return true
	}))
	return ids
}

func TestInDoubt(t *testing.T) {
	l, _ := openLedger(t)
	require.Empty(t, inDoubt(t, l))
	// In time order: a, b sent and abandoned; c done; d forgotten; e sent, in progress;
	// f sent and abandoned; g claimed, not sent.
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		require.Equal(t, Absent, begin(t, l, id, false).State)
	}
	for _, id := range []string{"a", "b", "e", "f"} {
		require.NoError(t, l.MarkSent(id))
	}
	l.Abandon("a")
	l.Abandon("b")
	require.NoError(t, l.Done("c", 200))
	require.NoError(t, l.Forget("d"))
	l.Abandon("f")
	l.Abandon("g")
	require.Equal(t, []string{"a", "b", "f"}, inDoubt(t, l))

	var first []string
	require.NoError(t, l.InDoubt(func(id string, _ Record) bool { first = append(first, id); return false }))
	require.Equal(t, []string{"a"}, first, "stops when fn returns false")

	// Redelivering b: not in doubt while in progress, and last (its time changed) once
	// abandoned again after it was sent.
	require.Equal(t, Absent, begin(t, l, "b", true).State)
	require.Equal(t, []string{"a", "f"}, inDoubt(t, l))
	require.NoError(t, l.MarkSent("b"))
	require.Equal(t, []string{"a", "f"}, inDoubt(t, l))
	l.Abandon("b")
	require.Equal(t, []string{"a", "f", "b"}, inDoubt(t, l))
	l.Abandon("e")
	require.Equal(t, []string{"a", "e", "f", "b"}, inDoubt(t, l))
}

func TestPrune(t *testing.T) {
	l, _ := openLedger(t)
	for _, id := range []string{"done", "doubt", "running", "runningSent", "forgotten", "dead"} {
		require.Equal(t, Absent, begin(t, l, id, false).State)
	}
	require.NoError(t, l.Done("done", 200))
	require.NoError(t, l.MarkSent("doubt"))
	l.Abandon("doubt")
	require.NoError(t, l.MarkSent("runningSent"))
	require.NoError(t, l.Forget("forgotten"))
	l.Abandon("dead") // claimed, never sent: nothing written

	n, err := l.Prune(time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "nothing that old")

	n, err = l.Prune(time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	requireState(t, l, "done", Absent)
	requireState(t, l, "doubt", Absent)
	requireState(t, l, "dead", Absent)
	requireState(t, l, "running", Sending)  // claimed in memory
	requireState(t, l, "runningSent", Sent) // never pruned while in progress
	ids, byTime := keys(t, l)
	require.Equal(t, 1, ids)
	require.Equal(t, 1, byTime)

	require.NoError(t, l.Done("running", 200))
	require.NoError(t, l.Done("runningSent", 200))
	n, err = l.Prune(time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 2, n, "pruned once they ended")
	requireState(t, l, "running", Absent)
	ids, byTime = keys(t, l)
	require.Zero(t, ids)
	require.Zero(t, byTime)
}

func TestStats(t *testing.T) {
	l, _ := openLedger(t)
	st, err := l.Stats()
	require.NoError(t, err)
	require.Empty(t, st)
	for i := range 6 {
		require.Equal(t, Absent, begin(t, l, fmt.Sprint(i), false).State)
	}
	require.NoError(t, l.Done("0", 200))
	require.NoError(t, l.Done("1", 500))
	require.NoError(t, l.Forget("2"))
	require.NoError(t, l.MarkSent("3"))
	l.Abandon("3")
	require.NoError(t, l.MarkSent("4"))
	st, err = l.Stats()
	require.NoError(t, err)
	require.Equal(t, map[State]int{Done: 2, Sent: 2}, st, "as stored: the claim of 5 is not written")
}

// Of many concurrent Begins of one id exactly one claims it.
func TestConcurrentBegin(t *testing.T) {
	l, _ := openLedger(t)
	const goroutines = 32
	const ids = 20
	var wg sync.WaitGroup
	results := make(chan struct {
		id    string
		state State
	}, goroutines*ids)
	for range goroutines {
		wg.Go(func() {
			for i := range ids {
				id := fmt.Sprintf("ow.c-%d", i)
				rec, err := l.Begin(id, false)
				if !assert.NoError(t, err) {
					return
				}
				results <- struct {
					id    string
					state State
				}{id, rec.State}
			}
		})
	}
	wg.Wait()
	close(results)
	claims := map[string]int{}
	for r := range results {
		switch r.state {
		case Absent:
			claims[r.id]++
		case InProgress:
		default:
			t.Fatalf("Begin(%s) = %v", r.id, r.state)
		}
	}
	for i := range ids {
		id := fmt.Sprintf("ow.c-%d", i)
		require.Equal(t, 1, claims[id], id)
		require.NoError(t, l.Done(id, 200))
	}
	st, err := l.Stats()
	require.NoError(t, err)
	require.Equal(t, map[State]int{Done: ids}, st)
}

// An unreadable record (too short, or a state that is never stored) is in doubt: never
// delivered again on a guess.
func TestUnreadableRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    []byte
	}{
		{"short", []byte{2, 0, 0}},
		{"empty", []byte{}},
		{"state absent", encode(Record{State: Absent, Time: time.Unix(0, 1)})},
		{"state in doubt", encode(Record{State: InDoubt, Time: time.Unix(0, 1)})},
		{"state in progress", encode(Record{State: InProgress, Time: time.Unix(0, 1)})},
		{"unknown state", encode(Record{State: 77, Time: time.Unix(0, 1)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := openLedger(t)
			const id = "ow.bad-1"
			require.NoError(t, l.db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(bucketIDs).Put([]byte(id), tc.v)
			}))
			requireState(t, l, id, InDoubt)
			require.Equal(t, InDoubt, begin(t, l, id, false).State)
			requireState(t, l, id, InDoubt)
			require.Equal(t, Absent, begin(t, l, id, true).State, "claimed when told to redeliver")
			require.NoError(t, l.Done(id, 200))
			requireState(t, l, id, Done)
		})
	}
}

// timeIndex returns the ids of the time index in order, with their times.
func timeIndex(t *testing.T, l *Ledger) (ids []string, at []time.Time) {
	t.Helper()
	require.NoError(t, l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketByTime).ForEach(func(k, _ []byte) error {
			ids = append(ids, string(k[8:]))
			at = append(at, time.Unix(0, int64(binary.BigEndian.Uint64(k[:8]))))
			return nil
		})
	}))
	return ids, at
}

// A delivery writes the time index once, with its first record ("sent"; the claim is
// not written): "done" changes the record alone, which keeps its place.
func TestDeliveryIndexedAtClaim(t *testing.T) {
	l, _ := openLedger(t)
	const id = "ow.1"
	require.Equal(t, Absent, begin(t, l, id, false).State)
	requireState(t, l, id, Sending)
	ids, _ := timeIndex(t, l)
	require.Empty(t, ids, "a claim is not written")

	require.NoError(t, l.MarkSent(id))
	claim := requireState(t, l, id, Sent)
	require.True(t, claim.Claimed.Equal(claim.Time))
	ids, at := timeIndex(t, l)
	require.Equal(t, []string{id}, ids)
	require.True(t, at[0].Equal(claim.Claimed))

	require.NoError(t, l.Done(id, 202)) // a synced commit later: a later time
	done := requireState(t, l, id, Done)
	require.True(t, done.Time.After(claim.Time), "the record's time is its last change")
	require.True(t, done.Claimed.Equal(claim.Claimed), "its claim stays")
	require.Equal(t, 202, done.Status)
	ids, at = timeIndex(t, l)
	require.Equal(t, []string{id}, ids)
	require.True(t, at[0].Equal(claim.Claimed), "the index key did not move")
}

// Records of the earlier layout (state | time | status, indexed by their last change)
// still end, are forgotten, re-claimed and pruned with their index keys.
func TestLegacyRecords(t *testing.T) {
	l, _ := openLedger(t)
	old := time.Now().Add(-2 * time.Hour)
	legacy := func(id string, st State) {
		require.NoError(t, l.db.Update(func(tx *bolt.Tx) error {
			v := encode(Record{State: st, Time: old, Claimed: old})[:legacyLen]
			if err := tx.Bucket(bucketIDs).Put([]byte(id), v); err != nil {
				return err
			}
			return tx.Bucket(bucketByTime).Put(timeKey(old, id), nil)
		}))
	}
	legacy("done", Done)
	legacy("doubt", Sent)
	legacy("forget", Sending)
	legacy("redeliver", Sent)

	rec := requireState(t, l, "done", Done)
	require.True(t, rec.Claimed.Equal(old))
	require.Equal(t, Done, begin(t, l, "done", false).State, "delivered before: never again")
	require.Equal(t, InDoubt, begin(t, l, "doubt", false).State)

	// "forget" was claimed by a process that died before sending it whole: claimed again,
	// then forgotten, its key leaves with it.
	require.Equal(t, Absent, begin(t, l, "forget", false).State)
	require.NoError(t, l.Forget("forget"))
	requireState(t, l, "forget", Absent)

	// Re-claimed on an operator's word: the key moves to the new claim.
	require.Equal(t, Absent, begin(t, l, "redeliver", true).State)
	require.NoError(t, l.MarkSent("redeliver"))
	require.NoError(t, l.Done("redeliver", 200))
	ids, at := timeIndex(t, l)
	require.Equal(t, []string{"done", "doubt", "redeliver"}, ids, "old keys in place, the re-claimed one last")
	require.True(t, at[0].Equal(old) && at[1].Equal(old))
	require.True(t, at[2].After(old))

	n, err := l.Prune(time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, 2, n, "the two legacy records older than the cutoff")
	requireState(t, l, "done", Absent)
	requireState(t, l, "doubt", Absent)
	requireState(t, l, "redeliver", Done)
	nIDs, nByTime := keys(t, l)
	require.Equal(t, 1, nIDs)
	require.Equal(t, 1, nByTime)
}

// BenchmarkDelivery measures what the ledger adds to one delivery (Begin, MarkSent,
// Done), one at a time as an ordered peer delivers, and 16 at once, on the test's file
// system (synced commits: what it reports is mostly that file system's fsync).
//
//	go test -run '^$' -bench BenchmarkDelivery -benchtime 2000x ./internal/ledger/
func BenchmarkDelivery(b *testing.B) {
	deliver := func(b *testing.B, l *Ledger, id string) {
		if rec, err := l.Begin(id, false); err != nil || rec.State != Absent {
			b.Fatal(rec.State, err)
		}
		if err := l.MarkSent(id); err != nil {
			b.Fatal(err)
		}
		if err := l.Done(id, 202); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("sequential", func(b *testing.B) {
		l, err := Open(filepath.Join(b.TempDir(), "ledger.db"), 0)
		require.NoError(b, err)
		defer l.Close()
		i := 0
		for b.Loop() {
			i++
			deliver(b, l, fmt.Sprintf("ow.s-%d", i))
		}
	})
	b.Run("16-at-once", func(b *testing.B) {
		l, err := Open(filepath.Join(b.TempDir(), "ledger.db"), 0)
		require.NoError(b, err)
		defer l.Close()
		var next atomic.Int64
		b.SetParallelism(8) // 16 goroutines on 2 Ps
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				deliver(b, l, fmt.Sprintf("ow.p-%d", next.Add(1)))
			}
		})
	})
}
