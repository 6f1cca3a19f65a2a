package proxy

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The origin's held responses: how an exchange survives the death of its tunnel
// connection.
//
// When a tunnel connection dies after the origin has an exchange's request, the upstream
// call goes on: the origin keeps a copy of the response message it writes (head
// included) and, once the stream is gone, writes to the copy alone. The edge reconnects,
// on any connection to the origin, and sends a resume head with the exchange id and how
// many bytes of the response it already has; the origin answers with the bytes from
// there (serveResume). So a cut costs the client a delay, not an answer, and the server
// runs the call once.
//
// Once the edge has a response whole it needs no copy: when its tunnel connection
// acknowledges decoding the response (coded messages are acknowledged, for the codec's
// sake; tunnel.Stream.AfterDelivered; over the UDP tunnel the edge also reports the
// responses it read whole that no acknowledgement covers, HAVE), the origin forgets it at
// once (delivered). So with a codec the copies held are those of the last round trip or
// so; over TCP, identity responses, which nothing acknowledges, are kept for the window
// below.
//
// The copy is bounded in time and size. A response is kept for window after its
// exchange ended (long enough for a dead connection to be noticed and replaced: the
// edge's keepalive takes up to 25 s), every response together within maxBytes (oldest
// finished first out), one response within maxEach. An exchange whose copy had to go is
// not resumable: if its connection dies, the edge tells its client the outcome is
// unknown. The copy costs one memory copy of each response while it is small enough.
//
// A resume for an exchange the origin does not hold leaves a tombstone for window: if
// the exchange's request arrives later still (it was in a connection that died slowly),
// it is refused rather than run after the edge has told its client the outcome was
// unknown. And an exchange id that is already held is never run twice: a second request
// with it is answered from the copy, like a resume from offset 0.
//
// The held copies live in one origin process. Origins behind one address (replicas of a
// Kubernetes Service) do not share them: an edge whose resume reaches another replica is
// told the exchange is not held there, and its client gets outcome_unknown. Run each
// origin replica behind its own address (one peer each at the edge) where that matters.
type heldStore struct {
	window   time.Duration
	maxBytes int64
	maxEach  int64
	now      func() time.Time
	m        *heldMetrics

	mu     sync.Mutex
	byID   map[string]*heldExchange
	oldest *heldExchange // the finished exchanges, a list by finish time: oldest first
	newest *heldExchange // out (expiry, eviction); a delivered one leaves from anywhere
	bytes  int64         // held bytes, entry overhead included
	tombs  map[string]time.Time
	tombQ  []tombstone // tombs by time, oldest first: expiry looks at the head only

	// goneHash remembers the exchanges the store held and forgot (expired, evicted,
	// lost), by a hash of their id, the last maxGone of them in the order they were
	// forgotten; horizon is when the newest one it had to drop for room was forgotten.
	// An exchange begun after horizon that is neither held nor gone never arrived
	// (neverArrived). A hash collision can only make an exchange look as if it had
	// arrived: the safe side. Only a resume asks, so it scans the hashes (goneLocked,
	// 512 KiB at most) rather than every exchange keeping an index up to date (a map of
	// 64 Ki hashes cost about 1 % of the origin's CPU).
	seed     maphash.Seed
	goneHash []uint64    // ring, oldest at goneAt
	goneTime []time.Time // when each was forgotten, beside goneHash
	goneAt   int
	horizon  time.Time
}

// maxGone bounds the gone records: 32 bytes each (hash and time), 2 MiB when full. At
// 100 exchanges a second they reach eleven minutes back.
const maxGone = 1 << 16

type tombstone struct {
	id string
	at time.Time
}

// heldOverhead is what one held exchange costs beyond its bytes (map entry, struct,
// channel), counted against maxBytes so that many tiny responses are bounded too. A
// running exchange counts it even when the budget is full (there are at most
// max_concurrent_exchanges of them): the budget can be passed by that much.
const heldOverhead = 256

// Defaults of the held-response bounds (origin.resume_window, origin.resume_max_bytes).
const (
	DefaultResumeWindow   = 30 * time.Second
	DefaultResumeMaxBytes = 64 << 20
)

func newHeldStore(window time.Duration, maxBytes int64, m *heldMetrics) *heldStore {
	if maxBytes <= 0 {
		maxBytes = DefaultResumeMaxBytes
	}
	return &heldStore{
		window: window, maxBytes: maxBytes, maxEach: maxBytes / 8, now: time.Now, m: m,
		byID: make(map[string]*heldExchange), tombs: make(map[string]time.Time),
		seed: maphash.MakeSeed(),
	}
}

// forgetLocked records that the store forgot the exchange id.
func (s *heldStore) forgetLocked(id string) {
	h, now := maphash.String(s.seed, id), s.now()
	if len(s.goneHash) < maxGone {
		s.goneHash = append(s.goneHash, h)
		s.goneTime = append(s.goneTime, now)
		return
	}
	s.horizon = s.goneTime[s.goneAt]
	s.goneHash[s.goneAt], s.goneTime[s.goneAt] = h, now
	s.goneAt = (s.goneAt + 1) % maxGone
}

// goneLocked reports whether an exchange whose id hashes to h is among the forgotten.
func (s *heldStore) goneLocked(h uint64) bool {
	return slices.Contains(s.goneHash, h)
}

// neverArrived answers a resume for an id the store does not hold, whose request was
// sent on a connection this process set up at since: when the store would remember it
// had it arrived (it forgot nothing it must drop for room since then) and does not, the
// request provably never reached this process. It then keeps the id as an exchange that
// did not run, for its window: a resume learns so, the edge sends the request again and
// it runs as new; should the first copy still arrive, it runs once all the same (begin).
// Otherwise the id is tombstoned, as lookup does.
func (s *heldStore) neverArrived(id string, since time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	_, tombed := s.tombs[id]
	if s.byID[id] != nil || tombed || !s.horizon.Before(since) || s.goneLocked(maphash.String(s.seed, id)) {
		if !tombed && s.byID[id] == nil {
			s.tombLocked(id)
		}
		return false
	}
	now := s.now()
	h := &heldExchange{s: s, id: id, accounted: heldOverhead,
		notRun: true, done: true, finishedAt: now}
	s.byID[id] = h
	s.bytes += heldOverhead
	s.pushLocked(h)
	s.m.entries.Inc()
	s.m.bytes.Set(float64(s.bytes))
	return true
}

// pushLocked appends h, just finished, to the list of finished exchanges.
func (s *heldStore) pushLocked(h *heldExchange) {
	h.prev, h.next = s.newest, nil
	if s.newest != nil {
		s.newest.next = h
	} else {
		s.oldest = h
	}
	s.newest = h
}

// unlinkLocked takes h out of the list of finished exchanges.
func (s *heldStore) unlinkLocked(h *heldExchange) {
	if h.prev == nil && s.oldest != h {
		return // not in the list
	}
	if h.prev != nil {
		h.prev.next = h.next
	} else {
		s.oldest = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	} else {
		s.newest = h.prev
	}
	h.prev, h.next = nil, nil
}

// heldExchange is one exchange's response as the origin wrote it.
type heldExchange struct {
	s  *heldStore
	id string

	// Guarded by s.mu, not mu.
	prev, next *heldExchange // in the store's list of finished exchanges
	touched    bool          // a resume or a second request with its id came: kept its whole window

	mu         sync.Mutex
	buf        []byte
	accounted  int64 // bytes counted in s.bytes for it
	prepaid    int64 // of accounted, reserved ahead of the writes (prepay) and not written yet
	lost       bool  // the copy was dropped: not resumable
	diverted   bool  // its response goes to the edge's other tunnel (Origin.divert)
	done       bool  // the response (or an error head) is complete
	notRun     bool  // ended without the upstream getting the whole request: not executed
	attached   Stream
	changed    chan struct{} // made by a resume that waits (nil: none waits), closed on the next change
	finishedAt time.Time
}

// errNotRun answers a resume for an exchange whose request never reached the server
// whole: its upstream call was not made, or was abandoned before the request's end.
var errNotRun = errors.New("soapgw: the request did not reach the origin whole; the server never got it")

// errResumeOffset answers a resume that claims more of the response than there is.
var errResumeOffset = errors.New("soapgw: resume offset beyond the held response")

// heldRefusal says how begin treated an exchange id.
type heldRefusal int

const (
	heldNew heldRefusal = iota
	heldDuplicate
	heldTombstoned
)

// begin registers a new exchange whose response st will carry. A duplicate id gets the
// held exchange back instead (heldDuplicate), a tombstoned one nothing (heldTombstoned).
func (s *heldStore) begin(id string, st Stream) (*heldExchange, heldRefusal) {
	var resent bool
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	if h := s.byID[id]; h != nil {
		h.mu.Lock()
		notRun := h.notRun
		h.mu.Unlock()
		if !notRun {
			h.touched = true
			return h, heldDuplicate
		}
		// The edge sends again a request that never reached the server whole (it was
		// told so by a resume): it runs now, as new. (The old entry leaves the finished
		// list on its own; dropLocked leaves the new one alone.)
		delete(s.byID, id)
		resent = true
	} else if _, ok := s.tombs[id]; ok {
		return nil, heldTombstoned
	}
	// A request sent again may have a first copy still on its way (in a connection that
	// dies slowly): that one is kept its whole window, so the copy finds it and does not run.
	h := &heldExchange{s: s, id: id, attached: st, accounted: heldOverhead, touched: resent}
	s.byID[id] = h
	s.bytes += heldOverhead
	s.m.entries.Inc()
	return h, heldNew
}

// lookup finds a held exchange for a resume. An unknown id is tombstoned.
func (s *heldStore) lookup(id string) *heldExchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	if h := s.byID[id]; h != nil {
		h.touched = true
		return h
	}
	if _, ok := s.tombs[id]; !ok {
		s.tombLocked(id)
	}
	return nil
}

func (s *heldStore) tombLocked(id string) {
	now := s.now()
	s.tombs[id] = now
	s.tombQ = append(s.tombQ, tombstone{id, now})
	s.m.tombstones.Set(float64(len(s.tombs)))
}

// expireLocked drops finished exchanges older than the window, and old tombstones.
func (s *heldStore) expireLocked() {
	cut := s.now().Add(-s.window)
	for s.oldest != nil {
		h := s.oldest
		h.mu.Lock()
		old := h.finishedAt.Before(cut)
		h.mu.Unlock()
		if !old {
			break
		}
		s.dropLocked(h, "expired")
	}
	// Tombstones in the order they were made: this runs for every exchange, so it looks
	// only at the oldest.
	n := 0
	for n < len(s.tombQ) && s.tombQ[n].at.Before(cut) {
		delete(s.tombs, s.tombQ[n].id)
		n++
	}
	if n > 0 {
		s.tombQ = append(s.tombQ[:0], s.tombQ[n:]...)
		s.m.tombstones.Set(float64(len(s.tombs)))
	}
}

// dropLocked forgets a finished exchange.
func (s *heldStore) dropLocked(h *heldExchange, why string) {
	s.unlinkLocked(h)
	if s.byID[h.id] == h {
		delete(s.byID, h.id)
		s.forgetLocked(h.id)
	}
	h.mu.Lock()
	s.bytes -= h.accounted
	h.accounted, h.buf, h.lost = 0, nil, true
	h.mu.Unlock()
	s.m.entries.Dec()
	s.m.dropped.WithLabelValues(why).Inc()
	s.m.bytes.Set(float64(s.bytes))
}

// reserve accounts n more bytes for h, evicting the oldest finished exchanges if the
// budget needs it. It reports false when the bytes do not fit (h is then lost).
func (s *heldStore) reserve(h *heldExchange, n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.bytes+n > s.maxBytes && s.oldest != nil {
		s.dropLocked(s.oldest, "evicted")
	}
	if s.bytes+n > s.maxBytes {
		return false
	}
	s.bytes += n
	s.m.bytes.Set(float64(s.bytes))
	return true
}

// release returns bytes to the budget (an exchange lost its copy while running).
func (s *heldStore) release(n int64) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	s.bytes -= n
	s.m.bytes.Set(float64(s.bytes))
	s.mu.Unlock()
}

// finish queues h for expiry; a lost h is forgotten at once.
func (s *heldStore) finish(h *heldExchange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.mu.Lock()
	lost := h.lost
	h.mu.Unlock()
	if lost {
		if s.byID[h.id] == h {
			delete(s.byID, h.id)
			s.forgetLocked(h.id)
			s.m.entries.Dec()
		}
		h.mu.Lock()
		s.bytes -= h.accounted
		h.accounted = 0
		h.mu.Unlock()
		s.m.bytes.Set(float64(s.bytes))
		return
	}
	s.pushLocked(h)
}

// delivered forgets h once the edge has its whole response: the tunnel acknowledged that
// the edge decoded it (tunnel.Stream.AfterDelivered). From then on no resume can ask for
// it (the edge has the bytes, even if the connection dies now) and no second copy of its
// request can come (the edge sent it once, on that connection) — unless a resume or a
// second request touched it already: such an exchange keeps its whole window. So with a
// codec on the tunnel the held responses are those of the last round trip or so, not
// resume_window's worth of traffic (at 800 exchanges/s: 24,000 responses, 20 MB).
func (h *heldExchange) delivered() {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.touched {
		s.forgetDeliveredLocked(h)
	}
}

// forgetDeliveredLocked forgets h, whose whole response the edge has (delivered,
// collected), if the store still holds it.
func (s *heldStore) forgetDeliveredLocked(h *heldExchange) {
	if s.byID[h.id] != h {
		return
	}
	delete(s.byID, h.id)
	s.forgetLocked(h.id)
	s.unlinkLocked(h)
	h.mu.Lock()
	s.bytes -= h.accounted
	// lost: a startWindow still to come (its AfterSent) finds nothing left to queue.
	h.accounted, h.buf, h.lost = 0, nil, true
	h.mu.Unlock()
	s.m.entries.Dec()
	s.m.delivered.Inc()
	s.m.bytes.Set(float64(s.bytes))
}

// record keeps a copy of p, the next bytes of h's response message. Over maxEach or the
// budget, h loses its copy for good.
func (h *heldExchange) record(p []byte) {
	h.mu.Lock()
	if h.lost {
		h.mu.Unlock()
		return
	}
	n := int64(len(p))
	if int64(len(h.buf))+n > h.s.maxEach {
		free := h.loseLocked("too_large")
		h.mu.Unlock()
		h.s.release(free)
		return
	}
	if h.prepaid >= n {
		h.prepaid -= n
		h.buf = append(h.buf, p...)
		h.wakeLocked()
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	ok := h.s.reserve(h, n) // without h.mu: the store's lock comes first
	h.mu.Lock()
	var free int64
	switch {
	case h.lost: // dropped meanwhile: give back what was reserved
		if ok {
			free = n
		}
	case !ok:
		free = h.loseLocked("budget")
	default:
		h.accounted += n
		h.buf = append(h.buf, p...)
		h.wakeLocked()
	}
	h.mu.Unlock()
	h.s.release(free)
}

// loseLocked drops h's copy: its exchange cannot be resumed any more. It returns the
// bytes to give back to the store, which the caller does once h.mu is released (the
// store's lock is always taken first).
func (h *heldExchange) loseLocked(why string) (free int64) {
	h.lost = true
	h.buf = nil
	h.prepaid = 0
	if n := h.accounted - heldOverhead; n > 0 {
		free = n
		h.accounted = heldOverhead
	}
	h.s.m.lost.WithLabelValues(why).Inc()
	h.wakeLocked()
	return free
}

// prepay reserves n bytes of the store's budget for h's copy ahead of its writes: a
// response the edge will collect from the copy alone (Origin.divert) must not lose it to
// the budget half-way. false: the copy could not hold n bytes. What is not written is
// given back when the response ends (unprepay).
func (h *heldExchange) prepay(n int64) bool {
	if n > h.s.maxEach || !h.s.reserve(h, n) {
		return false
	}
	h.mu.Lock()
	h.accounted += n
	h.prepaid += n
	h.mu.Unlock()
	return true
}

// isDiverted reports whether h's response is collected by a resume over the edge's
// other tunnel (heldStream.divert), not read from its own stream.
func (h *heldExchange) isDiverted() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.diverted
}

// collected forgets a diverted response once the edge acknowledged decoding the resume
// answer that carried it (the resume that collects it by design keeps no window: the
// edge has it whole, as delivered says for responses read from their own stream).
func (h *heldExchange) collected() {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.forgetDeliveredLocked(h)
}

// unprepay gives back the prepaid bytes no write used.
func (h *heldExchange) unprepay() {
	h.mu.Lock()
	free := h.prepaid
	h.accounted -= free
	h.prepaid = 0
	h.mu.Unlock()
	h.s.release(free)
}

func (h *heldExchange) wakeLocked() {
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

// complete marks the response whole and starts its window.
func (h *heldExchange) complete() {
	if h.markDone() {
		h.startWindow()
	}
}

// completeWhenSent marks the response whole at once (a resume may take it from the copy
// now) and starts its window once st has sent it all, if st can tell (tunnel streams:
// AfterSent). On a slow link a response waits in the tunnel's queue long after the
// handler ended (16 responses of 200 KB on gprs: minutes); a window counted from the
// handler's end would be over before the connection carrying them failed, and the
// resume would find nothing.
func (h *heldExchange) completeWhenSent(st Stream) {
	if !h.markDone() {
		return
	}
	if ad, ok := st.(DeliveryNotifier); ok {
		ad.AfterDelivered(h.delivered)
	}
	if as, ok := st.(interface{ AfterSent(func()) }); ok {
		as.AfterSent(h.startWindow)
		return
	}
	h.startWindow()
}

// markDone records the response whole; false if it already was.
func (h *heldExchange) markDone() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return false
	}
	h.done = true
	h.attached = nil
	h.wakeLocked()
	return true
}

// startWindow starts h's resume window: it is forgotten resume_window from now.
func (h *heldExchange) startWindow() {
	h.mu.Lock()
	h.finishedAt = h.s.now()
	h.mu.Unlock()
	h.s.finish(h)
}

// resumable reports whether h still has its whole copy.
func (h *heldExchange) resumable() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.lost
}

// takeOver detaches the original stream, if it is still attached: a resume arrived, so
// the edge has given it up, even if this side has not noticed yet. Closing it resets it,
// and the exchange's writes go on to the copy alone.
func (h *heldExchange) takeOver() {
	h.mu.Lock()
	st := h.attached
	h.attached = nil
	h.mu.Unlock()
	if st != nil {
		_ = st.Close()
	}
}

// wait blocks until h's response is complete or lost, or ctx ends; it returns the bytes
// of the response message from offset (nil when lost).
func (h *heldExchange) wait(ctx context.Context, offset int64) (tail []byte, err error) {
	for {
		h.mu.Lock()
		switch {
		case h.notRun:
			h.mu.Unlock()
			return nil, errNotRun
		case h.lost:
			h.mu.Unlock()
			return nil, nil
		case h.done:
			b := h.buf
			h.mu.Unlock()
			if offset > int64(len(b)) {
				return nil, errResumeOffset
			}
			return b[offset:], nil
		}
		if h.changed == nil {
			h.changed = make(chan struct{})
		}
		changed := h.changed
		h.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// heldMetrics are the held-response collectors (registered with the proxy's Metrics).
type heldMetrics struct {
	entries    prometheus.Gauge
	bytes      prometheus.Gauge
	tombstones prometheus.Gauge
	dropped    *prometheus.CounterVec
	delivered  prometheus.Counter // dropped{reason="delivered"}: one per exchange with a codec
	lost       *prometheus.CounterVec
	resumes    *prometheus.CounterVec
}

func newHeldMetrics() *heldMetrics {
	m := &heldMetrics{
		entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "soapgw_origin_held_exchanges",
			Help: "Exchanges whose response the origin holds so that an edge can collect it after a tunnel connection died (running, or finished within origin.resume_window).",
		}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "soapgw_origin_held_bytes",
			Help: "Bytes of held responses, per-exchange overhead included; bounded by origin.resume_max_bytes.",
		}),
		tombstones: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "soapgw_origin_resume_tombstones",
			Help: "Exchange ids an edge asked for that this origin did not hold: a request with one of them arriving later is refused, not run.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_origin_held_dropped_total",
			Help: "Finished held responses forgotten, by why: delivered (the edge acknowledged decoding the whole response: coded messages), expired (origin.resume_window passed) or evicted (origin.resume_max_bytes needed the room).",
		}, []string{"reason"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_origin_held_lost_total",
			Help: "Exchanges whose response copy was dropped while they ran, so they cannot be resumed, by why: too_large (over resume_max_bytes/8), budget (resume_max_bytes full of running exchanges), failed (the exchange ended without a whole response: the upstream or the request failed part-way).",
		}, []string{"reason"}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_resumes_total",
			Help: "Exchanges collected after their tunnel connection died, by role and result: ok (the client got its real answer), not_held (the origin does not hold it: outcome unknown to the client), not_run (the request never reached the server whole: sent again, or not_delivered to the client), lost (held but its copy was dropped), duplicate (the same exchange id arrived twice and ran once), diverted (not a dead connection: a large response the origin sent over the TCP tunnel beside a lossy UDP one, collected there).",
		}, []string{"role", "result"}),
	}
	for _, r := range []string{"expired", "evicted"} {
		m.dropped.WithLabelValues(r)
	}
	m.delivered = m.dropped.WithLabelValues("delivered")
	for _, r := range []string{"too_large", "budget", "failed"} {
		m.lost.WithLabelValues(r)
	}
	for _, role := range []string{"edge", "origin"} {
		for _, r := range []string{"ok", "not_held", "not_run", "lost", "failed"} {
			m.resumes.WithLabelValues(role, r)
		}
	}
	m.resumes.WithLabelValues("origin", "duplicate")
	m.resumes.WithLabelValues("edge", "diverted")
	m.resumes.WithLabelValues("origin", "diverted")
	return m
}

func (m *heldMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.entries, m.bytes, m.tombstones, m.dropped, m.lost, m.resumes}
}

// heldStream is an exchange's stream as the origin writes its response: every byte also
// goes to the held copy, and once the stream fails (its connection died, or a resume
// took over) the writes go on to the copy alone, so the upstream call completes for the
// edge to collect. Without a whole copy, a failed stream fails the writes as before.
type heldStream struct {
	Stream
	h        *heldExchange
	detached bool
	diverted bool // divert ran: the copy alone carries the response
	closed   bool // CloseWrite ran: the message is whole
}

// divert sends the response to the copy alone (Origin.divert), if the copy can hold size
// bytes (paid for now, so the budget cannot drop it half-way): the stream itself gets
// only answer, the head that tells the edge to collect the response elsewhere. It reports
// false, changing nothing, when the copy cannot hold it.
func (w *heldStream) divert(answer []byte, size int64) bool {
	if !w.h.prepay(size) {
		return false
	}
	if _, err := w.Stream.Write(answer); err == nil {
		_ = w.Stream.CloseWrite()
	} // else the stream failed: the edge resumes from the copy all the same
	w.detached, w.diverted = true, true
	w.h.mu.Lock()
	w.h.diverted = true
	w.h.mu.Unlock()
	return true
}

// errHeldLost fails the writes of an exchange whose stream is gone and whose copy was
// dropped: nobody can collect the rest.
var errHeldLost = errors.New("soapgw: tunnel stream lost and the response is too large to hold for a resume")

func (w *heldStream) Write(p []byte) (int, error) {
	w.h.record(p)
	if !w.detached {
		n, err := w.Stream.Write(p)
		if err == nil || !w.h.resumable() {
			return n, err
		}
		w.detached = true
	}
	if !w.h.resumable() {
		return 0, errHeldLost
	}
	return len(p), nil
}

func (w *heldStream) Flush() error {
	if w.detached {
		return nil
	}
	if err := w.Stream.Flush(); err != nil {
		if !w.h.resumable() {
			return err
		}
		w.detached = true
	}
	return nil
}

// CloseWrite ends the message on the stream (when it is still there) and in the copy.
func (w *heldStream) CloseWrite() error {
	if !w.detached {
		if err := w.Stream.CloseWrite(); err != nil {
			if !w.h.resumable() {
				return err
			}
			w.detached = true
		}
	}
	if !w.h.resumable() && w.detached {
		return errHeldLost
	}
	w.closed = true
	if w.diverted {
		w.h.unprepay()
	}
	if w.detached {
		w.h.complete() // the copy alone carries it
	} else {
		w.h.completeWhenSent(w.Stream)
	}
	return nil
}

// finish ends the exchange's hold: a message that never ended (the exchange failed
// part-way) cannot be resumed, and a resume waiting for it learns so at once. notRun
// says the upstream never got the whole request (it arrived cut): such an exchange is
// kept for its window as "not run", so a resume learns the server never saw it and the
// edge may send it again.
func (w *heldStream) finish(notRun bool) {
	if w.closed {
		return
	}
	w.h.mu.Lock()
	var free int64
	if notRun {
		w.h.notRun = true
		free = w.h.accounted - heldOverhead
		w.h.buf, w.h.accounted, w.h.prepaid = nil, heldOverhead, 0
	} else {
		free = w.h.loseLocked("failed")
	}
	w.h.mu.Unlock()
	w.h.s.release(free)
	w.h.complete()
}
