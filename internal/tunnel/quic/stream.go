package quic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/soapgw/soapgw/internal/tunnel"
	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// Stream is one exchange: the request message one way, the response the other, each
// opened by a head (SPEC.md). It satisfies the proxy's Stream interface.
//
// Writing: a message that may be coded is buffered whole (up to the agreed max_coded)
// and at CloseWrite coded and written with its head in one write, so it leaves in as few
// packets as it can. A larger or flushed message streams as identity. Reading: the head
// tells how the message travels; a coded one is read whole and decoded before the first
// byte is returned.
type Stream struct {
	c      *conn
	qs     streamIO
	server bool // accepted by the origin: its credit is released late (conn.holdCredit)

	dlMu sync.Mutex
	dl   time.Time // the deadline the owner set (a copy's arrival interrupts reads early)

	// Copies (redundant.go): offer stores one, the reader takes it unless the message's
	// head came from the stream first (gotHead).
	cmu     sync.Mutex
	copyMsg []byte
	gotHead atomic.Bool
	byCopy  bool // the message came in a copy: the stream's own bytes are never read

	released atomic.Bool // Close was called
	// headIn: the incoming message's head was read (hasHead, readable without rmu, which
	// a blocked Read holds). abandonSent: the edge sent ABANDON for this exchange.
	headIn, abandonSent atomic.Bool

	wmu       sync.Mutex
	encoding  tunnel.Encoding
	buf       []byte  // the message while it may still be coded
	rawBox    *[]byte // buf's backing array came from rawPool in this box (nil: not pooled)
	streaming bool    // the message streams: writes pass through (coded by senc if set)
	wclosed   bool
	bulk      bool                 // SetBulk: may be coded behind a full window
	werr      error                // a streamed message's encoder failed: every later write fails with it
	senc      tunnel.StreamEncoder // codes the streaming message (zstd-streaming)
	sw        streamedSink         // senc's output, into the QUIC stream
	sraw      int                  // message bytes given to senc

	rmu       sync.Mutex
	rhead     head
	hasHead   bool
	rbuf      []byte // decoded message, or identity bytes read along with the head
	roff      int
	rdone     bool                 // the whole message has been read (EOF seen)
	rcount    int                  // identity bytes read, for metrics
	rerr      error                // sticky read error
	rdec      tunnel.StreamDecoder // decodes a streamed message as it is read
	rsrc      *streamedSource      // rdec's input: the QUIC stream after the head
	rraw      int                  // decoded bytes of a streamed message
	haveNoted bool                 // edge: reported for HAVE (have.go)
	closed    bool
	onClose   func() // the owner's bookkeeping, once

	// Abandonment by the edge (origin streams, AfterFail): abandon fires failed.
	failMu      sync.Mutex
	failed      tunnel.Notice // fires when the edge abandons the exchange (AfterFail)
	failWatched bool          // AfterFail was called: watch for STOP_SENDING once the message streams
	stopWatch   func() bool   // ends the watch for the edge's STOP_SENDING
	// outStreaming: bytes of the outgoing message went on the QUIC stream before its end.
	outStreaming atomic.Bool
	// delivered fires when the peer acknowledged decoding the outgoing sequenced message
	// (AfterDelivered); cancelled when the edge abandons the exchange.
	delivered tunnel.Notice
}

func newStream(c *conn, qs streamIO, onClose func()) *Stream {
	c.streams.Add(1)
	c.m.streams.Inc()
	return &Stream{c: c, qs: qs, encoding: c.cfg.Encoding, onClose: onClose}
}

// PeerInstance is the instance the peer named in its HELLO (empty if it named none): the
// process at the other end of this stream's connection.
func (st *Stream) PeerInstance() string { return st.c.peer.Instance }

// DivertLarge reports whether the origin should send a large response on this stream's
// connection over the edge's TCP tunnel instead: the edge said in its HELLO that it keeps
// one beside (PeerConfig.Divert), and this side's packets are being lost at the rate that
// turns redundancy auto's copies on, or it is too early to tell (conn.bulkAtRisk). QUIC's
// congestion control (NewReno in quic-go, not replaceable) then holds a bulk transfer to
// about MSS/RTT x 1.22/sqrt(loss): 1.1 MB/s at 1 % loss on a 14 ms path, where the
// kernel's TCP with BBR keeps tens of MB/s; a small message gains nothing from moving and
// stays.
func (st *Stream) DivertLarge() bool {
	return st.c.peer.Divert == frame.DivertTCP && st.c.bulkAtRisk()
}

// SetEncoding overrides the connection's codec policy for this stream's outgoing message.
func (st *Stream) SetEncoding(e tunnel.Encoding) {
	st.wmu.Lock()
	st.encoding = e
	st.wmu.Unlock()
}

// Write appends to the outgoing message.
func (st *Stream) Write(p []byte) (int, error) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.werr != nil {
		return 0, st.werr
	}
	if st.wclosed {
		return 0, tunnel.ErrWriteClosed
	}
	if st.streaming {
		if st.senc != nil {
			return st.writeStreamed(p)
		}
		n, err := st.qs.Write(p)
		return n, st.mapErr(err)
	}
	if len(st.buf)+len(p) > st.bufferLimit() {
		if err := st.startStreaming(p); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if st.buf == nil {
		st.rawBox = rawPool.Get().(*[]byte)
		st.buf = (*st.rawBox)[:0]
	}
	st.buf = append(st.buf, p...)
	return len(p), nil
}

// rawPool holds the buffers outgoing messages are gathered in until CloseWrite codes
// them (an exchange's message grew a new one in a few steps), and those incoming coded
// messages are read into until decoded. Boxed, so a buffer goes back without allocating
// its slice header.
var rawPool = sync.Pool{New: func() any { b := make([]byte, 0, rawBufSize); return &b }}

const (
	rawBufSize   = 4 << 10  // most SOAP messages fit
	maxPooledRaw = 64 << 10 // larger buffers are left to the collector
)

// releaseRaw gives raw, the gathered message nobody refers to any more, back to
// rawPool. Called with wmu held.
func (st *Stream) releaseRaw(raw []byte) {
	if st.rawBox == nil {
		return
	}
	if cap(raw) <= maxPooledRaw {
		*st.rawBox = raw[:0]
		rawPool.Put(st.rawBox)
	}
	st.rawBox = nil
}

// SetBulk marks the outgoing message as bulk: nobody waits on its latency (a one-way
// message delivered from the edge's spool). It is then coded on the shared codec state
// even while the window is full, behind up to 1,024 unacknowledged messages, so it may
// wait at the receiver for an earlier message's lost packets (SPEC.md, "Codec state");
// other messages keep the window and are never held up behind it. Without this, the
// deliveries of a spool that many at once went stateless on a lossy path (the window is 1
// there): 7x the bytes of the TCP tunnel on gprs, and as many times fewer per second.
func (st *Stream) SetBulk() {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	st.bulk = true
}

// bufferLimit is the largest message kept whole until CloseWrite: one that may be coded,
// or copied (redundant.go): copies are being sent, or this is the answer of an exchange
// started from a copy (the answer's copy is its only way out until the stream comes).
// Others stream as they are written.
func (st *Stream) bufferLimit() int {
	n := 0
	if st.c.coding(st.encoding) {
		n = st.c.maxCoded
	}
	if _, early := st.qs.(*pendingStream); early || st.c.copyNow(st.bulk) {
		n = max(n, maxCopy)
	}
	return n
}

// Flush sends what is buffered now: the message then streams (coded as it goes by the
// stream codec where both sides have it, else as identity).
func (st *Stream) Flush() error {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.werr != nil {
		return st.werr
	}
	if st.wclosed {
		return nil
	}
	if !st.streaming {
		if err := st.startStreaming(nil); err != nil {
			return err
		}
	}
	if st.senc == nil {
		return nil
	}
	if err := st.senc.Flush(); err != nil {
		return st.encodeErr(err)
	}
	return st.sw.flushHead()
}

// startStreaming sends the head with the buffered bytes and p: coded by the stream codec
// if the peer has it and the Encoding codes the message, else as identity.
func (st *Stream) startStreaming(p []byte) error {
	if err := st.c.err(); err != nil {
		st.qs.CancelWrite(codeCancelled)
		return &notSentError{err}
	}
	if st.server {
		st.c.releaseCredit(st.c.creditRipe())
		st.outStreaming.Store(true)
		st.failMu.Lock()
		if st.failWatched {
			st.watchStopSendingLocked()
		}
		st.failMu.Unlock()
	}
	if sc := st.c.streamOut; sc != nil && st.c.coding(st.encoding) {
		if id := st.encoding.Choose(tunnel.StreamStart(st.buf, p), st.c.decodes); id != 0 && st.c.peerDecodes(id) {
			st.sw = streamedSink{st: st, head: st.appendHead(make([]byte, 0, maxHeadLen), head{Codec: sc.ID(), Mode: modeStreamed})}
			enc, err := sc.NewStreamEncoder(&st.sw)
			if err == nil {
				st.senc, st.streaming = enc, true
				buf := st.buf
				st.buf = nil
				if _, err := st.writeStreamed(buf); err != nil {
					return err
				}
				_, err := st.writeStreamed(p)
				return err
			}
			// Every encoder in use (the stream codec bounds its memory): uncoded this time.
			st.c.log.Debug("no stream encoder; the message streams uncoded", "peer", st.c.label, "err", err)
		}
	}
	b := st.appendHead(make([]byte, 0, maxHeadLen+len(st.buf)+len(p)), head{})
	b = append(append(b, st.buf...), p...)
	st.c.m.message("sent", 0, modeStateless, len(st.buf)+len(p), len(st.buf)+len(p))
	st.buf, st.streaming = nil, true
	_, err := st.qs.Write(b)
	return st.mapErr(err)
}

// writeStreamed codes p into the streaming message.
func (st *Stream) writeStreamed(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	st.sraw += len(p)
	if _, err := st.senc.Write(p); err != nil {
		return 0, st.encodeErr(err)
	}
	return len(p), nil
}

// encodeErr is the error of a write after the stream encoder failed: the QUIC stream's
// own (mapped), or the encoder's, which cancels the message (half sent, it cannot be
// sent again).
func (st *Stream) encodeErr(err error) error {
	if st.senc != nil { // the message ends here: the encoder goes back now
		st.senc.Release()
		st.senc = nil
	}
	if st.sw.err != nil {
		st.werr = st.mapErr(st.sw.err)
	} else {
		st.qs.CancelWrite(codeCancelled)
		st.werr = fmt.Errorf("quic tunnel: coding a streamed message: %w", err)
	}
	return st.werr
}

// streamedSink writes a stream encoder's output to the QUIC stream, the message head
// with the first bytes (one packet, not two).
type streamedSink struct {
	st    *Stream
	head  []byte // not sent yet
	coded int    // bytes written after the head
	err   error  // the first write error
}

func (w *streamedSink) Write(b []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	out := b
	if w.head != nil {
		out = append(w.head, b...)
		w.head = nil
	}
	if _, err := w.st.qs.Write(out); err != nil {
		w.err = err
		return 0, err
	}
	w.coded += len(b)
	return len(b), nil
}

// flushHead sends the head if no coded byte carried it yet (a flush of an empty message).
func (w *streamedSink) flushHead() error {
	if w.head == nil || w.err != nil {
		return w.st.mapErr(w.err)
	}
	_, err := w.Write(nil)
	return w.st.mapErr(err)
}

// frameMessage codes raw and returns the message as it goes on the stream, its head and
// the length of its payload (raw's when it travels uncoded). The payload is coded into
// the one buffer the message is sent from, after room for the head, and the head is
// written into that room: coding into a buffer of its own grew it a few times per
// message, and joining head and payload copied it once more. b shares nothing with raw.
func (st *Stream) frameMessage(raw []byte) (b []byte, h head, payloadLen int) {
	buf := make([]byte, maxHeadLen, maxHeadLen+len(raw)+codedSlack)
	h, payload := st.c.encode(st, st.encoding, buf[maxHeadLen:], raw, st.bulk, st.deadline())
	if h.Codec == 0 {
		payload = append(payload[:0], raw...)
	}
	var hb [maxHeadLen]byte
	hd := st.appendHead(hb[:0], h)
	if cap(payload) != cap(buf)-maxHeadLen { // the coder outgrew the buffer
		b = append(append(make([]byte, 0, len(hd)+len(payload)), hd...), payload...)
	} else {
		start := maxHeadLen - len(hd)
		copy(buf[start:], hd)
		b = buf[start : maxHeadLen+len(payload)]
	}
	return b, h, len(payload)
}

// codedSlack is how far past its raw size frameMessage lets a coded message grow before
// it needs a buffer of its own (incompressible bytes cost a codec a little more).
const codedSlack = 64

// appendHead appends h with any acknowledgement due to the peer.
func (st *Stream) appendHead(dst []byte, h head) []byte {
	h.Ack, h.HasAck = st.c.takeAck()
	return h.append(dst)
}

// CloseWrite ends the outgoing message: a buffered one is coded and sent now.
func (st *Stream) CloseWrite() error {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.werr != nil {
		return st.werr
	}
	if st.wclosed {
		return nil
	}
	st.wclosed = true
	st.c.maybeReport()
	st.c.sendPendingHave(haveFlushMin) // the HAVE ids pending ride along with this message
	if st.streaming {
		if st.senc != nil {
			err := st.senc.Close()
			if err == nil {
				err = st.sw.flushHead()
			}
			st.senc.Release()
			st.senc = nil
			if err != nil {
				return st.encodeErr(err)
			}
			st.c.m.message("sent", st.c.streamOut.ID(), modeStreamed, st.sraw, st.sw.coded)
		}
		if st.server {
			st.c.awaitHave(st) // a streamed message: no ACK covers it (before its end goes: see awaitHave)
		}
		err := st.qs.Close()
		if err == nil {
			st.c.prober.sent(st, false)
		} else if st.server {
			st.c.forgetHave(st)
		}
		return st.mapErr(err)
	}
	raw := st.buf
	st.buf = nil
	if err := st.c.err(); err != nil {
		// Nothing of this exchange was sent: the edge may retry it on another connection.
		st.qs.CancelWrite(codeCancelled)
		return &notSentError{err}
	}
	b, h, payloadLen := st.frameMessage(raw)
	st.releaseRaw(raw) // coded or copied into b
	st.c.m.message("sent", h.Codec, h.Mode, len(raw), payloadLen)
	if st.server {
		st.c.releaseCredit(st.c.creditRipe())
	}
	awaited := st.server && !h.sequenced()
	if awaited {
		st.c.awaitHave(st) // no ACK covers it (before it goes: see awaitHave)
	}
	var err error
	switch hook := testWriteHook.Load(); {
	case hook != nil:
		if err = (*hook)(h, b, st.qs); err == nil {
			err = st.qs.Close()
		}
	case st.bulk && st.c.holdsBulk():
		err = st.c.bulk.write(st.qs, b) // with the bulk messages of the next few ms (bulkhold.go)
	default:
		if _, err = st.qs.Write(b); err == nil {
			err = st.qs.Close()
		}
	}
	if err != nil && h.sequenced() {
		st.c.lost(h.Seq)
	}
	if err != nil && awaited {
		st.c.forgetHave(st)
	}
	copied := false
	if err == nil && st.c.copiesOn() && len(b) <= maxCopy {
		_, early := st.qs.(*pendingStream)
		switch {
		case early:
			st.c.queueCopy(st.qs.StreamID(), b, 0, nil) // the copy is this answer's only way out yet
		case !st.c.copyNow(st.bulk): // sent once
		case st.server:
			st.c.queueCopy(st.qs.StreamID(), b, copyDelay(st.c.srtt()), nil)
		default:
			st.c.queueCopy(st.qs.StreamID(), b, copyDelay(st.c.srtt()), st.gotHead.Load) // no copy once the answer is in
			copied = true
		}
	}
	if err == nil {
		st.c.prober.sent(st, copied)
	}
	return st.mapErr(err)
}

// SetDeadline bounds every read and write on the stream.
func (st *Stream) SetDeadline(t time.Time) error {
	st.dlMu.Lock()
	st.dl = t
	st.dlMu.Unlock()
	return st.qs.SetDeadline(t)
}

func (st *Stream) deadline() time.Time {
	st.dlMu.Lock()
	defer st.dlMu.Unlock()
	return st.dl
}

// testWriteHook, when a test sets it, writes a whole coded message in CloseWrite instead
// of one Write: it can hold part of a message back, as a lost packet would.
var testWriteHook atomic.Pointer[func(h head, msg []byte, w io.Writer) error]

// Read reads the incoming message.
func (st *Stream) Read(p []byte) (int, error) {
	st.rmu.Lock()
	defer st.rmu.Unlock()
	if st.rerr != nil {
		return 0, st.rerr
	}
	if !st.hasHead {
		if err := st.readMessageHeadLocked(); err != nil {
			st.rerr = err
			return 0, err
		}
	}
	if st.rdec != nil {
		return st.readStreamed(p)
	}
	if st.roff < len(st.rbuf) {
		n := copy(p, st.rbuf[st.roff:])
		st.roff += n
		return n, nil
	}
	if st.rdone {
		st.receivedWhole()
		return 0, io.EOF
	}
	n, err := st.readQS(p)
	st.rcount += n
	if err == io.EOF {
		st.rdone = true
		st.c.m.message("received", 0, modeStateless, st.rcount, st.rcount)
		st.receivedWhole()
		return n, io.EOF
	}
	if err != nil {
		st.rerr = st.mapErr(err)
		return n, st.rerr
	}
	return n, nil
}

// readMessageHead reads the head and, for a coded message, the whole message.
func (st *Stream) readMessageHead() error {
	st.rmu.Lock()
	defer st.rmu.Unlock()
	if st.hasHead {
		return st.rerr
	}
	err := st.readMessageHeadLocked()
	if err != nil {
		st.rerr = err
	}
	return err
}

func (st *Stream) readMessageHeadLocked() error {
	b := make([]byte, 0, 512)
	for {
		if m := st.takeCopy(); m != nil {
			return st.deliverCopy(m)
		}
		n, err := st.readQS(b[len(b):cap(b)])
		if errors.Is(err, errCopyArrived) {
			continue // the copy is complete: what came of the stream is dropped
		}
		b = b[:len(b)+n]
		h, hn, perr := parseHead(b)
		if perr == nil {
			st.gotHead.Store(true)
			if st.c.copiesOn() {
				st.c.awaited.expect(st.qs.StreamID())
			}
			st.rhead, st.hasHead = h, true
			st.headIn.Store(true)
			if h.HasAck {
				st.c.onAck(h.Ack)
			}
			if h.Codec == 0 {
				st.rbuf, st.rdone = b[hn:], err == io.EOF
				st.rcount = len(b) - hn
				if st.rdone {
					st.c.m.message("received", 0, modeStateless, st.rcount, st.rcount)
				}
				if err != nil && err != io.EOF {
					return st.mapErr(err)
				}
				return nil
			}
			if h.streamed() {
				if err != nil && err != io.EOF {
					return st.mapErr(err)
				}
				return st.startStreamed(h, b[hn:], err == io.EOF)
			}
			if h.sequenced() {
				st.c.heads.note(h.Seq)
			}
			return st.readCoded(h, b[hn:], err == io.EOF)
		}
		if !errors.Is(perr, errShortHead) {
			st.qs.CancelRead(codeCancelled)
			st.c.close(closeProtocol, perr.Error())
			return perr
		}
		if err == io.EOF {
			return fmt.Errorf("%w: the peer ended the stream inside a message head", io.ErrUnexpectedEOF)
		}
		if err != nil {
			return st.mapErr(err)
		}
		if len(b) >= maxHeadLen {
			st.c.close(closeProtocol, "message head too long")
			return fmt.Errorf("%w: longer than %d bytes", ErrBadHead, maxHeadLen)
		}
	}
}

// errCopyArrived interrupts a read of the stream: a complete copy of the message is in.
var errCopyArrived = errors.New("copy arrived")

// readQS reads the QUIC stream. A copy's arrival interrupts a blocked read through the
// read deadline; readQS tells that from the owner's deadline and resumes after an
// interruption that is no longer of use.
func (st *Stream) readQS(p []byte) (int, error) {
	for {
		n, err := st.qs.Read(p)
		if n > 0 {
			st.c.progress.Add(1)
		}
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		if !st.gotHead.Load() && st.hasCopy() {
			return n, errCopyArrived
		}
		dl := st.deadline()
		if !dl.IsZero() && !time.Now().Before(dl) {
			return n, err
		}
		_ = st.qs.SetReadDeadline(dl)
		if n > 0 {
			return n, nil
		}
	}
}

// offer gives the exchange a complete copy of its incoming message (redundant.go).
func (st *Stream) offer(msg []byte) {
	if st.gotHead.Load() {
		st.c.m.copies.WithLabelValues("late").Inc()
		return
	}
	st.cmu.Lock()
	if st.copyMsg == nil {
		st.copyMsg = msg
	}
	st.cmu.Unlock()
	_ = st.qs.SetReadDeadline(time.Now()) // wake a reader blocked on the stream
}

func (st *Stream) hasCopy() bool {
	st.cmu.Lock()
	defer st.cmu.Unlock()
	return st.copyMsg != nil
}

func (st *Stream) takeCopy() []byte {
	if st.gotHead.Load() {
		return nil
	}
	st.cmu.Lock()
	defer st.cmu.Unlock()
	m := st.copyMsg
	st.copyMsg = nil
	return m
}

// deliverCopy takes the message from a copy instead of the stream.
func (st *Stream) deliverCopy(m []byte) error {
	_ = st.qs.SetReadDeadline(st.deadline()) // undo offer's interruption
	h, hn, err := parseHead(m)
	if err != nil {
		st.c.close(closeProtocol, "malformed copy: "+err.Error())
		return err
	}
	st.gotHead.Store(true)
	st.byCopy = true
	st.rhead, st.hasHead = h, true
	st.headIn.Store(true)
	st.c.m.copies.WithLabelValues("used").Inc()
	if h.HasAck {
		st.c.onAck(h.Ack)
	}
	if h.Codec == 0 {
		st.rbuf, st.rdone = m[hn:], true
		st.rcount = len(m) - hn
		st.c.m.message("received", 0, modeStateless, st.rcount, st.rcount)
		return nil
	}
	if h.sequenced() {
		st.c.heads.note(h.Seq)
	}
	return st.readCoded(h, m[hn:], true)
}

// startStreamed sets up the decoding of a streamed message (have holds its first coded
// bytes), which Read then decodes as it reads.
func (st *Stream) startStreamed(h head, have []byte, eof bool) error {
	sc := st.c.cfg.StreamCodec
	if sc == nil || h.Codec != sc.ID() {
		st.qs.CancelRead(codeCancelled)
		st.c.close(closeProtocol, fmt.Sprintf("streamed message in codec %d, not our stream codec", h.Codec))
		return fmt.Errorf("%w: streamed message in codec %d", ErrBadHead, h.Codec)
	}
	st.rsrc = &streamedSource{st: st, have: have, eof: eof}
	d, err := sc.NewStreamDecoder(st.rsrc)
	if err != nil {
		st.qs.CancelRead(codeCancelled)
		st.qs.CancelWrite(codeCancelled)
		return &resetError{code: codeCancelled, err: err}
	}
	st.rdec = d
	return nil
}

// readStreamed decodes a streamed message into p. rmu is held.
func (st *Stream) readStreamed(p []byte) (int, error) {
	n, err := st.rdec.Read(p)
	st.rraw += n
	switch {
	case err == nil:
		return n, nil
	case err == io.EOF:
		st.rdone = true
		st.rdec.Release()
		st.rdec = nil
		st.c.m.message("received", st.rhead.Codec, modeStreamed, st.rraw, st.rsrc.n)
		st.receivedWhole()
		return n, io.EOF
	case st.rsrc.err != nil:
		// The stream's own failure (reset, connection lost), seen by the decoder.
		st.rerr = st.mapErr(st.rsrc.err)
	default:
		// Not one message of the stream codec: half delivered, it cannot be retried.
		st.c.log.Warn("streamed message could not be decoded; the exchange is reset", "peer", st.c.label, "codec", st.rhead.Codec, "err", err)
		st.qs.CancelRead(codeCancelled)
		st.qs.CancelWrite(codeCancelled)
		st.rerr = &resetError{code: codeCancelled, err: err}
	}
	st.rdec = nil
	return n, st.rerr
}

// streamedSource is a streamed message's coded bytes for its decoder: what came with
// the head, then the QUIC stream until FIN.
type streamedSource struct {
	st   *Stream
	have []byte
	eof  bool
	n    int   // coded bytes read
	err  error // the stream's error, other than its end
}

func (s *streamedSource) Read(p []byte) (int, error) {
	if len(s.have) > 0 {
		k := copy(p, s.have)
		s.have = s.have[k:]
		s.n += k
		return k, nil
	}
	if s.eof {
		return 0, io.EOF
	}
	k, err := s.st.readQS(p)
	s.n += k
	switch {
	case err == io.EOF:
		s.eof = true
	case err != nil:
		s.err = err
	}
	return k, err
}

// readCoded reads the rest of a coded message (have holds its first bytes) and decodes it.
func (st *Stream) readCoded(h head, have []byte, eof bool) error {
	limit := st.c.cfg.MaxCodedMessage + st.c.cfg.MaxCodedMessage/8 + 1024 // coded never grows much
	var payload []byte
	if want := min(int(h.RawLen)+64, limit); want <= rawBufSize {
		// Most messages: a pooled buffer, given back once decoded (no codec keeps a view
		// of what it decoded: codec.TestBuffersAreTheCallers).
		box := rawPool.Get().(*[]byte)
		payload = append((*box)[:0], have...)
		defer func() {
			if cap(payload) <= maxPooledRaw {
				*box = payload[:0]
				rawPool.Put(box)
			}
		}()
	} else {
		payload = append(make([]byte, 0, want), have...)
	}
	for !eof {
		if len(payload) == cap(payload) {
			if len(payload) >= limit {
				st.qs.CancelRead(codeTooLarge)
				return fmt.Errorf("coded message larger than %d bytes", limit)
			}
			payload = append(payload, 0)[:len(payload)]
		}
		n, err := st.readQS(payload[len(payload):cap(payload)])
		payload = payload[:len(payload)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return st.mapErr(err)
		}
	}
	msg, err := st.c.decode(h, payload)
	if err != nil {
		st.c.log.Warn("coded message could not be decoded; the exchange is refused and retried", "peer", st.c.label, "codec", h.Codec, "seq", h.Seq, "err", err)
		st.qs.CancelWrite(codeCodec)
		return &resetError{code: codeCodec, remote: false, err: err}
	}
	st.c.m.message("received", h.Codec, h.Mode, len(msg), len(payload))
	st.rbuf, st.rdone = msg, true
	st.receivedWhole() // the whole message is decoded: its reader need not reach EOF
	return nil
}

// Close releases the stream. An unfinished exchange is reset; a sequenced message that
// came in unread is still decoded, so the codec state stays in step with the peer.
func (st *Stream) Close() error {
	if !st.server && !st.headIn.Load() && st.c.err() == nil && st.abandonSent.CompareAndSwap(false, true) {
		// The edge gives up before the response began (its client went away, its
		// deadline passed): tell the origin first, which stops the upstream call and
		// resets the stream, and so also ends a Read blocked on it here (it holds rmu).
		// Whatever response was already under way is still read or drained below, so
		// the codec lanes stay in step.
		st.c.sendCtrl(ctrlAbandon, binary.AppendUvarint(nil, uint64(st.qs.StreamID())))
	}
	st.wmu.Lock()
	if !st.wclosed {
		st.wclosed = true
		st.buf = nil
		st.qs.CancelWrite(codeCancelled)
	}
	if st.senc != nil {
		st.senc.Release() // not closed: dropped, not reused
		st.senc = nil
	}
	st.wmu.Unlock()

	st.rmu.Lock()
	if st.closed {
		st.rmu.Unlock()
		return nil
	}
	st.closed = true
	needDrain := !st.hasHead && st.rerr == nil
	switch {
	case st.hasHead && st.rerr == nil:
		switch qs, real := st.qs.(*quicgo.Stream); {
		case st.byCopy && real:
			st.c.discard(qs) // the message came in its copy: drop the stream's own bytes
		case st.byCopy, !st.rdone:
			st.qs.CancelRead(codeCancelled)
		}
	case st.hasHead && !st.rdone:
		// A read failed here (its deadline passed: the origin stops draining a request
		// it answered early) and the peer may still be sending: tell it to stop. After
		// the peer's own reset this does nothing.
		st.qs.CancelRead(codeCancelled)
	}
	st.rmu.Unlock()
	st.released.Store(true)
	if st.c.copiesOn() {
		st.c.forget(st)
	}
	if st.server {
		st.c.unserve(st)
		st.failMu.Lock()
		if st.stopWatch != nil {
			st.stopWatch()
		}
		st.failMu.Unlock()
	}
	if needDrain {
		st.c.drain(st)
	}
	st.c.streams.Add(-1)
	st.c.m.streams.Dec()
	if st.c.streamFreed != nil {
		st.c.streamFreed()
	}
	if st.server {
		st.c.holdCredit(st.qs)
	}
	if st.onClose != nil {
		st.onClose()
	}
	return nil
}

// AfterFail arranges for f to run, in a goroutine of its own, once the edge abandons the
// exchange (at once if it has): an ABANDON control frame names its stream (the edge gave
// up before the response began), or the edge stops reading it (STOP_SENDING) while the
// response streams. The origin then stops an upstream call nobody waits for
// (proxy.watchAbandon). stop unregisters f and reports whether that kept it from running.
// One f per stream.
//
// STOP_SENDING is watched only once the response streams (startStreaming): a message sent
// whole goes out after the upstream call is over, when there is nothing left to stop, and
// before any of it went ABANDON tells. The watch is a context.AfterFunc on the QUIC
// stream's context, which cost six allocations per exchange when every exchange made one.
func (st *Stream) AfterFail(f func()) (stop func() bool) {
	st.failMu.Lock()
	st.failWatched = true
	if st.outStreaming.Load() {
		st.watchStopSendingLocked()
	}
	st.failMu.Unlock()
	return tunnel.AfterNotice(&st.failed, f)
}

// watchStopSendingLocked starts, once, the watch for the edge's STOP_SENDING (the
// QUIC stream's context ends with a remote stream error). failMu is held.
func (st *Stream) watchStopSendingLocked() {
	if st.stopWatch != nil {
		return
	}
	if qs, ok := st.qs.(interface{ Context() context.Context }); ok {
		qctx := qs.Context()
		st.stopWatch = context.AfterFunc(qctx, func() {
			var se *quicgo.StreamError
			if errors.As(context.Cause(qctx), &se) && se.Remote {
				st.abandon()
			}
		})
	}
}

// AfterDelivered arranges for f to run once the peer has acknowledged decoding the
// stream's outgoing message; at once if it has. Only sequenced messages are acknowledged
// (SPEC.md, "Loss-safe codec state"): f never runs for an identity or stateless message,
// nor for one given up as lost, nor once the edge abandoned the exchange. The origin
// forgets a held response then: the edge has it whole (proxy/held.go). f must be quick:
// it runs on the goroutine that read the acknowledgement. One f per stream.
func (st *Stream) AfterDelivered(f func()) { st.delivered.Then(f) }

// abandon records that the edge abandoned the exchange.
func (st *Stream) abandon() {
	st.failMu.Lock()
	defer st.failMu.Unlock()
	st.delivered.Cancel()
	st.failed.Fire()
}

// notSentError is a failure before any byte of the exchange left: safe to retry.
type notSentError struct{ err error }

func (e *notSentError) Error() string {
	return "quic tunnel: connection closed before the exchange was sent: " + e.err.Error()
}
func (e *notSentError) Unwrap() error   { return e.err }
func (e *notSentError) Retryable() bool { return true }

// resetError is a stream reset, sent or received.
type resetError struct {
	code   quicgo.StreamErrorCode
	remote bool
	err    error
}

func (e *resetError) Error() string {
	who := "locally"
	if e.remote {
		who = "by the peer"
	}
	s := fmt.Sprintf("quic tunnel: exchange reset %s (%s)", who, codeName(e.code))
	if e.err != nil {
		s += ": " + e.err.Error()
	}
	return s
}

func (e *resetError) Unwrap() error { return e.err }

// Retryable reports whether the peer provably did not process the exchange.
func (e *resetError) Retryable() bool {
	return e.remote && (e.code == codeRefused || e.code == codeCodec)
}

// ResetByPeer reports whether the peer reset the stream or stopped reading it (a
// refusal is not that: the peer never took the exchange). A write that fails this way
// leaves the incoming message readable: the origin stops reading a request whose answer
// it has sent (an early answer).
func (e *resetError) ResetByPeer() bool { return e.remote && e.code != codeRefused }

func codeName(c quicgo.StreamErrorCode) string {
	switch c {
	case codeCancelled:
		return "cancelled"
	case codeRefused:
		return "refused"
	case codeCodec:
		return "codec_error"
	case codeTooLarge:
		return "too_large"
	}
	return fmt.Sprintf("code %d", c)
}

// mapErr turns quic-go's stream errors into ours (resets that say whether a retry is safe);
// deadline errors stay net.Errors with Timeout() true.
func (st *Stream) mapErr(err error) error {
	if err == nil {
		return nil // before errors.As: its target escapes, an allocation per call
	}
	var se *quicgo.StreamError
	if errors.As(err, &se) {
		return &resetError{code: se.ErrorCode, remote: se.Remote, err: nil}
	}
	return connLost(err)
}

// connLost reports quic-go's idle timeout (nothing heard from the peer for the idle
// timeout: the path went dark) as the TCP tunnel reports its keepalive timeout: the
// connection is lost. quic-go's error is a net.Error with Timeout() true, which callers
// take for the exchange's own deadline (the edge answered 504 "no response within" its
// exchange timeout, long before that timeout). The quic-go error stays in the text, not
// in the chain, so nothing finds its Timeout method.
func connLost(err error) error {
	if err == nil {
		return nil
	}
	var idle *quicgo.IdleTimeoutError
	if errors.As(err, &idle) {
		return fmt.Errorf("%w: %v", tunnel.ErrKeepaliveTimeout, err)
	}
	return err
}
