package quic

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/soapgw/soapgw/internal/tunnel"
	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// Stream error codes (RESET_STREAM / STOP_SENDING), SPEC.md.
const (
	codeCancelled quicgo.StreamErrorCode = 1 // the exchange was abandoned
	codeRefused   quicgo.StreamErrorCode = 2 // not processed: the sender may retry it
	codeCodec     quicgo.StreamErrorCode = 3 // the message could not be decoded; not processed
	codeTooLarge  quicgo.StreamErrorCode = 4 // the message exceeds the receiver's limit
)

// Connection close codes (CONNECTION_CLOSE), SPEC.md.
const (
	closeNormal   quicgo.ApplicationErrorCode = 0
	closeAuth     quicgo.ApplicationErrorCode = 1
	closeProtocol quicgo.ApplicationErrorCode = 2
)

const (
	// ackDelay is how long a decoded sequenced message waits for an outgoing message head
	// to carry its acknowledgement before a control ACK is sent alone.
	ackDelay = 20 * time.Millisecond
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// conn is one authenticated QUIC connection between the gateways, on either side. It owns
// the control stream (acknowledgements of sequenced messages) and the codec state of both
// directions; exchanges are its other streams.
type conn struct {
	qc    *quicgo.Conn
	cfg   *tunnel.Config
	peer  frame.Hello
	label string // peer name (edge) or node (origin), for metrics and logs
	m     *connMetrics
	log   *slog.Logger

	ctrl   *quicgo.Stream
	ctrlMu sync.Mutex // serializes control writes

	codecs    [maxCodecID + 1]tunnel.MessageCodec // those both sides decode, by id
	stateless [maxCodecID + 1]bool
	decodes   func(id uint8) bool       // peerDecodes as a value, made once: a method value allocates
	encPools  [maxCodecID + 1]sync.Pool // stateless encoders
	decPools  [maxCodecID + 1]sync.Pool // stateless decoders
	maxCoded  int                       // largest message sent coded: min(ours, peer's)
	streamOut tunnel.StreamCodec        // codes messages too large or flushed, if the peer decodes it alike

	enc  encLane
	dec  decLane
	bulk bulkGate // bulk messages written together (bulkhold.go)

	haves     haveReports // edge: responses read whole, for HAVE (have.go)
	haveTimer *time.Timer // edge: sends them when no request came to carry them; owned, stopped by close
	haveWaits haveWaits   // origin: responses awaiting the edge's HAVE
	heads     headTimes   // arrival of sequenced heads, to tell loss from serialization
	window    windowPolicy

	ackMu    sync.Mutex
	ackSent  uint64
	ackTimer *time.Timer // owned; stopped by close

	// Stream credit (origin side). quic-go gives the edge a new stream (MAX_STREAMS) each
	// time a finished stream's credit is released, in a packet of its own when released on
	// its own: on a request/response tunnel that is a third packet per exchange, and the
	// edge acknowledges it at once (two ack-eliciting packets). Releasing the credit of
	// finished exchanges just before the next response leaves puts the frame in that
	// response's packet; creditTimer releases it anyway when no response follows.
	creditMu    sync.Mutex
	credit      []heldCredit // in the order the exchanges finished
	creditTimer *time.Timer

	// Copies (redundant.go): nil copies means off.
	redundancy Redundancy    // the edge's setting (the origin follows the edge's HELLO)
	divert     bool          // an edge with a TCP tunnel beside: it says so in its HELLO (PeerConfig.Divert)
	copyMode   atomic.Uint32 // Redundancy in force, set once copies are on
	loss       lossMeter     // this side's packets the peer reports lost (loss.go)
	reports    reporter      // when this side reports what it received
	prober     tailProber    // edge: PINGs for exchanges whose response is late (tailprobe.go)
	lastPong   atomic.Int64  // origin: unix nanos of the last PING answered
	copies     chan copyItem
	awaited    awaitedCopy   // the peer's copy this side's next copy waits for (redundant.go)
	longWaitAt atomic.Uint64 // lane's sent count + 1 at the last wait copies did not explain (rareWait)
	regMu      sync.Mutex
	exchanges  map[quicgo.StreamID]*Stream // open exchanges a copy may be for
	server     bool
	nextAccept quicgo.StreamID // origin: streams below were accepted
	early      int             // origin: exchanges started from a copy, stream not yet here
	maxStreams int64
	// streamFreed runs when a stream ends (edge: wakes OpenBulkStream calls waiting).
	streamFreed func()
	serve       func(*Stream) // origin: runs an exchange started from a copy
	// served are the origin's open exchanges by stream id (guarded by regMu), for an
	// edge's ABANDON to find.
	served map[quicgo.StreamID]*Stream

	lastWaited    atomic.Int64  // unix nanos of the last WAITED notice
	waitedPending atomic.Uint64 // ms of a WAITED notice the ack timer sends

	goingAway atomic.Bool
	goAwayCh  chan struct{} // closed when the peer sends GOAWAY
	goAwayOne sync.Once
	streams   atomic.Int64
	progress  atomic.Uint64  // reads that returned bytes of an exchange (nudge.go)
	wg        sync.WaitGroup // control reader, drains
	wgMu      sync.Mutex     // orders wg.Add of drains before wait
	closing   bool           // guarded by wgMu: no more drains
	closeOnce sync.Once
}

// encLane is the sender's sequenced codec state. At most one sequenced message is
// unacknowledged at a time, so the receiver never has to wait for one message to decode
// another (SPEC.md, "Loss-safe codec state").
type encLane struct {
	mu     sync.Mutex
	codec  uint8
	e      tunnel.MessageEncoder
	sent   uint64 // last seq sent
	acked  uint64 // last seq acknowledged (or given up)
	sentAt time.Time
	fresh  bool // the next sequenced message starts a fresh state
	// waiters are the bulk messages waiting for room in the lane, oldest first; each
	// acknowledged message wakes one (a thousand deliveries may wait on a slow link).
	waiters []chan struct{}
	// awaiting are the streams of the unacknowledged sequenced messages, by seq: an
	// acknowledgement tells each it was delivered (Stream.AfterDelivered); a message
	// given up is dropped from it untold. At most the window's worth.
	awaiting []awaitingAck
}

type awaitingAck struct {
	seq uint64
	st  *Stream
}

// settle takes the streams of messages up to l.acked off awaiting; those acknowledged
// (ok) are returned, to be told once l.mu is released. Called with l.mu held.
func (l *encLane) settle(ok bool) []awaitingAck {
	n := 0
	for n < len(l.awaiting) && l.awaiting[n].seq <= l.acked {
		n++
	}
	if n == 0 {
		return nil
	}
	var done []awaitingAck
	if ok {
		done = slices.Clone(l.awaiting[:n])
	}
	clear(l.awaiting[:n])
	l.awaiting = l.awaiting[n:]
	if len(l.awaiting) == 0 {
		l.awaiting = nil
	}
	return done
}

// wake wakes up to n waiting bulk messages. Called with l.mu held.
func (l *encLane) wake(n uint64) {
	for ; n > 0 && len(l.waiters) > 0; n-- {
		close(l.waiters[0])
		l.waiters[0] = nil
		l.waiters = l.waiters[1:]
	}
}

// decLane is the receiver's sequenced codec state.
type decLane struct {
	mu     sync.Mutex
	codec  uint8
	d      tunnel.MessageDecoder
	done   atomic.Uint64 // last seq decoded
	broken bool          // only a fresh message can be decoded
	// changed is closed when done or broken changes; made by a message that waits its
	// turn (waitTurn), so the lane's progress costs no channel while nobody waits.
	changed chan struct{}
}

// lossWait bounds how long a sequenced message waits for the one before it (only with a
// sequenced window above 1: the sender coded it on state the receiver had not acknowledged
// yet), and how long the sender waits for a sequenced message's acknowledgement before it
// frees the lane (the peer lost the message with a stream it abandoned) and starts a fresh
// state. Long enough for QUIC to resend a lost packet three times on this path (the probe
// timeout doubles each time: 1 + 2 + 4 timeouts), never below minLossWait. A fixed 5 s was
// shorter than one resend on a gprs link whose queue held seconds of data: every loss then
// broke the lane, the messages behind it were refused and sent again, and one-way
// deliveries crawled at a tenth of the TCP tunnel's rate.
func (c *conn) lossWait() time.Duration {
	s := c.qc.ConnectionStats()
	pto := s.SmoothedRTT + max(4*s.MeanDeviation, time.Millisecond) + maxAckDelay
	return min(max(minLossWait, 7*pto), maxLossWait)
}

const (
	minLossWait = 5 * time.Second
	maxLossWait = time.Minute
	maxAckDelay = 25 * time.Millisecond // quic-go's, fixed
)

// Auto sequenced window: wide while messages do not wait for each other (on a clean path
// they arrive in order), strict (1) for a while after the receiver reports that one waited
// for an earlier one's lost packets (a WAITED control frame). QUIC's own loss counters miss
// exactly this case: a one-packet message lost and resent by a probe timeout is not
// declared lost, so the receiver's waits are the signal.
const (
	autoWindowWide = 16
	strictFor      = 30 * time.Second       // strict after a WAITED notice
	longWait       = 5 * time.Millisecond   // a wait this long is loss recovery, not reordering
	waitedEvery    = 500 * time.Millisecond // at most one WAITED notice per interval
)

// windowPolicy decides how many sequenced messages may be unacknowledged. Called with the
// encoder lane's lock held (size), or from the control reader (waited).
type windowPolicy struct {
	fixed       uint64       // > 0: this window; 0: auto
	bulk        uint64       // > 0: the window of bulk messages; 0: bulkWindow
	strictUntil atomic.Int64 // unix nanos
	gauge       interface{ Set(float64) }
}

func (w *windowPolicy) size() uint64 {
	if w.fixed > 0 {
		return w.fixed
	}
	n := uint64(autoWindowWide)
	if time.Now().UnixNano() < w.strictUntil.Load() {
		n = 1
	}
	if w.gauge != nil {
		w.gauge.Set(float64(n))
	}
	return n
}

// waited records the peer's report that a message waited for an earlier one.
func (w *windowPolicy) waited() {
	w.strictUntil.Store(time.Now().Add(strictFor).UnixNano())
	if w.gauge != nil && w.fixed == 0 {
		w.gauge.Set(1)
	}
}

// relax ends a strict period early.
func (w *windowPolicy) relax() {
	w.strictUntil.Store(0)
	if w.gauge != nil && w.fixed == 0 {
		w.gauge.Set(autoWindowWide)
	}
}

// errLaneBusy means the sequenced lane has a message in flight.
var errLaneBusy = errors.New("sequenced lane busy")

func newConn(qc *quicgo.Conn, cfg *tunnel.Config, m *Metrics, label string, log *slog.Logger) *conn {
	c := &conn{qc: qc, cfg: cfg, label: label, m: m.conn(label, cfg.CodecName), log: log}
	c.goAwayCh = make(chan struct{})
	c.enc.fresh = true
	c.decodes = c.peerDecodes
	c.window.fixed = 1
	c.prober.init(c)
	c.ackTimer = time.AfterFunc(time.Hour, c.sendPendingAck)
	c.ackTimer.Stop()
	c.creditTimer = time.AfterFunc(time.Hour, func() { c.releaseCredit(c.srtt() + maxAckDelay) })
	c.creditTimer.Stop()
	c.haveTimer = time.AfterFunc(time.Hour, func() { c.sendPendingHave(1) })
	c.haveTimer.Stop()
	return c
}

// hello is what this side announces on the control stream.
func (c *conn) hello(maxStreams int64) frame.Hello {
	h := frame.Hello{Proto: 1, Node: c.cfg.Node, Codecs: frame.CodecIDs{0}, MaxFrame: 64 << 10, Window: 1 << 20, MaxStreams: uint32(max(maxStreams, 1)),
		Copies: c.redundancy.helloCopies(), Have: !c.server}
	if c.divert {
		h.Divert = frame.DivertTCP
	}
	if c.cfg.Instance != nil {
		h.Instance = c.cfg.Instance()
	}
	if len(c.cfg.Codecs) > 0 {
		h.MaxCoded = uint32(c.cfg.MaxCodedMessage)
		h.Formats = map[string]uint32{}
		for _, mc := range c.cfg.Codecs {
			h.Codecs = append(h.Codecs, mc.ID())
			h.Formats[fmt.Sprint(mc.ID())] = mc.Format()
		}
		if sc := c.cfg.StreamCodec; sc != nil {
			h.Codecs = append(h.Codecs, sc.ID())
			h.Formats[fmt.Sprint(sc.ID())] = sc.Format()
		}
	}
	return h
}

// helloMessage is this side's HELLO as written on the control stream.
func (c *conn) helloMessage(maxStreams int64) []byte {
	h := frame.AppendHello(nil, c.hello(maxStreams))
	return append(binary.AppendUvarint(nil, uint64(len(h))), h...)
}

// exchangeHellos sends ours and reads the peer's on the control stream, and settles the
// codecs both sides decode. br reads the control stream (it may hold bytes after HELLO).
func (c *conn) exchangeHellos(br *bufio.Reader, maxStreams int64) error {
	if _, err := c.ctrl.Write(c.helloMessage(maxStreams)); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	return c.readHello(br)
}

// readHello reads the peer's HELLO and settles the codecs both sides decode.
func (c *conn) readHello(br *bufio.Reader) error {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	if n > frame.MaxHello {
		return fmt.Errorf("hello of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	if c.peer, err = frame.ParseHello(b); err != nil {
		return err
	}
	c.maxCoded = min(c.cfg.MaxCodedMessage, int(c.peer.MaxCoded))
	if sc := c.cfg.StreamCodec; sc != nil && len(c.cfg.Codecs) > 0 && c.peer.FormatOf(sc.ID()) == sc.Format() && slices.Contains(c.peer.Codecs, sc.ID()) {
		c.streamOut = sc
	}
	for _, mc := range c.cfg.Codecs {
		id := mc.ID()
		if id > maxCodecID || c.peer.FormatOf(id) != mc.Format() {
			continue
		}
		for _, pid := range c.peer.Codecs {
			if pid == id {
				c.codecs[id] = mc
				s, ok := mc.(interface{ Stateless() bool })
				c.stateless[id] = ok && s.Stateless()
			}
		}
	}
	return nil
}

// peerDecodes reports whether a message may be sent in codec id.
func (c *conn) peerDecodes(id uint8) bool {
	return id == 0 || (id <= maxCodecID && c.codecs[id] != nil)
}

// coding reports whether messages on this connection are worth buffering to code.
func (c *conn) coding(e tunnel.Encoding) bool { return e != nil && c.maxCoded > 0 }

// encode codes a whole message, appended to dst, for the head h it returns: sequenced when
// the chosen codec keeps state and the lane is free, otherwise stateless, otherwise
// identity (h.Codec 0, dst returned as it came). A bulk message (Stream.SetBulk) waits for
// room in the lane instead, until at the latest.
func (c *conn) encode(st *Stream, e tunnel.Encoding, dst, raw []byte, bulk bool, until time.Time) (head, []byte) {
	if e == nil || len(raw) > c.maxCoded {
		return head{}, dst
	}
	id := e.Choose(raw, c.decodes)
	if id != 0 && c.peerDecodes(id) && !c.stateless[id] {
		h, p, err := c.encodeSequenced(st, id, dst, raw, bulk, until)
		if err == nil {
			return h, p
		}
		if errors.Is(err, errLaneBusy) {
			c.m.laneBusy.Inc()
		}
		// Another message holds the lane: code this one on its own.
		id = e.Choose(raw, func(id uint8) bool { return id == 0 || (c.peerDecodes(id) && c.stateless[id]) })
	}
	if id == 0 || !c.peerDecodes(id) || !c.stateless[id] {
		return head{}, dst
	}
	enc, _ := c.encPools[id].Get().(tunnel.MessageEncoder)
	if enc == nil {
		var err error
		if enc, err = c.codecs[id].NewEncoder(); err != nil {
			return head{}, dst
		}
	}
	p, err := enc.Encode(dst, raw)
	if err != nil {
		return head{}, dst // a stateless encoder has no state to lose; it stays usable
	}
	c.encPools[id].Put(enc)
	return head{Codec: id, Mode: modeStateless, RawLen: uint64(len(raw))}, p
}

// bulkWindow is the default window of bulk messages (Stream.SetBulk): how many
// unacknowledged messages one may be coded behind. As many as the edge delivers at once
// and a connection carries (1,024 each): with 256, deliveries on gprs were held to 256
// per loaded round trip (3-4 s behind a full queue), about 55 a second. The messages
// waiting at the receiver for an earlier one's resend are the edge's deliveries in flight,
// at most 32 MiB (proxy's maxInFlightBytes); the origin's answers to them are empty.
const bulkWindow = 1024

// bulkSize is the window of bulk messages.
func (w *windowPolicy) bulkSize() uint64 {
	if w.bulk > 0 {
		return w.bulk
	}
	return bulkWindow
}

func (c *conn) encodeSequenced(st *Stream, id uint8, dst, raw []byte, bulk bool, until time.Time) (head, []byte, error) {
	l := &c.enc
	l.mu.Lock()
	defer l.mu.Unlock()
	window := c.window.size()
	if bulk {
		window = max(window, c.window.bulkSize())
		c.waitRoom(window, until)
	}
	if l.sent-l.acked >= window {
		if time.Since(l.sentAt) < c.lossWait() {
			return head{}, nil, errLaneBusy
		}
		l.acked, l.fresh = l.sent, true // never answered: assume lost, start over
		l.wake(window)
		l.settle(false)
	}
	if !l.fresh && l.e != nil && l.codec != id && l.sent > l.acked {
		// Another codec's messages are unacknowledged: a fresh state now could overtake
		// them, and the receiver, past their numbers, would refuse them (each exchange
		// then collected by a resume, a round trip more). A fresh message has no
		// history to gain from anyway: this one goes stateless, and the lane switches
		// once it has drained.
		return head{}, nil, errLaneBusy
	}
	mode := uint8(modeSequenced)
	if l.fresh || l.codec != id || l.e == nil {
		e, err := c.codecs[id].NewEncoder()
		if err != nil {
			return head{}, nil, err
		}
		l.e, l.codec, l.fresh, mode = e, id, false, modeFresh
		// A fresh message that overtook unacknowledged ones before it would make the
		// receiver refuse them while its acknowledgement covered their numbers. A codec
		// switch waits for the lane to drain and a give-up settles it, but after an
		// encoding error some may remain: no acknowledgement from here on tells them
		// delivered.
		clear(l.awaiting)
		l.awaiting = nil
	}
	p, err := l.e.Encode(dst, raw)
	if err != nil {
		l.fresh = true // its state may be half-updated
		return head{}, nil, err
	}
	l.sent++
	l.sentAt = time.Now()
	l.awaiting = append(l.awaiting, awaitingAck{l.sent, st})
	return head{Codec: id, Mode: mode, Seq: l.sent, RawLen: uint64(len(raw)), CRC: crc32.Checksum(raw, castagnoli)}, p, nil
}

// waitRoom waits, with the lane's lock released, until fewer than window messages are
// unacknowledged, the lane may be given up (lossWait after the last message was sent),
// until passes (the exchange's deadline, if set) or the connection ends. A bulk message
// waits so rather than going stateless: nobody waits on it, and coded on the shared state
// it costs a fraction of the bytes. Called with c.enc.mu held.
func (c *conn) waitRoom(window uint64, until time.Time) {
	l := &c.enc
	for l.sent-l.acked >= window {
		end := l.sentAt.Add(c.lossWait())
		if !until.IsZero() && until.Before(end) {
			end = until
		}
		d := time.Until(end)
		if d <= 0 {
			return
		}
		woken := make(chan struct{})
		l.waiters = append(l.waiters, woken)
		l.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-woken:
		case <-t.C:
		case <-c.done():
		}
		t.Stop()
		l.mu.Lock()
		if i := slices.Index(l.waiters, woken); i >= 0 {
			l.waiters = slices.Delete(l.waiters, i, i+1) // gave up before its turn
		}
		if c.err() != nil {
			return
		}
	}
}

// lost releases the lane of a sequenced message that never reached the peer's decoder.
func (c *conn) lost(seq uint64) {
	l := &c.enc
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq > l.acked && seq <= l.sent {
		// Every later message was coded on state that includes seq: start over.
		l.wake(l.sent - l.acked)
		l.acked, l.fresh = l.sent, true
		l.settle(false)
	}
}

// onAck records that the peer decoded sequenced messages up to seq.
func (c *conn) onAck(seq uint64) {
	l := &c.enc
	l.mu.Lock()
	var done []awaitingAck
	if seq > l.acked && seq <= l.sent {
		l.wake(seq - l.acked)
		l.acked = seq
		done = l.settle(true)
	}
	l.mu.Unlock()
	for _, a := range done {
		a.st.delivered.Fire()
	}
}

// onNack records that the peer could not decode seq: the next message starts fresh.
func (c *conn) onNack(seq uint64) {
	c.m.nacks.WithLabelValues("received").Inc()
	c.lost(seq)
}

// decode turns a received coded message back into its bytes. A sequenced one must be the
// next of the peer's lane (or fresh); it is acknowledged once decoded.
func (c *conn) decode(h head, payload []byte) ([]byte, error) {
	if !c.peerDecodes(h.Codec) || h.Codec == 0 {
		return nil, fmt.Errorf("%w: codec %d was not agreed", ErrBadHead, h.Codec)
	}
	if h.RawLen > uint64(c.cfg.MaxCodedMessage) {
		return nil, fmt.Errorf("coded message of %d bytes exceeds max_coded %d", h.RawLen, c.cfg.MaxCodedMessage)
	}
	if !h.sequenced() {
		if !c.stateless[h.Codec] {
			return nil, fmt.Errorf("%w: codec %d keeps state and cannot be sent stateless", ErrBadHead, h.Codec)
		}
		d, _ := c.decPools[h.Codec].Get().(tunnel.MessageDecoder)
		if d == nil {
			var err error
			if d, err = c.codecs[h.Codec].NewDecoder(c.cfg.MaxCodedMessage); err != nil {
				return nil, err
			}
		}
		msg, err := d.Decode(make([]byte, 0, h.RawLen), payload)
		if err != nil {
			return nil, err // a decoder that failed is dropped
		}
		c.decPools[h.Codec].Put(d)
		if uint64(len(msg)) != h.RawLen {
			return nil, fmt.Errorf("decoded %d bytes, head says %d", len(msg), h.RawLen)
		}
		return msg, nil
	}
	msg, err := c.decodeSequenced(h, payload)
	if err != nil {
		c.m.nacks.WithLabelValues("sent").Inc()
		c.sendCtrl(ctrlNack, binary.AppendUvarint(nil, h.Seq))
		return nil, err
	}
	c.scheduleAck()
	return msg, nil
}

func (c *conn) decodeSequenced(h head, payload []byte) ([]byte, error) {
	l := &c.dec
	l.mu.Lock()
	defer l.mu.Unlock()
	if h.Mode != modeFresh && !l.broken && h.Seq > l.done.Load()+1 {
		if err := c.waitTurn(h.Seq); err != nil {
			c.setDecoded(l.done.Load(), true)
			return nil, err
		}
	}
	done := l.done.Load()
	switch {
	case h.Seq <= done:
		return nil, fmt.Errorf("sequenced message %d already decoded", h.Seq)
	case h.Mode == modeFresh:
		d, err := c.codecs[h.Codec].NewDecoder(c.cfg.MaxCodedMessage)
		if err != nil {
			return nil, err
		}
		l.d, l.codec, l.broken = d, h.Codec, false
	case l.broken || l.d == nil || h.Seq != done+1 || h.Codec != l.codec:
		c.setDecoded(done, true)
		return nil, fmt.Errorf("sequenced message %d (codec %d) does not follow %d (codec %d)", h.Seq, h.Codec, done, l.codec)
	}
	msg, err := l.d.Decode(make([]byte, 0, h.RawLen), payload)
	if err == nil && uint64(len(msg)) != h.RawLen {
		err = fmt.Errorf("decoded %d bytes, head says %d", len(msg), h.RawLen)
	}
	if err == nil && crc32.Checksum(msg, castagnoli) != h.CRC {
		err = fmt.Errorf("checksum mismatch: codec state out of step")
	}
	if err != nil {
		c.setDecoded(done, true)
		return nil, err
	}
	c.setDecoded(h.Seq, false)
	return msg, nil
}

// waitTurn waits, with the lane's lock released, until the message before seq is decoded
// or the lane broke, for at most lossWait. Called with c.dec.mu held.
func (c *conn) waitTurn(seq uint64) error {
	l := &c.dec
	c.m.decodeWaits.Inc()
	start := time.Now()
	wait := c.lossWait()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	defer func() {
		d := time.Since(start)
		c.m.decodeWaitSeconds.Add(d.Seconds())
		// A wait is loss recovery when the message before this one had not even begun
		// to arrive for longWait: its first packet was lost. When it had begun, the wait
		// was its later packets coming in behind other streams' (serialization on a slow
		// link), which a strict window would not help.
		if t0, ok := c.heads.at(seq - 1); d >= longWait && (!ok || t0.Sub(start) >= longWait) {
			c.reportWait(d)
		}
	}()
	for !l.broken && seq > l.done.Load()+1 {
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			l.mu.Lock()
			return fmt.Errorf("sequenced message %d waited %s for message %d", seq, wait, l.done.Load()+1)
		case <-c.done():
			l.mu.Lock()
			return c.err()
		}
		l.mu.Lock()
	}
	return nil
}

// headTimes remembers when the heads of recent sequenced messages arrived.
type headTimes struct {
	mu  sync.Mutex
	seq [128]uint64
	t   [128]time.Time
}

func (h *headTimes) note(seq uint64) {
	h.mu.Lock()
	h.seq[seq%128], h.t[seq%128] = seq, time.Now()
	h.mu.Unlock()
}

func (h *headTimes) at(seq uint64) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seq[seq%128] != seq {
		return time.Time{}, false
	}
	return h.t[seq%128], true
}

// reportWait tells the sender that a message waited d for an earlier one (rate-limited),
// so an auto window turns strict.
func (c *conn) reportWait(d time.Duration) {
	now := time.Now().UnixNano()
	last := c.lastWaited.Load()
	if now-last < int64(waitedEvery) || !c.lastWaited.CompareAndSwap(last, now) {
		return
	}
	// Sent by the ack timer's goroutine: not here, under the lane's lock.
	c.m.waitedReports.Inc()
	c.waitedPending.Store(uint64(max(d/time.Millisecond, 1)))
	c.ackTimer.Reset(0)
}

// setDecoded records the lane's progress and wakes messages waiting their turn. Called
// with c.dec.mu held.
func (c *conn) setDecoded(done uint64, broken bool) {
	l := &c.dec
	l.done.Store(done)
	l.broken = broken
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// takeAck returns the acknowledgement an outgoing message head should carry, if any.
func (c *conn) takeAck() (uint64, bool) {
	done := c.dec.done.Load()
	c.ackMu.Lock()
	defer c.ackMu.Unlock()
	if done <= c.ackSent {
		return 0, false
	}
	c.ackSent = done
	return done, true
}

func (c *conn) scheduleAck() { c.ackTimer.Reset(ackDelay) }

// sendPendingAck sends a control ACK for what no message head has carried, and a
// pending WAITED notice.
func (c *conn) sendPendingAck() {
	if ms := c.waitedPending.Swap(0); ms > 0 {
		c.sendCtrl(ctrlWaited, binary.AppendUvarint(nil, ms))
	}
	if seq, ok := c.takeAck(); ok {
		c.m.ctrlAcks.Inc()
		c.sendCtrl(ctrlAck, binary.AppendUvarint(nil, seq))
	}
}

// sendCtrl writes one control frame. A failure means the connection is going down.
func (c *conn) sendCtrl(typ byte, payload []byte) {
	b := appendCtrl(nil, typ, payload)
	c.ctrlMu.Lock()
	defer c.ctrlMu.Unlock()
	_ = c.ctrl.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.ctrl.Write(b); err != nil {
		c.close(closeProtocol, "control stream write failed")
	}
}

// readControl runs on its own goroutine until the control stream ends.
func (c *conn) readControl(br *bufio.Reader) {
	defer c.wg.Done()
	buf := make([]byte, 0, 64)
	for {
		typ, payload, err := readCtrl(br, buf)
		switch {
		case errors.Is(err, ErrBadHead):
			c.close(closeProtocol, err.Error())
			return
		case err != nil:
			c.close(closeNormal, "control stream closed")
			return
		}
		switch typ {
		case ctrlAck, ctrlNack:
			seq, err := parseSeq(payload)
			if err != nil {
				c.close(closeProtocol, err.Error())
				return
			}
			if typ == ctrlAck {
				c.onAck(seq)
			} else {
				c.onNack(seq)
			}
		case ctrlWaited:
			ms, err := parseSeq(payload)
			if err != nil {
				c.close(closeProtocol, err.Error())
				return
			}
			c.onWaited(time.Duration(ms) * time.Millisecond)
		case ctrlAbandon:
			id, err := parseSeq(payload)
			if err != nil {
				c.close(closeProtocol, err.Error())
				return
			}
			c.onAbandon(quicgo.StreamID(id))
		case ctrlReceived:
			n, err := parseSeq(payload)
			if err != nil {
				c.close(closeProtocol, err.Error())
				return
			}
			c.onReceivedReport(n)
		case ctrlHave:
			if err := c.onHave(payload); err != nil {
				c.close(closeProtocol, err.Error())
				return
			}
		case ctrlCarry: // its packet did the work (it carried QUIC's acknowledgement)
		case ctrlPing: // its packet did the work (it came from the edge's current address, or after a lost one)
			c.onPing()
		case ctrlGoAway:
			c.goingAway.Store(true)
			c.goAwayOne.Do(func() { close(c.goAwayCh) })
		default: // unknown frames are ignored, so later versions may add some
		}
	}
}

// A finished exchange's stream credit waits for a later response to ride on: quic-go
// sends MAX_STREAMS the moment a stream is both released and complete (the edge has
// acknowledged the whole response), so a credit released before the acknowledgement came
// back leaves in a packet of its own when it does, and that extra packet makes the edge
// acknowledge at once instead of with its next request: two packets more per exchange,
// and on a slow link a request queued behind an ACK.
//
// So a response releases only the credit that is ripe: held for about a round trip
// (creditRipe), by when the edge's acknowledgement of that exchange's response has most
// likely come back; younger credit waits for a later response. With sequential calls the
// next response comes a round trip after the last one and takes all; with many exchanges
// at once (one-way deliveries from a spool) each response takes those a round trip old.
// When no response follows, creditTimer releases, two round trips after (creditDelay),
// what is surely complete by then (held a round trip and the edge's ACK delay), so an
// idle connection sends one MAX_STREAMS for many; at maxHeldCredit the oldest go anyway.
const (
	minCreditDelay = 50 * time.Millisecond
	maxCreditDelay = 5 * time.Second
	maxHeldCredit  = 256
)

type heldCredit struct {
	qs streamIO
	at time.Time // when the exchange finished
}

// creditDelay is how long held credit waits for a response to ride on.
func (c *conn) creditDelay() time.Duration {
	return min(max(minCreditDelay, 2*c.srtt()), maxCreditDelay)
}

// creditRipe is how long credit is held before a response may take it.
func (c *conn) creditRipe() time.Duration { return c.srtt() * 3 / 4 }

// holdCredit keeps the credit of a finished exchange's stream for a later response.
func (c *conn) holdCredit(qs streamIO) {
	c.creditMu.Lock()
	c.credit = append(c.credit, heldCredit{qs, time.Now()})
	n := len(c.credit)
	c.creditMu.Unlock()
	if n >= maxHeldCredit {
		c.releaseCredit(c.creditRipe())
		return
	}
	if n == 1 {
		c.creditTimer.Reset(c.creditDelay())
	}
}

// releaseCredit gives the edge back the streams of exchanges that finished at least age
// ago, and the oldest beyond maxHeldCredit/2.
func (c *conn) releaseCredit(age time.Duration) {
	c.creditMu.Lock()
	ripe := time.Now().Add(-age)
	n := 0
	for n < len(c.credit) && !c.credit[n].at.After(ripe) {
		n++
	}
	n = max(n, len(c.credit)-maxHeldCredit/2)
	var few [8]heldCredit // most calls release one or two: no allocation
	held := append(few[:0], c.credit[:n]...)
	c.credit = slices.Delete(c.credit, 0, n)
	rest := len(c.credit)
	c.creditMu.Unlock()
	if rest > 0 {
		c.creditTimer.Reset(c.creditDelay())
	}
	for _, h := range held {
		h.qs.ReleaseStreamCredit()
	}
}

// close ends the connection once; every stream on it fails.
func (c *conn) close(code quicgo.ApplicationErrorCode, why string) {
	c.closeOnce.Do(func() {
		c.ackTimer.Stop()
		c.creditTimer.Stop()
		c.haveTimer.Stop()
		c.prober.timer.Stop()
		_ = c.qc.CloseWithError(code, why)
	})
}

// done is closed when the connection is gone.
func (c *conn) done() <-chan struct{} { return c.qc.Context().Done() }

// alive reports whether new exchanges may start on c.
func (c *conn) alive() bool { return c.qc.Context().Err() == nil && !c.goingAway.Load() }

// background runs f in a goroutine the connection owns (wait waits for it), unless the
// connection is closing or gone: then its streams and codec state are gone anyway.
func (c *conn) background(f func()) {
	c.wgMu.Lock()
	defer c.wgMu.Unlock()
	if c.closing || c.qc.Context().Err() != nil {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// drain reads and decodes the sequenced message of a stream nobody will read, so the
// codec lanes stay in step, bounded by the exchange's own deadline.
func (c *conn) drain(st *Stream) {
	c.background(func() {
		_ = st.qs.SetReadDeadline(time.Now().Add(30 * time.Second))
		if err := st.readMessageHead(); err == nil && !st.rhead.sequenced() {
			st.qs.CancelRead(codeCancelled)
		}
	})
}

// srtt is the path's smoothed RTT (0 before a sample).
func (c *conn) srtt() time.Duration { return c.qc.ConnectionStats().SmoothedRTT }

// wait waits for the connection's goroutines after close.
func (c *conn) wait() {
	c.wgMu.Lock()
	c.closing = true
	c.wgMu.Unlock()
	c.wg.Wait()
}

// ctxErr maps a connection context's cause to an error for callers.
func (c *conn) err() error {
	if err := context.Cause(c.qc.Context()); err != nil {
		return connLost(err)
	}
	return nil
}
