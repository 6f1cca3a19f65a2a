package quic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	quicgo "github.com/quic-go/quic-go"
)

// Redundant copies of small messages (SPEC.md, "Copies").
//
// On a lossy link a one-packet message whose packet is lost waits for QUIC's probe
// timeout (about RTT + 4 RTT variance + the peer's 25 ms ack delay) before it is sent
// again: that is the p99 of sequential calls. With redundancy on, each message that fits
// one QUIC DATAGRAM is also sent as one, a few milliseconds after its stream data (so the
// two do not share a packet and its fate). The receiver takes whichever complete copy comes
// first and drops the other; datagrams are never retransmitted, so a copy costs its bytes
// once. Exactly once holds because the origin starts an exchange from a copy only for a
// stream it has not accepted yet, registers it, and attaches the stream to that exchange
// when quic-go delivers it (quic-go accepts streams in id order).

// streamIO is what a Stream needs of its QUIC stream: *quicgo.Stream, or a pendingStream
// standing in for one the origin has not received yet.
type streamIO interface {
	io.ReadWriter
	Close() error
	CancelRead(quicgo.StreamErrorCode)
	CancelWrite(quicgo.StreamErrorCode)
	SetDeadline(time.Time) error
	SetReadDeadline(time.Time) error
	StreamID() quicgo.StreamID
	ReleaseStreamCredit()
}

// maxPendingWrite bounds what an exchange started from a copy buffers for its stream
// before the stream arrives; a writer beyond it waits.
const maxPendingWrite = 4 << 20

// pendingStream stands in for the stream of an exchange the origin started from a copy:
// writes are kept until attach hands over the real stream. The exchange's message came
// whole in the copy, so nothing is read from it.
type pendingStream struct {
	id      quicgo.StreamID
	claimed bool // its stream arrived (guarded by conn.regMu)

	mu        sync.Mutex
	real      *quicgo.Stream
	attached  chan struct{} // closed by attach
	buf       []byte
	closed    bool // Close (FIN) asked before attach
	cancelW   quicgo.StreamErrorCode
	cancelled bool
	deadline  time.Time
	credit    bool // ReleaseStreamCredit asked before attach
}

func newPendingStream(id quicgo.StreamID) *pendingStream {
	return &pendingStream{id: id, attached: make(chan struct{})}
}

func (p *pendingStream) StreamID() quicgo.StreamID { return p.id }

// attach hands over the real stream: what was written goes out now, in order. (Its own
// bytes are not the exchange's: the message came in the copy; conn.discard drops them.)
func (p *pendingStream) attach(real *quicgo.Stream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.real = real
	if !p.deadline.IsZero() {
		_ = real.SetDeadline(p.deadline)
	}
	if p.cancelled {
		real.CancelWrite(p.cancelW)
	} else {
		if len(p.buf) > 0 {
			_, _ = real.Write(p.buf)
		}
		if p.closed {
			_ = real.Close()
		}
	}
	p.buf = nil
	if p.credit {
		real.ReleaseStreamCredit()
	}
	close(p.attached)
}

func (p *pendingStream) Read([]byte) (int, error) { return 0, io.EOF }

func (p *pendingStream) Write(b []byte) (int, error) {
	for {
		p.mu.Lock()
		if p.real != nil {
			r := p.real
			p.mu.Unlock()
			return r.Write(b)
		}
		if p.cancelled || p.closed {
			p.mu.Unlock()
			return 0, errors.New("quic tunnel: write after close")
		}
		if len(p.buf)+len(b) <= maxPendingWrite {
			p.buf = append(p.buf, b...)
			p.mu.Unlock()
			return len(b), nil
		}
		dl := p.deadline
		p.mu.Unlock()
		var timeout <-chan time.Time
		if !dl.IsZero() {
			t := time.NewTimer(time.Until(dl))
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-p.attached:
		case <-timeout:
			return 0, os.ErrDeadlineExceeded
		}
	}
}

func (p *pendingStream) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.real != nil {
		return p.real.Close()
	}
	p.closed = true
	return nil
}

func (p *pendingStream) CancelWrite(code quicgo.StreamErrorCode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.real != nil {
		p.real.CancelWrite(code)
		return
	}
	if !p.closed {
		p.cancelled, p.cancelW = true, code
	}
}

func (p *pendingStream) CancelRead(quicgo.StreamErrorCode) {} // attach cancels the real one

func (p *pendingStream) SetDeadline(t time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deadline = t
	if p.real != nil {
		return p.real.SetDeadline(t)
	}
	return nil
}

func (p *pendingStream) SetReadDeadline(time.Time) error { return nil }

func (p *pendingStream) ReleaseStreamCredit() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.real != nil {
		p.real.ReleaseStreamCredit()
		return
	}
	p.credit = true
}

// discard reads and drops, in the background, the stream bytes of a message that came
// in its copy. Refusing them instead (CancelRead) makes quic-go send STOP_SENDING even
// when they are all in, and the peer answers with a RESET_STREAM packet of its own: on a
// 40 kbit/s link that packet went out just before the peer's next message and delayed it
// by 13 ms. Only bytes that have not come by the loss wait, or more than a copy can be,
// are refused.
func (c *conn) discard(qs *quicgo.Stream) {
	c.background(func() {
		_ = qs.SetReadDeadline(time.Now().Add(c.lossWait()))
		n, err := io.Copy(io.Discard, io.LimitReader(qs, maxHeadLen+maxCopy+1))
		if err != nil || n > maxHeadLen+maxCopy {
			qs.CancelRead(codeCancelled)
		}
	})
}

// copyItem is a copy waiting for its send time.
type copyItem struct {
	due  time.Time
	msg  []byte
	skip func() bool // true: the copy is no longer useful (the answer is in)
	only bool        // the message's only way out yet (its stream is not there): never held
}

// copyQueueLen bounds the copies waiting to be sent; beyond it copies are dropped (they are
// only ever an extra chance).
const copyQueueLen = 1024

// copyDelay is how long after its stream data a copy leaves: long enough not to share the
// packet (and the fate) of the stream data, short against the probe timeout it beats.
func copyDelay(srtt time.Duration) time.Duration {
	return min(max(2*time.Millisecond, srtt/8), 20*time.Millisecond)
}

// queueCopy schedules a copy of a stream's whole message (head included).
func (c *conn) queueCopy(id quicgo.StreamID, msg []byte, delay time.Duration, skip func() bool) {
	if c.copies == nil {
		return
	}
	b := binary.AppendUvarint(make([]byte, 0, 8+len(msg)), uint64(id))
	b = append(b, msg...)
	select {
	case c.copies <- copyItem{due: time.Now().Add(delay), msg: b, skip: skip, only: delay == 0}:
	default:
		c.m.copies.WithLabelValues("sent_dropped").Inc()
	}
}

// sendCopies sends queued copies when due; it runs until the connection ends. Items come
// in due order (the delay is the same for all but those due at once).
func (c *conn) sendCopies() {
	defer c.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	wait := func(d time.Duration, until <-chan struct{}) bool {
		if d <= 0 {
			return true
		}
		t.Reset(d)
		select {
		case <-t.C:
		case <-until:
			t.Stop() // since Go 1.23 no stale tick is left in t.C
		case <-c.done():
			return false
		}
		return true
	}
	for {
		var it copyItem
		select {
		case it = <-c.copies:
		case <-c.done():
			return
		}
		if !wait(time.Until(it.due), nil) {
			return
		}
		if ch := c.awaited.holding(c.streams.Load()); ch != nil && !it.only && !wait(copyDelay(c.srtt()), ch) {
			return
		}
		if it.skip != nil && it.skip() {
			c.m.copies.WithLabelValues("skipped").Inc()
			continue
		}
		if err := c.qc.SendDatagram(it.msg); err != nil {
			c.m.copies.WithLabelValues("too_large").Inc()
			continue
		}
		c.sendCtrl(ctrlCarry, nil)
		c.m.copies.WithLabelValues("sent").Inc()
	}
}

// Copies carry the acknowledgements (SPEC.md, "Copies").
//
// quic-go acknowledges at once when a second ack-eliciting packet comes since it last
// sent an acknowledgement, and otherwise puts the acknowledgement in the next packet that
// carries stream data, or sends it alone after 25 ms. A packet of DATAGRAM frames only
// carries none. With copies, each side receives two packets per message (the message and
// its copy) and, unless it sends something between them and the next message, the next
// message's arrival triggers an acknowledgement in a packet of its own, a fraction of a
// millisecond before this side's answer or next request leaves. That costs a packet (about
// 60 bytes on the link) per message, and on a path whose delay varies it delays the
// message behind it: a packet never overtakes the one before it, so the message waits for
// the slower of the two (routed-wlan: +0.5 ms at the median).
//
// So a copy leaves with a CARRY control frame: stream data, so its packet carries the
// acknowledgement; and a copy waits (a bounded time, while at most one exchange is open,
// the sequential pattern this is for) for the copy of the message the peer sent last, so
// that what it acknowledges includes that copy. Then every packet received is acknowledged
// in a packet this side sends anyway.

// awaitedCopy is the peer's copy this side's next copy waits for: that of the last
// message received from its stream while the peer sends copies.
type awaitedCopy struct {
	mu       sync.Mutex
	id       quicgo.StreamID
	waiting  bool
	arrived  chan struct{} // closed when the awaited copy arrives
	lastCopy quicgo.StreamID
	copyAt   time.Time // when the last copy came: the peer copies while this is recent
}

// peerCopiesFor is how long after its last copy the peer is taken to copy still.
const peerCopiesFor = time.Second

// expect notes that a message of stream id came from its stream: if the peer copies, its
// copy is on its way.
func (a *awaitedCopy) expect(id quicgo.StreamID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.copyAt.IsZero() || time.Since(a.copyAt) > peerCopiesFor || a.lastCopy == id {
		return
	}
	if a.waiting {
		close(a.arrived)
	}
	a.id, a.waiting, a.arrived = id, true, make(chan struct{})
}

// got notes that the copy of stream id came.
func (a *awaitedCopy) got(id quicgo.StreamID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastCopy, a.copyAt = id, time.Now()
	if a.waiting && a.id == id {
		a.waiting = false
		close(a.arrived)
	}
}

// holding returns what a copy about to leave waits for, or nil: the awaited copy's
// arrival, while at most one exchange is open.
func (a *awaitedCopy) holding(open int64) <-chan struct{} {
	if open > 1 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.waiting {
		return nil
	}
	return a.arrived
}

// receiveCopies hands received copies to their exchanges until the connection ends.
func (c *conn) receiveCopies() {
	defer c.wg.Done()
	for {
		b, err := c.qc.ReceiveDatagram(context.Background())
		if err != nil {
			return
		}
		id, n := binary.Uvarint(b)
		if n <= 0 {
			c.close(closeProtocol, "malformed datagram")
			return
		}
		c.onCopy(quicgo.StreamID(id), b[n:])
	}
}

// maxCopy is the largest message (head included) sent as a copy: what fits one DATAGRAM
// frame in a packet of QUIC's minimum size. quic-go refuses larger ones (counted as
// too_large); path MTU discovery may allow more, but copies are for one-packet messages.
const maxCopy = 1100

// onCopy hands a received copy to its exchange: the edge's stream waiting for a response,
// or at the origin the stream of a request (accepted already, or an exchange started now
// for a stream not accepted yet).
func (c *conn) onCopy(id quicgo.StreamID, msg []byte) {
	c.awaited.got(id)
	c.regMu.Lock()
	st := c.exchanges[id]
	if st != nil || !c.server {
		c.regMu.Unlock()
		if st == nil {
			c.m.copies.WithLabelValues("late").Inc()
			return
		}
		st.offer(msg)
		return
	}
	switch {
	case id < c.nextAccept:
		c.regMu.Unlock()
		c.m.copies.WithLabelValues("late").Inc() // its stream came first and is done
		return
	case id >= c.nextAccept+4*quicgo.StreamID(c.maxStreams) || c.early >= int(c.maxStreams):
		c.regMu.Unlock()
		c.m.copies.WithLabelValues("refused").Inc() // beyond the stream credit granted
		return
	}
	ps := newPendingStream(id)
	st = newStream(c, ps, nil)
	st.server = true
	st.copyMsg = msg
	c.exchanges[id] = st
	c.early++
	c.regMu.Unlock()
	c.m.copies.WithLabelValues("early_start").Inc()
	c.serve(st)
}

// accepted registers a stream quic-go delivered: the stream of an exchange started from a
// copy is attached to it (and nil returned); any other gets its Stream.
func (c *conn) accepted(qs *quicgo.Stream) *Stream {
	c.regMu.Lock()
	id := qs.StreamID()
	c.nextAccept = id + 4
	if st := c.exchanges[id]; st != nil {
		// Started from a copy. Its entry stays until now even if it is over: without
		// it, this stream would run the exchange a second time.
		ps := st.qs.(*pendingStream)
		ps.claimed = true
		c.early--
		if st.released.Load() {
			delete(c.exchanges, id)
		}
		c.regMu.Unlock()
		ps.attach(qs)
		c.discard(qs) // the message came in the copy
		return nil
	}
	st := newStream(c, qs, nil)
	st.server = true
	if c.copiesOn() {
		c.exchanges[id] = st
	}
	if c.served == nil {
		c.served = map[quicgo.StreamID]*Stream{}
	}
	c.served[id] = st
	c.regMu.Unlock()
	return st
}

// onAbandon fails the origin exchange of stream id, which the edge abandoned (ABANDON).
// An exchange already over, or never here, is not looked for further.
func (c *conn) onAbandon(id quicgo.StreamID) {
	c.regMu.Lock()
	st := c.served[id]
	c.regMu.Unlock()
	if st != nil {
		st.abandon()
	}
}

// unserve drops a closed origin exchange from served.
func (c *conn) unserve(st *Stream) {
	c.regMu.Lock()
	if c.served[st.qs.StreamID()] == st {
		delete(c.served, st.qs.StreamID())
	}
	c.regMu.Unlock()
}

// opened registers an exchange the edge opened, so its response's copy finds it.
func (c *conn) opened(st *Stream) {
	if !c.copiesOn() {
		return
	}
	c.regMu.Lock()
	c.exchanges[st.qs.StreamID()] = st
	c.regMu.Unlock()
}

// forget drops a closed exchange from the registry.
func (c *conn) forget(st *Stream) {
	c.regMu.Lock()
	if ps, ok := st.qs.(*pendingStream); ok && !ps.claimed {
		c.regMu.Unlock() // accepted drops it when its stream arrives
		return
	}
	if c.exchanges[st.qs.StreamID()] == st {
		delete(c.exchanges, st.qs.StreamID())
	}
	c.regMu.Unlock()
}

// copiesOn reports whether this connection takes copies (and may send them).
func (c *conn) copiesOn() bool { return c.copies != nil }

// copyNow reports whether a message that fits a copy is sent twice: always with
// redundancy on, while this side's packets are being lost with auto (loss.go), never for
// bulk messages (one-way deliveries: nobody waits on them, and on a slow link a copy
// takes the place of the next delivery).
func (c *conn) copyNow(bulk bool) bool {
	switch Redundancy(c.copyMode.Load()) {
	case RedundancyOn:
		return !bulk
	case RedundancyAuto:
		return !bulk && c.loss.copying.Load()
	}
	return false
}

// Redundancy says when small messages are sent twice (SPEC.md, "Copies").
type Redundancy uint8

const (
	// RedundancyOff: never; QUIC datagrams are not even negotiated.
	RedundancyOff Redundancy = iota
	// RedundancyAuto: while the peer reports more than 0.5 % of this side's packets
	// lost, until it reports under 0.2 % (loss.go).
	RedundancyAuto
	// RedundancyOn: always.
	RedundancyOn
)

// helloCopies is what an edge's HELLO says of its redundancy: "auto", or "" for on (what
// edges said before auto existed, by enabling datagrams and nothing more).
func (r Redundancy) helloCopies() string {
	if r == RedundancyAuto {
		return "auto"
	}
	return ""
}

// startCopies turns copies on once both sides agreed: the edge enables QUIC datagrams
// unless redundancy is off, and the origin then answers in kind, on the terms of the
// edge's HELLO.
func (c *conn) startCopies() {
	cs := c.qc.ConnectionState()
	if !cs.SupportsDatagrams.Local || !cs.SupportsDatagrams.Remote {
		return
	}
	c.copies = make(chan copyItem, copyQueueLen)
	c.exchanges = map[quicgo.StreamID]*Stream{}
	mode := c.redundancy
	if c.server {
		mode = RedundancyOn
		if c.peer.Copies == "auto" {
			mode = RedundancyAuto
		}
	}
	c.copyMode.Store(uint32(mode)) // after copies is set: copyNow reads it after this
	c.wg.Add(2)
	go c.sendCopies()
	go c.receiveCopies()
}

// copyTransition logs when redundancy auto starts or stops sending copies.
func (c *conn) copyTransition(on bool, ratio float64) {
	if Redundancy(c.copyMode.Load()) != RedundancyAuto {
		return
	}
	lost := fmt.Sprintf("%.2f%%", 100*ratio)
	if on {
		// The waits that made the window strict came while messages went once; with
		// copies such losses cost a few milliseconds (onWaited), so start wide again.
		c.window.relax()
		c.log.Info("udp tunnel: sending small messages twice while packets are lost (redundancy auto)", "peer", c.label, "lost", lost)
	} else {
		c.log.Info("udp tunnel: sending small messages once again, loss has fallen (redundancy auto)", "peer", c.label, "lost", lost)
	}
}

// onWaited takes the peer's report that a sequenced message of ours waited d for an
// earlier one. Normally the auto window turns strict: concurrent messages are then coded
// stateless, so a lost packet holds up no other message. While this side copies its
// messages, a lost one comes in its copy a few milliseconds later, so the waits it causes
// are that short; turning strict for them would cost the compression of every concurrent
// message (on routed-wlan with 16 clients, about 3x the bytes) for nothing. So a wait no
// longer than copies explain (copiesAbsorbWait) leaves the window as it is. A longer one
// (a message and its copy both lost, or a message too large to copy) turns it strict only
// if it is not rare (rareWait).
func (c *conn) onWaited(d time.Duration) {
	if c.copyNow(false) && (copiesAbsorbWait(d, c.srtt()) || c.rareWait()) {
		return
	}
	c.window.waited()
}

// longWaitSpacing is how many sequenced messages must separate two waits that copies do
// not explain for the second to leave the window wide. A wait holds up at most a window
// of messages (autoWindowWide), so waits this rare delay under 1 % of them, below a p99;
// a strict window costs every concurrent message its compression for strictFor. With 1 %
// loss each way a message and its copy are both lost about once in 10,000: on routed-wlan
// with 16 clients that was once every 10 s or so, and each kept the window strict for 30 s
// (about 4x the TCP tunnel's bytes over a long run, against 1.6x without).
const longWaitSpacing = 100 * autoWindowWide

// rareWait records a wait that copies do not explain and reports whether the one before
// came at least longWaitSpacing sequenced messages earlier (or there was none).
func (c *conn) rareWait() bool {
	c.enc.mu.Lock()
	at := c.enc.sent + 1 // 0 stands for none
	c.enc.mu.Unlock()
	prev := c.longWaitAt.Swap(at)
	return prev == 0 || at-prev >= longWaitSpacing
}

// copiesAbsorbWait reports whether a wait of d is what a message recovered by its copy
// costs the message behind it: its copy's delay, twice over for jitter, and 10 ms.
func copiesAbsorbWait(d, srtt time.Duration) bool {
	return d <= 2*copyDelay(srtt)+10*time.Millisecond
}
