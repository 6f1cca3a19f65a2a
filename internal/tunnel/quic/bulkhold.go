package quic

import (
	"sync"
	"time"
)

// Bulk messages share packets, as on the TCP tunnel (internal/tunnel/bulk.go): a spool
// that delivers over a slow link has up to a thousand small deliveries in flight, and each
// written to its stream the moment it was coded left in a QUIC packet of its own or
// nearly (about 52 bytes of IP, UDP, QUIC header and AEAD tag around a message of 20),
// because quic-go sends what a stream has as soon as its pacer lets it. So a bulk message
// (Stream.SetBulk: a delivery, or the origin's answer to one) on a connection that carries
// at least bulkHoldStreams exchanges joins a batch that is written bulkDelay after its
// first message, or at once when it reaches bulkHoldMax, all from one goroutine one after
// the other, so that quic-go finds them queued together and packs them into full packets.
// Other messages are never held. A bulk message waits at most bulkDelay more, and nobody
// waits on it (the spool acknowledged its client).
const (
	bulkDelay       = 5 * time.Millisecond
	bulkHoldStreams = 8
	bulkHoldMax     = 64
)

// bulkGate collects the bulk messages of one connection into batches.
type bulkGate struct {
	mu    sync.Mutex
	batch *bulkBatch // filling; nil: none
}

// bulkBatch is the messages written together.
type bulkBatch struct {
	writes []bulkWrite
	timer  *time.Timer   // writes the batch bulkDelay after its first message
	done   chan struct{} // closed once every write of the batch has returned
}

// bulkWrite is one message of a batch: its stream, its bytes (head and payload) and the
// outcome of writing and closing the stream.
type bulkWrite struct {
	qs  streamIO
	b   []byte
	err error
}

// holdsBulk reports whether a bulk message waits for others: the connection is busy.
func (c *conn) holdsBulk() bool { return c.streams.Load() >= bulkHoldStreams }

// write sends b on qs and closes qs's send side, with the bulk messages queued within
// bulkDelay of the first one of its batch, and returns the outcome.
func (g *bulkGate) write(qs streamIO, b []byte) error {
	g.mu.Lock()
	bt := g.batch
	if bt == nil {
		bt = &bulkBatch{done: make(chan struct{})}
		bt.timer = time.AfterFunc(bulkDelay, func() { g.flush(bt) })
		g.batch = bt
	}
	i := len(bt.writes)
	bt.writes = append(bt.writes, bulkWrite{qs: qs, b: b})
	full := len(bt.writes) >= bulkHoldMax
	g.mu.Unlock()
	if full {
		bt.timer.Stop()
		g.flush(bt)
	}
	<-bt.done
	return bt.writes[i].err
}

// flush writes a batch, once: the first of its timer and its filling up takes it.
func (g *bulkGate) flush(bt *bulkBatch) {
	g.mu.Lock()
	if g.batch != bt {
		g.mu.Unlock()
		return // already taken
	}
	g.batch = nil
	g.mu.Unlock()
	for i := range bt.writes {
		w := &bt.writes[i]
		if _, w.err = w.qs.Write(w.b); w.err == nil {
			w.err = w.qs.Close()
		}
	}
	close(bt.done)
}
