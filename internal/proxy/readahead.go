package proxy

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// readAhead is the tunnel stream as the origin writes a response into it. The first
// aheadAfter bytes go straight through, as long as the tunnel takes them as fast as the
// upstream sends them. Past those (a write into a full stream window waits as long as the
// link takes to drain it, so the switch must come before the window is full), or once a
// write has waited longer than slowWrite, the rest of the response is queued in memory, up to
// aheadPerExchange and the origin's aheadBudget across exchanges, and a goroutine feeds
// the queue to the tunnel: the origin reads the upstream's response as fast as the
// upstream sends it, as nginx's proxy buffering does.
//
// Without it the origin read the upstream only as fast as the link drained, and a server
// that finished writing a large response and closed its idle keep-alive connection (Go's
// IdleTimeout, Tomcat's keepAliveTimeout) left the rest in an orphaned socket whose
// window stayed closed for minutes; the kernel reset it, and the response was lost (2 MB
// x 16 over GPRS: 2 of 16 calls after 50 minutes). It also frees the server's thread.
//
// Writes and flushes come from one goroutine at a time (sendResponse's, or its idle
// flusher's between arm and disarm). finish ends the queue and returns the first error.
type readAhead struct {
	Stream
	tokens chan struct{}    // the origin's budget, one token per queued chunk; nil: never queue
	clock  *progressClock   // held while a write waits for room (not a stall of this exchange)
	gauge  prometheus.Gauge // soapgw_origin_readahead_bytes; nil: none

	queued atomic.Bool
	direct int     // bytes written straight through
	fill   *[]byte // the chunk being filled (writer's side); queued when full, or at once when the feeder is idle
	fillN  int
	items  chan aheadItem
	done   chan struct{} // closed when the feeder has ended
	mu     sync.Mutex
	err    error // the first failure of the stream, or of the feeder
}

type aheadItem struct {
	b     *[]byte // from copyBufPool; nil for a flush
	n     int
	flush bool
}

const (
	// slowWrite is how long a write may wait for the tunnel before the response is
	// queued: far above a write on any link that keeps up with the upstream.
	slowWrite = 20 * time.Millisecond
	// aheadAfter is how much of a response goes straight to the tunnel before the rest is
	// queued: SOAP responses are mostly smaller and never pay for the queue's goroutine;
	// it is well below a stream's window (256 KiB over TCP, 1 MiB over UDP by default).
	aheadAfter = 128 << 10
	// aheadChunk is the size of a queued chunk (copyBufPool's buffers).
	aheadChunk = 32 << 10
	// aheadPerExchange bounds one response's queue: 8 MiB.
	aheadPerExchange = 256
	// aheadBudget bounds the queued bytes of all responses at the origin: 64 MiB. A
	// response that finds it used up waits for room, as it waited for the tunnel before.
	aheadBudget = 64 << 20
)

func newReadAheadTokens() chan struct{} { return make(chan struct{}, aheadBudget/aheadChunk) }

func (r *readAhead) Write(p []byte) (int, error) {
	if !r.queued.Load() {
		start := time.Now()
		n, err := r.Stream.Write(p)
		r.direct += n
		if err == nil && r.tokens != nil && (r.direct >= aheadAfter || time.Since(start) > slowWrite) {
			r.startQueue()
		}
		return n, err
	}
	if err := r.failure(); err != nil {
		return 0, err
	}
	// Chunks are filled whole: an upstream read returns a TCP segment or less, and a
	// chunk per read would spend the budget on mostly empty buffers.
	for off := 0; off < len(p); {
		if r.fill == nil {
			r.fill, r.fillN = copyBufPool.Get().(*[]byte), 0
		}
		k := copy((*r.fill)[r.fillN:], p[off:])
		r.fillN += k
		off += k
		if r.fillN == len(*r.fill) && !r.push() {
			return off, r.failure()
		}
	}
	if r.fill != nil && len(r.items) == 0 && !r.push() { // the feeder waits: hand it what there is
		return len(p), r.failure()
	}
	return len(p), nil
}

// push queues the chunk being filled; false if the feeder ended first.
func (r *readAhead) push() bool {
	b, n := r.fill, r.fillN
	r.fill, r.fillN = nil, 0
	if r.enqueue(aheadItem{b: b, n: n}) {
		return true
	}
	copyBufPool.Put(b)
	return false
}

func (r *readAhead) Flush() error {
	if !r.queued.Load() {
		return r.Stream.Flush()
	}
	if err := r.failure(); err != nil {
		return err
	}
	if r.fill != nil && !r.push() {
		return r.failure()
	}
	r.enqueue(aheadItem{flush: true})
	return nil
}

// enqueue queues it, waiting for a token (a chunk) and for room in the queue; false if
// the feeder ended first (the stream failed).
func (r *readAhead) enqueue(it aheadItem) bool {
	r.clock.enter()
	defer r.clock.leave()
	if !it.flush {
		select {
		case r.tokens <- struct{}{}:
			r.count(aheadChunk)
		case <-r.done:
			return false
		}
	}
	select {
	case r.items <- it:
		return true
	case <-r.done:
		if !it.flush {
			<-r.tokens
			r.count(-aheadChunk)
		}
		return false
	}
}

func (r *readAhead) count(n float64) {
	if r.gauge != nil {
		r.gauge.Add(n)
	}
}

func (r *readAhead) startQueue() {
	r.items = make(chan aheadItem, aheadPerExchange)
	r.done = make(chan struct{})
	r.queued.Store(true)
	go r.feed()
}

// feed writes the queued chunks to the stream in order. After a failure it drops the
// rest, giving their tokens back.
func (r *readAhead) feed() {
	defer close(r.done)
	var err error
	for it := range r.items {
		if err == nil {
			if it.flush {
				err = r.Stream.Flush()
			} else {
				_, err = r.Stream.Write((*it.b)[:it.n])
			}
			if err != nil {
				r.mu.Lock()
				r.err = err
				r.mu.Unlock()
			}
		}
		if !it.flush {
			copyBufPool.Put(it.b)
			<-r.tokens
			r.count(-aheadChunk)
		}
	}
}

func (r *readAhead) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// finish waits until the queue has gone to the stream and returns the first error.
func (r *readAhead) finish() error {
	if !r.queued.Load() {
		return nil
	}
	if r.fill != nil {
		r.push()
	}
	close(r.items)
	r.clock.enter() // the tunnel takes the rest at its pace
	<-r.done
	r.clock.leave()
	return r.failure()
}
