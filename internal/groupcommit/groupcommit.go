// Package groupcommit runs small bbolt updates from many goroutines in shared write
// transactions: every update that queued while the previous transaction was syncing goes
// into the next one, so N concurrent callers pay for about one commit (two fsyncs) instead
// of N, and a lone caller pays for one commit and no wait. bbolt's own DB.Batch instead
// waits for a timer (MaxBatchDelay, 10 ms by default) before it commits, which would be the
// whole latency of a one-way acknowledgement.
package groupcommit

import (
	"errors"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// maxGroup bounds the updates of one transaction.
const maxGroup = 512

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("groupcommit: closed")

// Committer is safe for concurrent use.
type Committer struct {
	db    *bolt.DB
	queue chan *call
	done  chan struct{} // closed by Close
	wg    sync.WaitGroup

	// mu orders Do's send against Close: Do sends only while closed is false, under the
	// read lock, so once Close has set it no update can enter the queue behind the
	// loop's last look at it.
	mu     sync.RWMutex
	closed bool
}

type call struct {
	fn  func(*bolt.Tx) error
	err chan error
}

// New starts a committer on db. Close stops it before db is closed.
func New(db *bolt.DB) *Committer {
	c := &Committer{db: db, queue: make(chan *call, maxGroup), done: make(chan struct{})}
	c.wg.Add(1)
	go c.loop()
	return c
}

// Do runs fn in a write transaction and returns once it is committed and synced. An
// error from fn discards fn's changes only (it runs in its own sub-step: a transaction
// that others share is retried without it) and is returned.
func (c *Committer) Do(fn func(*bolt.Tx) error) error {
	cl := &call{fn: fn, err: make(chan error, 1)}
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return ErrClosed
	}
	// The loop is running (Close waits for this read lock before it stops it), so a full
	// queue drains.
	c.queue <- cl
	c.mu.RUnlock()
	return <-cl.err
}

// Close stops the committer after the updates already queued (they are committed and
// answered); Do fails with ErrClosed from then on. It returns once the loop has ended.
func (c *Committer) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	c.mu.Unlock()
	c.wg.Wait()
}

func (c *Committer) loop() {
	defer c.wg.Done()
	group := make([]*call, 0, maxGroup)
	for {
		var first *call
		select {
		case first = <-c.queue:
		case <-c.done:
			// Closed: nothing enters the queue any more (see Do). Commit what is in it,
			// then stop.
			select {
			case first = <-c.queue:
			default:
				return
			}
		}
		group = append(group[:0], first)
	more:
		for len(group) < maxGroup {
			select {
			case cl := <-c.queue:
				group = append(group, cl)
			default:
				break more
			}
		}
		c.commit(group)
	}
}

// commit runs a group in one transaction. A function that fails is answered with its
// error and the transaction is run again without it, so its partial writes never land.
func (c *Committer) commit(group []*call) {
	for len(group) > 0 {
		failed := -1
		var ferr error
		err := c.db.Update(func(tx *bolt.Tx) error {
			for i, cl := range group {
				if err := cl.fn(tx); err != nil {
					failed, ferr = i, err
					return err
				}
			}
			return nil
		})
		if failed >= 0 {
			group[failed].err <- ferr
			group = append(group[:failed], group[failed+1:]...)
			continue
		}
		for _, cl := range group {
			cl.err <- err
		}
		return
	}
}
