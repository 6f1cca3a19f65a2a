// Package ledger is the origin's durable record of one-way messages it delivered to the
// server, so that a message the edge sends again (its acknowledgement was lost, or either
// gateway restarted between delivery and acknowledgement) is never delivered twice.
//
// Each message id goes through these states, each write synced to disk before the
// origin acts on it:
//
//	(absent) ──Begin──► sending ──MarkSent──► sent ──Done──► done   (never sent again)
//	                       │                    │
//	                       ├──Forget──► (absent)└─ no answer (Abandon, or the process
//	                       │                       dies) ──► in doubt
//	                       └─ the process dies ──► (absent): may be sent again
//
// "sending" is held in memory only: on disk it would read after a crash exactly as no
// record does (deliver again), so Begin writes nothing; it claims the id in this process
// and reads what an earlier delivery left. MarkSent writes the delivery's first record,
// and Forget before it writes nothing. That is two synced commits per delivery instead of
// three; records "sending" written by earlier versions still read as deliverable.
//
// The origin writes a one-way request to the server whole except its last byte, then
// records "sent", then writes the last byte. A server does not run a request whose body
// it has not got whole (it cannot even parse the envelope), so an id still "sending"
// after a crash was provably not run and is delivered again, while one "sent" whose
// answer never came is in doubt: the server may or may not have run it, and nothing but
// the server can tell. A message is in doubt although the server never got it only when
// the origin dies between the start of the "sent" record's sync and the last byte's
// write: about a millisecond per delivery.
//
// The origin refuses to deliver an in-doubt id again unless told to (proxy's
// RedeliverInDoubt), and the edge keeps the message as a dead letter for an operator.
//
// Layout: bucket "ids": message id → state (1 byte) | time (int64 unix ns) | status (uint16)
// | claimed (int64 unix ns), bucket "bytime": claimed (8 bytes) | id → empty, for pruning in
// age order. The time index holds when an id was claimed, not its last change, so that
// "sent" and "done", written on every delivery, change one key and not three. Records
// written before the claim time was stored (11 bytes) were indexed by their last change,
// which is what decode reads as their claim time.
package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/soapgw/soapgw/internal/groupcommit"
)

// State of a message id.
type State byte

const (
	Absent     State = 0
	Sending    State = 1 // claimed; the server has not got the whole request
	Done       State = 2
	InDoubt    State = 3 // "sent" on disk, no answer recorded, not in progress here
	InProgress State = 4 // returned by Begin: another delivery of this id is running now
	Sent       State = 5 // the request's last byte is going to the server
)

func (s State) String() string {
	switch s {
	case Absent:
		return "absent"
	case Sending:
		return "sending"
	case Done:
		return "done"
	case InDoubt:
		return "in_doubt"
	case InProgress:
		return "in_progress"
	case Sent:
		return "sent"
	}
	return fmt.Sprintf("state(%d)", byte(s))
}

// Record is what the ledger knows of an id.
type Record struct {
	State  State
	Time   time.Time // of the last change
	Status int       // the server's HTTP status, when Done
	// Claimed is when the current delivery wrote its first record (MarkSent; Begin for
	// one still running here, and for records of earlier versions): the record's place in
	// the time index, which orders pruning and the in-doubt list.
	Claimed time.Time
}

// ErrLocked is returned by Open when another process holds the file.
var ErrLocked = errors.New("ledger: file in use by another process")

var (
	bucketIDs    = []byte("ids")
	bucketByTime = []byte("bytime")
)

// Ledger is safe for concurrent use.
type Ledger struct {
	db        *bolt.DB
	commit    *groupcommit.Committer
	retention time.Duration

	mu sync.Mutex
	// inflight holds the ids being delivered in this process.
	inflight map[string]delivery

	stop chan struct{}
	wg   sync.WaitGroup
}

// Open opens (or creates) the ledger at path. Records older than retention are pruned
// every minute (retention <= 0: 7 days). Retention must cover the longest an edge may
// hold an acknowledged message before it learns it was delivered.
func Open(path string, retention time.Duration) (*Ledger, error) {
	if retention <= 0 {
		retention = 7 * 24 * time.Hour
	}
	// The free-page list is not written on each commit (it is rebuilt by a scan at
	// open, as etcd runs bbolt): a smaller commit for every acknowledgement.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open ledger %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketIDs); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketByTime)
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	l := &Ledger{db: db, commit: groupcommit.New(db), retention: retention, inflight: map[string]delivery{}, stop: make(chan struct{})}
	l.wg.Add(1)
	go l.pruneLoop()
	return l, nil
}

// Close stops pruning and closes the file.
func (l *Ledger) Close() error {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	l.commit.Close()
	return l.db.Close()
}

// Begin claims id for a delivery in this process (nothing is written: see the package
// comment). It returns Absent when the id is claimed and the caller must deliver and
// then call Done, Forget or Abandon; otherwise the state that stops the delivery: Done
// (delivered before), InProgress (a delivery of it is running), InDoubt (an earlier
// delivery's outcome is unknown). With redeliverInDoubt an in-doubt id is claimed like an
// absent one.
func (l *Ledger) Begin(id string, redeliverInDoubt bool) (Record, error) {
	l.mu.Lock()
	if _, ok := l.inflight[id]; ok {
		l.mu.Unlock()
		return Record{State: InProgress}, nil
	}
	l.inflight[id] = delivery{claimed: time.Now()}
	l.mu.Unlock()
	var rec Record
	err := l.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketIDs).Get([]byte(id))
		if v == nil {
			return nil
		}
		switch old := decode(v); old.State {
		case Sending: // written by an earlier version that never sent it whole: deliver again
		case Sent, InDoubt:
			rec = Record{State: InDoubt, Time: old.Time}
		default:
			rec = old
		}
		return nil
	})
	if err != nil || (rec.State != Absent && !(rec.State == InDoubt && redeliverInDoubt)) {
		l.release(id)
	}
	if err != nil {
		return Record{}, fmt.Errorf("ledger begin %s: %w", id, err)
	}
	if rec.State == InDoubt && redeliverInDoubt {
		rec.State = Absent
	}
	return rec, nil
}

// MarkSent records that the whole request is about to reach the server (its last byte
// is written next): from here an answer that does not come leaves the id in doubt.
func (l *Ledger) MarkSent(id string) error {
	return l.set(id, Record{State: Sent, Time: time.Now()})
}

// Done records that the server took the message (answered with status) and ends the
// delivery.
func (l *Ledger) Done(id string, status int) error {
	defer l.release(id)
	return l.set(id, Record{State: Done, Time: time.Now(), Status: status})
}

// Forget records that the server provably did not take the message (never connected,
// refused it unread, answered 503) and ends the delivery: the id may be delivered again.
func (l *Ledger) Forget(id string) error {
	defer l.release(id)
	if !l.recorded(id) {
		// Nothing of this delivery is on disk. A record an earlier delivery left stays
		// (in doubt and redelivered: this attempt provably did not reach the server, the
		// earlier one is still in doubt), but for "sending" of an earlier version, which
		// goes as it did then.
		var old Record
		if err := l.db.View(func(tx *bolt.Tx) error {
			if v := tx.Bucket(bucketIDs).Get([]byte(id)); v != nil {
				old = decode(v)
			}
			return nil
		}); err != nil || old.State != Sending {
			return err
		}
	}
	err := l.commit.Do(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIDs)
		if v := b.Get([]byte(id)); v != nil {
			if err := tx.Bucket(bucketByTime).Delete(timeKey(decode(v).Claimed, id)); err != nil {
				return err
			}
		}
		return b.Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("ledger forget %s: %w", id, err)
	}
	return nil
}

// Abandon ends a delivery whose outcome is unknown (MarkSent was recorded, the answer did
// not come back): the id stays "sent" on disk, which reads as in doubt.
func (l *Ledger) Abandon(id string) { l.release(id) }

// Get returns what the ledger holds for id.
func (l *Ledger) Get(id string) (Record, error) {
	var rec Record
	err := l.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketIDs).Get([]byte(id)); v != nil {
			rec = decode(v)
		}
		return nil
	})
	l.mu.Lock()
	d, running := l.inflight[id]
	l.mu.Unlock()
	switch {
	case running && !d.recorded:
		rec = Record{State: Sending, Time: d.claimed, Claimed: d.claimed} // claimed here, not written yet
	case rec.State == Sent && !running:
		rec.State = InDoubt
	}
	return rec, err
}

// InDoubt calls fn for every id in doubt, oldest first.
func (l *Ledger) InDoubt(fn func(id string, rec Record) bool) error {
	return l.db.View(func(tx *bolt.Tx) error {
		ids := tx.Bucket(bucketIDs)
		c := tx.Bucket(bucketByTime).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			id := string(k[8:])
			v := ids.Get(k[8:])
			if v == nil {
				continue
			}
			rec := decode(v)
			if rec.State != Sent && rec.State != InDoubt {
				continue
			}
			l.mu.Lock()
			_, running := l.inflight[id]
			l.mu.Unlock()
			if running {
				continue
			}
			rec.State = InDoubt
			if !fn(id, rec) {
				return nil
			}
		}
		return nil
	})
}

func (l *Ledger) release(id string) {
	l.mu.Lock()
	delete(l.inflight, id)
	l.mu.Unlock()
}

// delivery is an id being delivered in this process: since when it is claimed, and
// whether the delivery has written its first record (MarkSent, or Done without it).
type delivery struct {
	claimed  time.Time
	recorded bool
}

// recorded reports whether the delivery of id running here has written its record.
func (l *Ledger) recorded(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight[id].recorded
}

// set records a state of an id being delivered. The delivery's first record is indexed
// as claimed now, replacing whatever an earlier delivery left (in doubt and redelivered,
// or "sending" from an earlier version); later ones keep that place in the time index.
func (l *Ledger) set(id string, rec Record) error {
	recorded := l.recorded(id)
	err := l.commit.Do(func(tx *bolt.Tx) error {
		ids := tx.Bucket(bucketIDs)
		var old Record
		if v := ids.Get([]byte(id)); v != nil {
			old = decode(v)
		}
		if recorded && old.State != Absent {
			rec.Claimed = old.Claimed
			return ids.Put([]byte(id), encode(rec))
		}
		rec.Claimed = rec.Time
		return l.claim(tx, id, rec, old)
	})
	if err != nil {
		return fmt.Errorf("ledger %s %s: %w", rec.State, id, err)
	}
	l.mu.Lock()
	if d, ok := l.inflight[id]; ok {
		d.recorded = true
		l.inflight[id] = d
	}
	l.mu.Unlock()
	return nil
}

// claim writes rec, claimed at rec.Claimed, moving id's key in the time index from where
// old had it.
func (l *Ledger) claim(tx *bolt.Tx, id string, rec, old Record) error {
	bt := tx.Bucket(bucketByTime)
	if old.State != Absent {
		if err := bt.Delete(timeKey(old.Claimed, id)); err != nil {
			return err
		}
	}
	if err := bt.Put(timeKey(rec.Claimed, id), nil); err != nil {
		return err
	}
	return tx.Bucket(bucketIDs).Put([]byte(id), encode(rec))
}

// Prune deletes the records last changed before cutoff (but never one in progress) and
// returns how many.
func (l *Ledger) Prune(cutoff time.Time) (int, error) {
	n := 0
	err := l.commit.Do(func(tx *bolt.Tx) error {
		n = 0
		ids, bt := tx.Bucket(bucketIDs), tx.Bucket(bucketByTime)
		c := bt.Cursor()
		end := binary.BigEndian.AppendUint64(nil, uint64(cutoff.UnixNano()))
		// Collected first: deleting under a bbolt cursor makes it skip keys.
		var old [][]byte
		for k, _ := c.First(); k != nil && string(k[:8]) < string(end) && len(old) < maxPrunePerTx; k, _ = c.Next() {
			l.mu.Lock()
			_, running := l.inflight[string(k[8:])]
			l.mu.Unlock()
			if !running {
				old = append(old, append([]byte(nil), k...))
			}
		}
		for _, k := range old {
			if err := bt.Delete(k); err != nil {
				return err
			}
			if err := ids.Delete(k[8:]); err != nil {
				return err
			}
		}
		n = len(old)
		return nil
	})
	return n, err
}

// maxPrunePerTx bounds one pruning transaction, so it never holds the writer long.
const maxPrunePerTx = 10_000

func (l *Ledger) pruneLoop() {
	defer l.wg.Done()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			for {
				n, err := l.Prune(time.Now().Add(-l.retention))
				if err != nil || n < maxPrunePerTx {
					break
				}
			}
		}
	}
}

// Stats counts the records by state as stored (Sent counts in-progress and in-doubt ids).
func (l *Ledger) Stats() (map[State]int, error) {
	counts := map[State]int{}
	err := l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIDs).ForEach(func(_, v []byte) error {
			counts[decode(v).State]++
			return nil
		})
	})
	return counts, err
}

func timeKey(t time.Time, id string) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(id)), uint64(t.UnixNano()))
	return append(k, id...)
}

// recordLen is the length encode writes; records of the earlier layout are legacyLen.
const (
	recordLen = 19
	legacyLen = 11
)

func encode(r Record) []byte {
	b := make([]byte, 0, recordLen)
	b = append(b, byte(r.State))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Time.UnixNano()))
	b = binary.BigEndian.AppendUint16(b, uint16(r.Status))
	return binary.BigEndian.AppendUint64(b, uint64(r.Claimed.UnixNano()))
}

// decode reads a record. One it cannot read, or whose state is not one that is stored
// (Sending, Sent, Done), is in doubt: never deliver it again on a guess.
//
// A record of the earlier layout (no claim time) was indexed by its last change: that
// is its claim time here.
func decode(v []byte) Record {
	if len(v) < legacyLen {
		return Record{State: InDoubt}
	}
	rec := Record{State: State(v[0]), Time: time.Unix(0, int64(binary.BigEndian.Uint64(v[1:9]))), Status: int(binary.BigEndian.Uint16(v[9:11]))}
	rec.Claimed = rec.Time
	if len(v) >= recordLen {
		rec.Claimed = time.Unix(0, int64(binary.BigEndian.Uint64(v[11:19])))
	}
	switch rec.State {
	case Sending, Sent, Done:
	default:
		rec.State = InDoubt
	}
	return rec
}
