package netsim

import (
	"sync"
	"time"
)

type chunkKind uint8

const (
	kindData  chunkKind = iota
	kindEOF             // the sender half-closed: deliver as CloseWrite
	kindReset           // the sender's read failed: abort the pair
)

// chunk is one read's worth of bytes (or an end marker) and the time it is
// due at the far side of the link.
type chunk struct {
	due  time.Time
	data []byte
	kind chunkKind
}

// queue is a FIFO of chunks bounded by the bytes it holds. It has exactly
// one producer (a direction's reader) and one consumer (its writer), which
// is what makes the one-slot wake-up channels sufficient: a waiter always
// rechecks the state under the mutex after waking, and a signal sent while
// nobody waits is kept in the slot.
type queue struct {
	mu    sync.Mutex
	items []chunk
	bytes int
	limit int

	notEmpty chan struct{}
	notFull  chan struct{}
}

func newQueue(limit int) *queue {
	return &queue{
		limit:    limit,
		notEmpty: make(chan struct{}, 1),
		notFull:  make(chan struct{}, 1),
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// push appends c, waiting while the queue is over its byte limit. An empty
// queue accepts any chunk, so a chunk larger than the limit cannot block
// forever. It returns false if done was closed first.
func (q *queue) push(c chunk, done <-chan struct{}) bool {
	for {
		q.mu.Lock()
		if q.bytes == 0 || q.bytes+len(c.data) <= q.limit {
			q.items = append(q.items, c)
			q.bytes += len(c.data)
			q.mu.Unlock()
			wake(q.notEmpty)
			return true
		}
		q.mu.Unlock()
		select {
		case <-q.notFull:
		case <-done:
			return false
		}
	}
}

// pop removes the head chunk, waiting while the queue is empty. It returns
// false if done was closed first.
func (q *queue) pop(done <-chan struct{}) (chunk, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			c := q.items[0]
			q.items[0] = chunk{} // let the GC have the bytes
			q.items = q.items[1:]
			q.bytes -= len(c.data)
			q.mu.Unlock()
			wake(q.notFull)
			return c, true
		}
		q.mu.Unlock()
		select {
		case <-q.notEmpty:
		case <-done:
			return chunk{}, false
		}
	}
}
