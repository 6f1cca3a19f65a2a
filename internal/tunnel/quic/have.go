package quic

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	quicgo "github.com/quic-go/quic-go"
)

// Responses the edge has whole. The origin keeps a copy of each response until the edge
// has it, so that an exchange whose connection dies can be resumed on another
// (proxy/held.go); it learns that from the acknowledgement of sequenced messages (ACK),
// and nothing told it of the others: a response coded stateless (the lane was busy, as it
// is for most responses with many clients at once), identity or streamed stayed held for
// the whole resume window (30 s), up to the store's byte budget, beyond which new
// responses could not be held at all. So an edge reports the stream ids of those responses
// once it has read them whole, in HAVE control frames (SPEC.md): with its next request
// once haveFlushMin are pending, or haveDelay after the first, or at once when
// maxHaveBatch are pending. A HAVE often leaves in a packet of its own (quic-go packs what
// is queued when it wakes, and the request may not be yet): one per exchange cost 21 bytes
// an exchange on routed-wlan with 16 clients; one per 16 exchanges, or a second, costs
// little, and the copies it frees were held 30 s. It says so in its HELLO
// ("have"), and only an origin that heard it keeps track, of at most haveTrackMax
// responses for at most haveTrackAge: beyond those a response stays held for the window,
// as before.
const (
	maxHaveBatch = 256 // stream ids per HAVE frame: at most 8 bytes each, within 4096
	haveFlushMin = 16  // pending ids a request takes along
	haveDelay    = time.Second
	haveTrackMax = 8192
	haveTrackAge = 2 * time.Minute
)

// haveReports is the edge's pending HAVE ids.
type haveReports struct {
	mu      sync.Mutex
	pending []uint64
}

// haveWaits is the origin's responses awaiting the edge's HAVE, by stream id, and in the
// order they were sent (to bound them).
type haveWaits struct {
	mu    sync.Mutex
	byID  map[quicgo.StreamID]*Stream
	order []haveEntry
	head  int
}

type haveEntry struct {
	id quicgo.StreamID
	at time.Time
}

// noteHave records, at the edge, that the response on stream id was read whole.
func (c *conn) noteHave(id quicgo.StreamID) {
	h := &c.haves
	h.mu.Lock()
	h.pending = append(h.pending, uint64(id))
	n := len(h.pending)
	h.mu.Unlock()
	switch {
	case n >= maxHaveBatch:
		c.haveTimer.Reset(0)
	case n == 1:
		c.haveTimer.Reset(haveDelay)
	}
}

// sendPendingHave sends the pending HAVE ids if there are at least atLeast of them: 1
// from haveTimer, haveFlushMin ahead of a request the edge writes now.
func (c *conn) sendPendingHave(atLeast int) {
	h := &c.haves
	h.mu.Lock()
	if len(h.pending) < atLeast {
		h.mu.Unlock()
		return
	}
	ids := h.pending
	h.pending = nil
	h.mu.Unlock()
	for len(ids) > 0 {
		n := min(len(ids), maxHaveBatch)
		p := make([]byte, 0, 3*n)
		for _, id := range ids[:n] {
			p = binary.AppendUvarint(p, id)
		}
		c.m.haveSent.Inc()
		c.sendCtrl(ctrlHave, p)
		ids = ids[n:]
	}
}

// awaitHave records, at an origin whose edge sends HAVE, a response about to be sent on
// st that no ACK will cover. It runs before the response's last bytes go: the edge may
// read them and report them in a HAVE that the control stream's reader takes before this
// goroutine runs again (a loaded host), and a HAVE for an id not recorded is ignored.
func (c *conn) awaitHave(st *Stream) {
	if !c.peer.Have {
		return
	}
	w := &c.haveWaits
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byID == nil {
		w.byID = map[quicgo.StreamID]*Stream{}
	}
	for w.head < len(w.order) && (len(w.order)-w.head >= haveTrackMax || now.Sub(w.order[w.head].at) > haveTrackAge) {
		delete(w.byID, w.order[w.head].id) // stays held for the window, as without HAVE
		w.head++
	}
	if w.head > 64 && 2*w.head > len(w.order) {
		n := copy(w.order, w.order[w.head:])
		w.order, w.head = w.order[:n], 0
	}
	id := st.qs.StreamID()
	w.byID[id] = st
	w.order = append(w.order, haveEntry{id, now})
}

// forgetHave drops what awaitHave recorded for st, whose response did not go.
func (c *conn) forgetHave(st *Stream) {
	w := &c.haveWaits
	w.mu.Lock()
	delete(w.byID, st.qs.StreamID())
	w.mu.Unlock()
}

// onHave tells the streams whose ids a HAVE frame lists that the edge has their response.
func (c *conn) onHave(p []byte) error {
	c.m.haveReceived.Inc()
	w := &c.haveWaits
	for len(p) > 0 {
		v, k := binary.Uvarint(p)
		if k <= 0 {
			return fmt.Errorf("%w: bad stream id in HAVE", ErrBadHead)
		}
		p = p[k:]
		w.mu.Lock()
		st := w.byID[quicgo.StreamID(v)]
		delete(w.byID, quicgo.StreamID(v))
		w.mu.Unlock()
		if st != nil {
			st.delivered.Fire()
		}
	}
	return nil
}

// receivedWhole notes, at the edge, a response read whole that ACK does not cover (not
// sequenced). st.rmu is held.
func (st *Stream) receivedWhole() {
	if st.server || st.haveNoted || (st.hasHead && st.rhead.sequenced()) {
		return
	}
	st.haveNoted = true
	st.c.noteHave(st.qs.StreamID())
}
