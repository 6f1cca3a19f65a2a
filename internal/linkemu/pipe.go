package linkemu

import (
	"container/heap"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

const (
	// mtu is the MTU of both TUN devices.
	mtu = 1500
	// bufSize is the packet buffer size; anything above mtu is headroom.
	bufSize = 2048
	// maxQueued bounds the packets held per direction (memory: maxQueued *
	// bufSize), whatever the profile; beyond it packets are tail-dropped.
	maxQueued = 16384
)

// packet is one IP packet in flight. Packets are pooled: a packet read from
// a TUN device is either written on at once, queued, or returned to the pool.
type packet struct {
	due int64  // delivery time, ns on the Link's monotonic clock
	seq uint64 // admission order; breaks ties between equal due times
	n   int
	buf [bufSize]byte
}

var packetPool = sync.Pool{New: func() any { return new(packet) }}

func getPacket() *packet  { return packetPool.Get().(*packet) }
func putPacket(p *packet) { packetPool.Put(p) }

// pktHeap is a min-heap of packets by (due, seq), for container/heap.
type pktHeap []*packet

func (h pktHeap) Len() int { return len(h) }
func (h pktHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].seq < h[j].seq
}
func (h pktHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pktHeap) Push(x any)   { *h = append(*h, x.(*packet)) }
func (h *pktHeap) Pop() any {
	old := *h
	n := len(old)
	p := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return p
}

// shapeParams is a Shape converted to nanoseconds, ready for the hot path.
type shapeParams struct {
	delay, jitter      int64
	loss, dup, reorder float64
	rate               int64 // bit/s, 0 = unlimited
	queueNs            int64 // QueueBytes expressed as time at rate
}

func newShapeParams(s Shape) *shapeParams {
	clamp := func(f float64) float64 {
		if !(f > 0) { // also NaN
			return 0
		}
		return min(f, 1)
	}
	sp := &shapeParams{
		delay:   max(int64(s.Delay), 0),
		jitter:  max(int64(s.Jitter), 0),
		loss:    clamp(s.Loss),
		dup:     clamp(s.Duplicate),
		reorder: clamp(s.Reorder),
		rate:    max(s.RateBps, 0),
	}
	if sp.rate > 0 {
		q := int64(s.QueueBytes)
		if q <= 0 {
			q = DefaultQueueBytes
		}
		sp.queueNs = txTime(q, sp.rate)
	}
	return sp
}

// txTime is the serialization time of n bytes at rate bit/s, in ns.
func txTime(n, rate int64) int64 {
	// n*8e9 overflows int64 only above ~1 GB, far beyond any queue.
	return n * 8e9 / rate
}

// pipe shapes one direction. admit, deliver and next are called by one
// goroutine only (the direction's forwarder loop, or a test); the shape and
// the counters may be touched from anywhere.
type pipe struct {
	params atomic.Pointer[shapeParams]
	st     counters
	out    func([]byte) // writes a packet to the far side

	rng      *rand.Rand
	q        pktHeap
	seq      uint64
	linkFree int64 // when the bottleneck has serialized everything admitted
	lastDue  int64 // due time of the latest in-order packet (FIFO floor)

	// Scheduling accuracy of queued packets (delivery time - due time), for
	// tests and diagnostics.
	lateN, lateSum, lateMax atomic.Int64
}

func newPipe(s Shape, seed, stream uint64, out func([]byte)) *pipe {
	p := &pipe{
		out: out,
		rng: rand.New(rand.NewPCG(seed, stream)),
		q:   make(pktHeap, 0, 256),
	}
	p.params.Store(newShapeParams(s))
	return p
}

func (p *pipe) setShape(s Shape) { p.params.Store(newShapeParams(s)) }

// admit takes ownership of pk, which arrived at now, and drops, delivers or
// queues it. Random draws happen in a fixed order (loss, jitter, reorder,
// duplicate), each only if its probability is non-zero, so that a seed and
// a packet sequence give the same decisions on every run.
func (p *pipe) admit(pk *packet, now int64) {
	b := pk.buf[:pk.n]
	p.st.count(b)
	sp := p.params.Load()

	if len(p.q) >= maxQueued {
		p.st.queueDrop(len(b))
		putPacket(pk)
		return
	}

	// Bottleneck: the packet starts serializing when the link is free and
	// occupies it for txTime. The queue is not stored: its backlog is the
	// time until linkFree, so tail drop is a comparison of times.
	txEnd, tx := now, int64(0)
	if sp.rate > 0 {
		tx = txTime(int64(len(b)), sp.rate)
		start := max(now, p.linkFree)
		if start-now+tx > sp.queueNs && start > now {
			// Never drop into an idle link, even if one packet alone is
			// longer than the queue (tiny queue, huge packet).
			p.st.queueDrop(len(b))
			putPacket(pk)
			return
		}
		txEnd = start + tx
		p.linkFree = txEnd
	}

	if sp.loss > 0 && p.rng.Float64() < sp.loss {
		p.st.dropped.Add(1)
		putPacket(pk)
		return
	}

	due := txEnd + sp.delay
	if sp.jitter > 0 {
		due += p.rng.Int64N(2*sp.jitter+1) - sp.jitter
		due = max(due, txEnd)
	}
	if sp.reorder > 0 && p.rng.Float64() < sp.reorder {
		// Skip the queue and the propagation delay; do not raise the FIFO
		// floor, so the packets behind keep their times.
		due = now + tx
		if len(p.q) > 0 && p.lastDue > due {
			p.st.reordered.Add(1)
		}
	} else {
		// Jitter must not reorder: never earlier than the packet before.
		due = max(due, p.lastDue)
		p.lastDue = due
	}
	dup := sp.dup > 0 && p.rng.Float64() < sp.dup

	if due <= now && len(p.q) == 0 {
		// Fast path (zero-delay profiles): nothing queued, nothing to wait
		// for, so write at once without touching the heap.
		p.out(b)
		if dup {
			p.st.duplicated.Add(1)
			p.out(b)
		}
		putPacket(pk)
		return
	}
	p.push(pk, due)
	if dup && len(p.q) < maxQueued {
		cp := getPacket()
		cp.n = copy(cp.buf[:], b)
		p.push(cp, due)
		p.st.duplicated.Add(1)
	}
}

func (p *pipe) push(pk *packet, due int64) {
	pk.due = due
	pk.seq = p.seq
	p.seq++
	heap.Push(&p.q, pk)
}

// deliver writes every queued packet due by now+early, in order. early lets
// the caller compensate for its wake-up latency (see loop).
func (p *pipe) deliver(now, early int64) {
	for len(p.q) > 0 && p.q[0].due <= now+early {
		pk := heap.Pop(&p.q).(*packet)
		p.out(pk.buf[:pk.n])
		late := now - pk.due
		p.lateN.Add(1)
		p.lateSum.Add(late)
		if late > p.lateMax.Load() {
			p.lateMax.Store(late)
		}
		putPacket(pk)
	}
}

// next returns the due time of the earliest queued packet.
func (p *pipe) next() (int64, bool) {
	if len(p.q) == 0 {
		return 0, false
	}
	return p.q[0].due, true
}

// drain returns every queued packet to the pool.
func (p *pipe) drain() {
	for i, pk := range p.q {
		putPacket(pk)
		p.q[i] = nil
	}
	p.q = p.q[:0]
}
