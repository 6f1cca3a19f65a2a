// Package spool is the edge's durable store of one-way SOAP messages: a message the edge
// has acknowledged to its client (202 Accepted) lives here, synced to disk, until the
// origin reports it delivered to the server (or refused by it: then it moves to the dead
// letters, for an operator to look at). It is a bbolt database (one file, crash-safe
// copy-on-write B+tree, fsync on every commit), not a file format of our own.
//
// Layout (see docs/operations.md, "One-way messages"):
//
//	bucket "meta":    "id" → the spool's random id (hex), chosen when the file is created
//	                  "dead" → how many dead letters there are (uint64, big-endian)
//	bucket "pending": seq (8 bytes, big-endian) → record
//	bucket "dead":    seq → record, then uvarint len + reason, then the server's answer
//
//	record := version=1 | accepted (int64 unix nanoseconds, big-endian)
//	          | uvarint len + peer | uvarint len + upstream | message (the rest)
//
// seq comes from the bucket's sequence, so the keys are in acceptance order, and the
// message id (MessageID) that travels with a delivery is the spool id and seq: unique
// across edges and restarts, the key of the origin's ledger of delivered messages.
package spool

import (
	"container/heap"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/groupcommit"
)

// ErrFull is returned by Put when the message would take the spool over its limits.
var ErrFull = errors.New("spool: full")

// ErrNotFound is returned for a seq the spool does not hold.
var ErrNotFound = errors.New("spool: no such message")

// ErrLocked is returned by Open when another process (a running edge) holds the file.
var ErrLocked = errors.New("spool: file in use by another process")

var (
	bucketMeta    = []byte("meta")
	bucketPending = []byte("pending")
	bucketDead    = []byte("dead")
	keySpoolID    = []byte("id")
	keyDeadCount  = []byte("dead")
)

const recordVersion = 1

// Limits bound the pending messages (dead letters have their own count limit).
type Limits struct {
	MaxBytes    int64 // message bytes pending, all together (default 256 MiB)
	MaxMessages int   // messages pending (default 100,000)
	MaxDead     int   // dead letters kept; the oldest go first (default 10,000)
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = 256 << 20
	}
	if l.MaxMessages <= 0 {
		l.MaxMessages = 100_000
	}
	if l.MaxDead <= 0 {
		l.MaxDead = 10_000
	}
	return l
}

// Message is one spooled one-way message.
type Message struct {
	Seq      uint64
	ID       string // MessageID(spool id, Seq)
	Peer     string // the edge's peer that delivers it
	Upstream string // the origin's upstream name
	Accepted time.Time
	Data     []byte // the tunnel request message: envelope head (exchange id = ID) and body
}

// Dead is a message the server refused (or whose delivery is in doubt), kept for an
// operator.
type Dead struct {
	Message
	Reason string
	Answer []byte // the server's response message as the origin relayed it, if any
}

// Stats describe the pending messages.
type Stats struct {
	Messages int
	Bytes    int64
	Oldest   time.Time // zero when empty
	Dead     int
}

// Spool is safe for concurrent use.
type Spool struct {
	db     *bolt.DB
	commit *groupcommit.Committer
	id     string
	lim    Limits

	mu       sync.Mutex
	messages int
	bytes    int64
	dead     int
	oldest   map[uint64]time.Time // accepted time of pending messages, for Stats.Oldest
	byAge    ageHeap              // the same, oldest first; entries no longer in oldest are skipped
	// gone holds the seqs that Delete or Kill took out of the pending messages before
	// the Put or Requeue that committed them had counted them (a forwarder can read a
	// message as soon as it is committed): that Put or Requeue must not add them to oldest.
	gone  map[uint64]struct{}
	ready chan struct{}
}

// Open opens (or creates) the spool file at path. It fails with ErrLocked after a second
// if another process has the file open.
func Open(path string, lim Limits) (*Spool, error) {
	// The free-page list is not written on each commit (it is rebuilt by a scan at
	// open, as etcd runs bbolt): a smaller commit for every acknowledgement.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open spool %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("open spool %s: %w", path, err)
	}
	s := &Spool{db: db, lim: lim.withDefaults(), oldest: map[uint64]time.Time{}, gone: map[uint64]struct{}{}, ready: make(chan struct{}, 1)}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketPending); err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketDead); err != nil {
			return err
		}
		if id := meta.Get(keySpoolID); id != nil {
			s.id = string(id)
			return nil
		}
		var b [8]byte
		_, _ = rand.Read(b[:])
		s.id = hex.EncodeToString(b[:])
		return meta.Put(keySpoolID, []byte(s.id))
	})
	var counted bool
	if err == nil {
		err = db.View(func(tx *bolt.Tx) error {
			s.dead = tx.Bucket(bucketDead).Stats().KeyN // committed pages: exact here
			n, ok := deadCount(tx.Bucket(bucketMeta))
			counted = ok && n == uint64(s.dead)
			return tx.Bucket(bucketPending).ForEach(func(k, v []byte) error {
				m, err := decode(k, v, s.id)
				if err != nil {
					return err
				}
				s.messages++
				s.bytes += int64(len(m.Data))
				s.added(m.Seq, m.Accepted)
				return nil
			})
		})
	}
	if err == nil && !counted {
		// A file without the count (or with a wrong one): count what is there.
		err = db.Update(func(tx *bolt.Tx) error {
			return setDeadCount(tx.Bucket(bucketMeta), uint64(s.dead))
		})
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open spool %s: %w", path, err)
	}
	s.commit = groupcommit.New(db)
	return s, nil
}

// Close closes the file.
func (s *Spool) Close() error {
	s.commit.Close()
	return s.db.Close()
}

// ID is the spool's random id, the first part of its message ids.
func (s *Spool) ID() string { return s.id }

// MessageID is the id a message of a spool travels with, as its exchange id:
// envelope.OneWayPrefix + spool id + "-" + seq.
func MessageID(spoolID string, seq uint64) string {
	return envelope.OneWayPrefix + spoolID + "-" + strconv.FormatUint(seq, 10)
}

// Ready is signalled (capacity one, never closed) when a message was put.
func (s *Spool) Ready() <-chan struct{} { return s.ready }

// Put stores a message and returns once it is synced to disk. build makes the message
// bytes for the id the message gets (the id is in its envelope head); it is called twice
// (once to size the message against the limits) and must not keep the slice it returns.
// Over the limits Put returns ErrFull and stores nothing.
func (s *Spool) Put(peer, upstream string, build func(id string) []byte) (Message, error) {
	m := Message{Peer: peer, Upstream: upstream, Accepted: time.Now()}
	// Reserve the room first, under the lock, with the longest id the message can get,
	// so concurrent Puts cannot all pass the check.
	reserved := int64(len(build(MessageID(s.id, math.MaxUint64))))
	s.mu.Lock()
	if s.messages+1 > s.lim.MaxMessages || s.bytes+reserved > s.lim.MaxBytes {
		s.mu.Unlock()
		return Message{}, ErrFull
	}
	s.messages++
	s.bytes += reserved
	s.mu.Unlock()
	err := s.commit.Do(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPending)
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		m.Seq, m.ID = seq, MessageID(s.id, seq)
		m.Data = build(m.ID)
		return b.Put(seqKey(seq), encode(nil, m))
	})
	if err == nil && testHookCommitted != nil {
		testHookCommitted(m)
	}
	s.mu.Lock()
	if err != nil {
		s.messages--
		s.bytes -= reserved
	} else {
		s.bytes += int64(len(m.Data)) - reserved
		s.added(m.Seq, m.Accepted)
	}
	s.mu.Unlock()
	if err != nil {
		return Message{}, fmt.Errorf("spool put: %w", err)
	}
	select {
	case s.ready <- struct{}{}:
	default:
	}
	return m, nil
}

// testHookCommitted, when set by a test, runs in Put and Requeue between the commit and
// the counting: where a forwarder may deliver the message first.
var testHookCommitted func(Message)

// added records (under mu) the accepted time of a message Put or Requeue committed, once
// it is counted in messages and bytes.
func (s *Spool) added(seq uint64, accepted time.Time) {
	if _, ok := s.gone[seq]; ok {
		delete(s.gone, seq) // already delivered: see removed
		return
	}
	s.oldest[seq] = accepted
	heap.Push(&s.byAge, ageEntry{accepted, seq})
}

// removed uncounts (under mu) a message Delete or Kill took out of the pending messages.
// The Put or Requeue that committed it may not have done its counting yet (Put counts
// the message before its commit, Requeue after: its counters are one short meanwhile,
// which adds up once it has), and either records the accepted time only after its
// commit, so removed leaves a note for added.
func (s *Spool) removed(seq uint64, size int64) {
	s.messages--
	s.bytes -= size
	if _, ok := s.oldest[seq]; ok {
		delete(s.oldest, seq)
	} else {
		s.gone[seq] = struct{}{}
	}
}

// Pending calls fn for the pending messages with seq > after, in order, until fn returns
// false. A message's Data is valid only until fn returns (Get returns a copy).
func (s *Spool) Pending(after uint64, fn func(Message) bool) error {
	if after == math.MaxUint64 {
		return nil // after+1 would wrap to the first message
	}
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketPending).Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil; k, v = c.Next() {
			m, err := decode(k, v, s.id)
			if err != nil {
				return err
			}
			if !fn(m) {
				return nil
			}
		}
		return nil
	})
}

// Get returns a pending message.
func (s *Spool) Get(seq uint64) (Message, error) {
	var m Message
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketPending).Get(seqKey(seq))
		if v == nil {
			return ErrNotFound
		}
		var err error
		m, err = decode(seqKey(seq), v, s.id)
		m.Data = append([]byte(nil), m.Data...)
		return err
	})
	return m, err
}

// pendingRecord returns seq's pending record (valid while the transaction is, until it
// changes the bucket) and the size of its message, or ErrNotFound.
func (s *Spool) pendingRecord(pending *bolt.Bucket, seq uint64) ([]byte, int64, error) {
	v := pending.Get(seqKey(seq))
	if v == nil {
		return nil, 0, ErrNotFound
	}
	m, err := decode(seqKey(seq), v, s.id)
	if err != nil {
		return nil, 0, err
	}
	return v, int64(len(m.Data)), nil
}

// deletePending deletes seq from the pending messages and returns its message's size.
func (s *Spool) deletePending(pending *bolt.Bucket, seq uint64) (int64, error) {
	_, size, err := s.pendingRecord(pending, seq)
	if err != nil {
		return 0, err
	}
	return size, pending.Delete(seqKey(seq))
}

// DeleteMany removes delivered messages in one commit (a forwarder settles many at once;
// a delete need not be synced alone: a message delivered again after a crash is answered
// already_delivered by the origin). Seqs no longer pending are skipped.
func (s *Spool) DeleteMany(seqs []uint64) error {
	sizes := make([]int64, len(seqs))
	err := s.commit.Do(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPending)
		for i, seq := range seqs {
			size, err := s.deletePending(b, seq)
			switch {
			case errors.Is(err, ErrNotFound):
				size = -1
			case err != nil:
				return err
			}
			sizes[i] = size
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("spool delete %d messages: %w", len(seqs), err)
	}
	s.mu.Lock()
	for i, seq := range seqs {
		if sizes[i] >= 0 {
			s.removed(seq, sizes[i])
		}
	}
	s.mu.Unlock()
	return nil
}

// Delete removes a delivered message.
func (s *Spool) Delete(seq uint64) error {
	var size int64
	err := s.commit.Do(func(tx *bolt.Tx) (err error) {
		size, err = s.deletePending(tx.Bucket(bucketPending), seq)
		return err
	})
	if err != nil {
		return fmt.Errorf("spool delete %d: %w", seq, err)
	}
	s.mu.Lock()
	s.removed(seq, size)
	s.mu.Unlock()
	return nil
}

// Kill moves a pending message to the dead letters with the reason and the server's
// answer (bounded by the caller), dropping the oldest dead letters beyond Limits.MaxDead.
func (s *Spool) Kill(seq uint64, reason string, answer []byte) error {
	var size int64
	var delta int // to the dead letters: 1 less those dropped
	err := s.commit.Do(func(tx *bolt.Tx) error {
		delta = 0
		meta, pending, db := tx.Bucket(bucketMeta), tx.Bucket(bucketPending), tx.Bucket(bucketDead)
		v, msgSize, err := s.pendingRecord(pending, seq)
		if err != nil {
			return err
		}
		size = msgSize
		rec := encodeDead(nil, v, reason, answer) // before the delete: v is the page's memory
		if err := pending.Delete(seqKey(seq)); err != nil {
			return err
		}
		if err := db.Put(seqKey(seq), rec); err != nil {
			return err
		}
		// The count is the transaction's own: the Kills, Purges and Requeues that share
		// it (group commit) are counted in it, not yet in s.dead.
		n, _ := deadCount(meta)
		dead := n + 1
		delta = 1
		c := db.Cursor()
		for k, _ := c.First(); k != nil && dead > uint64(s.lim.MaxDead); k, _ = c.First() {
			if err := db.Delete(k); err != nil {
				return err
			}
			dead--
			delta--
		}
		return setDeadCount(meta, dead)
	})
	if err != nil {
		return fmt.Errorf("spool kill %d: %w", seq, err)
	}
	s.mu.Lock()
	s.removed(seq, size)
	s.dead += delta
	s.mu.Unlock()
	return nil
}

// DeadLetters calls fn for the dead letters in order until it returns false.
func (s *Spool) DeadLetters(fn func(Dead) bool) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return forEach(tx.Bucket(bucketDead), func(k, v []byte) (bool, error) {
			d, err := decodeDead(k, v, s.id)
			if err != nil {
				return false, err
			}
			return fn(d), nil
		})
	})
}

// Requeue moves a dead letter back to the pending messages under a new seq, so it gets a
// new message id: the origin's ledger, which may hold the old id as delivered or in
// doubt, does not refuse it. Used by an operator who decided it must be sent again.
func (s *Spool) Requeue(seq uint64) (Message, error) {
	var m Message
	err := s.commit.Do(func(tx *bolt.Tx) error {
		meta, pending, db := tx.Bucket(bucketMeta), tx.Bucket(bucketPending), tx.Bucket(bucketDead)
		v := db.Get(seqKey(seq))
		if v == nil {
			return ErrNotFound
		}
		d, err := decodeDead(seqKey(seq), v, s.id)
		if err != nil {
			return err
		}
		newSeq, err := pending.NextSequence()
		if err != nil {
			return err
		}
		m = d.Message
		m.Seq, m.ID = newSeq, MessageID(s.id, newSeq)
		m.Data, err = RewriteID(m.Data, d.ID, m.ID)
		if err != nil {
			return err
		}
		if err := db.Delete(seqKey(seq)); err != nil {
			return err
		}
		if err := decrDeadCount(meta); err != nil {
			return err
		}
		return pending.Put(seqKey(newSeq), encode(nil, m))
	})
	if err != nil {
		return Message{}, fmt.Errorf("spool requeue %d: %w", seq, err)
	}
	if testHookCommitted != nil {
		testHookCommitted(m)
	}
	s.mu.Lock()
	s.messages++
	s.bytes += int64(len(m.Data))
	s.added(m.Seq, m.Accepted)
	s.dead--
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
	return m, nil
}

// Purge deletes a dead letter.
func (s *Spool) Purge(seq uint64) error {
	err := s.commit.Do(func(tx *bolt.Tx) error {
		db := tx.Bucket(bucketDead)
		if db.Get(seqKey(seq)) == nil {
			return ErrNotFound
		}
		if err := db.Delete(seqKey(seq)); err != nil {
			return err
		}
		return decrDeadCount(tx.Bucket(bucketMeta))
	})
	if err != nil {
		return fmt.Errorf("spool purge %d: %w", seq, err)
	}
	s.mu.Lock()
	s.dead--
	s.mu.Unlock()
	return nil
}

// deadCount reads the dead letters' count, false when the file has none.
func deadCount(meta *bolt.Bucket) (uint64, bool) {
	v := meta.Get(keyDeadCount)
	if len(v) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(v), true
}

func setDeadCount(meta *bolt.Bucket, n uint64) error {
	return meta.Put(keyDeadCount, binary.BigEndian.AppendUint64(nil, n))
}

func decrDeadCount(meta *bolt.Bucket) error {
	n, _ := deadCount(meta)
	if n > 0 {
		n--
	}
	return setDeadCount(meta, n)
}

func forEach(b *bolt.Bucket, fn func(k, v []byte) (bool, error)) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		more, err := fn(k, v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// encodeDead appends a dead letter: the pending record, the reason, the answer.
func encodeDead(b, record []byte, reason string, answer []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(record)))
	b = append(b, record...)
	b = binary.AppendUvarint(b, uint64(len(reason)))
	b = append(b, reason...)
	return append(b, answer...)
}

func decodeDead(k, v []byte, spoolID string) (Dead, error) {
	n, i := binary.Uvarint(v)
	if i <= 0 || n > uint64(len(v)-i) {
		return Dead{}, errCorrupt
	}
	m, err := decode(k, v[i:i+int(n)], spoolID)
	if err != nil {
		return Dead{}, err
	}
	m.Data = append([]byte(nil), m.Data...)
	reason, answer, ok := cutString(v[i+int(n):])
	if !ok {
		return Dead{}, errCorrupt
	}
	return Dead{Message: m, Reason: reason, Answer: append([]byte(nil), answer...)}, nil
}

// Stats returns the spool's counters.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Messages: s.messages, Bytes: s.bytes, Dead: s.dead}
	// The heap's head, once entries of messages that left are popped: amortized
	// O(log n), so a forwarder may ask after every delivery whatever the backlog.
	for s.byAge.Len() > 0 {
		e := s.byAge[0]
		if t, ok := s.oldest[e.seq]; ok && t.Equal(e.accepted) {
			st.Oldest = e.accepted
			break
		}
		heap.Pop(&s.byAge)
	}
	return st
}

// ageEntry is a pending message's accepted time, for the oldest-first heap.
type ageEntry struct {
	accepted time.Time
	seq      uint64
}

// ageHeap is a container/heap of ageEntry, oldest first.
type ageHeap []ageEntry

func (h ageHeap) Len() int { return len(h) }
func (h ageHeap) Less(i, j int) bool {
	if h[i].accepted.Equal(h[j].accepted) {
		return h[i].seq < h[j].seq
	}
	return h[i].accepted.Before(h[j].accepted)
}
func (h ageHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *ageHeap) Push(x any)   { *h = append(*h, x.(ageEntry)) }
func (h *ageHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func encode(b []byte, m Message) []byte {
	b = append(b, recordVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(m.Accepted.UnixNano()))
	b = binary.AppendUvarint(b, uint64(len(m.Peer)))
	b = append(b, m.Peer...)
	b = binary.AppendUvarint(b, uint64(len(m.Upstream)))
	b = append(b, m.Upstream...)
	return append(b, m.Data...)
}

var errCorrupt = errors.New("spool: unreadable record")

// decode parses a pending record; Data aliases v.
func decode(k, v []byte, spoolID string) (Message, error) {
	if len(k) != 8 || len(v) < 9 || v[0] != recordVersion {
		return Message{}, errCorrupt
	}
	m := Message{Seq: binary.BigEndian.Uint64(k)}
	m.ID = MessageID(spoolID, m.Seq)
	m.Accepted = time.Unix(0, int64(binary.BigEndian.Uint64(v[1:9])))
	rest := v[9:]
	var ok bool
	if m.Peer, rest, ok = cutString(rest); !ok {
		return Message{}, errCorrupt
	}
	if m.Upstream, rest, ok = cutString(rest); !ok {
		return Message{}, errCorrupt
	}
	m.Data = rest
	return m, nil
}

func cutString(b []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
}

// RewriteID returns a copy of a spooled tunnel request message whose envelope head
// carries the exchange id to instead of from.
func RewriteID(data []byte, from, to string) ([]byte, error) {
	head, body, err := envelope.Split(data)
	if err != nil {
		return nil, err
	}
	req, err := envelope.ParseRequest(head)
	if err != nil {
		return nil, err
	}
	if req.ExchangeID != from {
		return nil, fmt.Errorf("%w: message carries exchange id %q, not %q", errCorrupt, req.ExchangeID, from)
	}
	req.ExchangeID = to
	return append(req.Append(nil), body...), nil
}
