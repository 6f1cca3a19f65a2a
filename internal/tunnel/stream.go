package tunnel

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Stream is one exchange on a session: one message in each direction. It is safe to call
// Read and Write from different goroutines, but not Write (or Read) from two at once.
//
// A message is written with Write (buffered up to one frame), optionally Flush (push what
// is buffered now, for streaming), and CloseWrite (last frame, with the CRC-32C trailer).
// Read returns the peer's message and io.EOF once its checksum has been verified.
//
// With an Encoding in effect (Config.Encoding or SetEncoding), Write buffers the whole
// message instead, up to the coded-message limit, and CloseWrite hands it to the session
// to be coded; a message that grows past the limit, or is flushed, streams as identity.
type Stream struct {
	s  *Session
	id uint32 // 0 until the first frame is queued (locally opened streams); guarded by s.mu

	// Guarded by s.mu: the writer's queue of built frames, or the whole message to code.
	pending   []queued
	coded     *codedMsg
	inRing    bool
	bulk      bool // SetBulk: its frames may be held to share packets (bulk.go)
	lingering bool // counted in s.lingering

	mu sync.Mutex

	// receive side
	chunks   []chunk
	rstarted bool
	rdone    bool
	rcrc     uint32
	rwindow  int64  // bytes the peer may still send
	credit   uint32 // bytes consumed by Read and not yet returned with WINDOW_UPDATE
	rerr     error
	rsig     chan struct{}
	codec    uint8 // codec the message arrived in
	rbytes   int   // message bytes received (identity), or coded bytes (streamed)
	// A streamed message (codec ≠ 0 in receive: streamed) is kept coded in chunks and decoded by
	// Read through rdec (made at the first Read); its trailer's CRC-32C, rwant, is
	// checked against the decoded bytes (rcrc, kept by Read) at the decoder's end.
	streamed bool
	rdec     StreamDecoder
	rwant    uint32
	rraw     int  // decoded bytes of a streamed message
	decoded  bool // a streamed message was decoded whole and its checksum matched

	// send side
	swindow  int64
	ssig     chan struct{}
	wbuf     []byte
	sstarted bool
	sdone    bool
	scrc     uint32
	werr     error
	finished bool
	// sent fires when the outgoing message's last frame was flushed to the connection, or
	// the stream failed (AfterSent); delivered when the peer acknowledged decoding it,
	// never once the stream failed (AfterDelivered).
	sent, delivered Notice
	// writing: a Write, Flush or CloseWrite runs; frames it queues are written by the
	// operation itself when it ends (owed), through Session.kick, instead of waking
	// sendLoop for each.
	writing, owed bool

	// failedSet: fail ran.
	failedSet bool
	failErr   error  // why it failed (Err)
	failed    Notice // fires when it fails (AfterFail)

	// coding
	encoding     Encoding // from SetEncoding
	encodingSet  bool
	decided      bool          // whether to code this message was decided (first Write, Flush or CloseWrite)
	coding       bool          // buffering the whole message in wbuf to code it at CloseWrite
	sentBytes    int           // message bytes sent as identity, or coded bytes of a streamed message
	senc         StreamEncoder // codes the outgoing message as it is written (StreamCodec)
	scodec       uint8         // codec id of the streamed outgoing message; 0: identity
	rawSent      int           // message bytes given to senc
	codedOut     bool          // the coded message is queued or awaits the peer's ack
	resending    bool          // sendIdentity runs for this stream
	finishWanted bool          // the exchange is over; finish once codedOut and resending clear
	// The records of the one coded message a stream sends (enqueueCoded, writeCoded),
	// kept here rather than allocated for each message, and the first backing array of
	// chunks (a coded message arrives as one chunk).
	codedRec  codedMsg
	sentRec   sentCoded
	chunkRoom [1]chunk

	readDL, writeDL deadline
}

type chunk struct {
	data   []byte
	buf    []byte // the pooled frame buffer data points into; returned once data is read
	credit uint32 // window credit returned when data is fully read
}

func newStream(s *Session, id uint32, sendWindow uint32) *Stream {
	st := &Stream{
		s:       s,
		id:      id,
		rwindow: int64(s.local.Window),
		swindow: int64(sendWindow),
		rsig:    make(chan struct{}, 1),
		ssig:    make(chan struct{}, 1),
	}
	st.chunks = st.chunkRoom[:0]
	return st
}

// ID is the stream id (0 for a locally opened stream that has sent nothing yet).
func (st *Stream) ID() uint32 {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	return st.id
}

// Session is the session the stream belongs to.
func (st *Stream) Session() *Session { return st.s }

// SetDeadline sets both read and write deadlines.
func (st *Stream) SetDeadline(t time.Time) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.readDL.setLocked(&st.mu, t, st.rsig)
	st.writeDL.setLocked(&st.mu, t, st.ssig)
	return nil
}

// SetReadDeadline bounds Read.
func (st *Stream) SetReadDeadline(t time.Time) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.readDL.setLocked(&st.mu, t, st.rsig)
	return nil
}

// SetWriteDeadline bounds Write, Flush and CloseWrite (waiting for window credit).
func (st *Stream) SetWriteDeadline(t time.Time) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.writeDL.setLocked(&st.mu, t, st.ssig)
	return nil
}

// AfterSent arranges for f to run once the stream's outgoing message has been written
// to the connection whole (its last frame flushed to the socket) or the stream failed,
// whichever comes first; at once if that has happened. On a slow link a message can wait
// minutes in the connection's queue after CloseWrite returned: the origin starts the
// resume window of a held response only now (proxy/held.go). f must be quick: it runs on
// the connection's writer. One f per stream.
func (st *Stream) AfterSent(f func()) { st.sent.Then(f) }

// AfterDelivered arranges for f to run once the peer has acknowledged decoding the
// stream's outgoing message (CODEC_ACK, or the ack of a preamble); at once if it has.
// Only coded messages are acknowledged: f never runs for an identity message (nor for a
// coded one the peer rejected and got again as identity), nor once the stream failed. The
// origin forgets a held response then: the edge has it whole (proxy/held.go). f must be
// quick: it runs on the connection's reader. One f per stream.
func (st *Stream) AfterDelivered(f func()) { st.delivered.Then(f) }

// AfterFail arranges for f to run, in a goroutine of its own, once the stream fails:
// reset by the peer or locally, or its session lost (at once if it has). An exchange
// that completes cleanly never runs it. It tells the origin that the edge abandoned an
// exchange whose request it has read whole, which Read cannot (it keeps returning io.EOF
// after a complete message), at no cost (no goroutine, no context) until the stream
// fails: the origin watches every exchange. stop unregisters f and reports whether that
// kept it from running. One f per stream.
func (st *Stream) AfterFail(f func()) (stop func() bool) { return AfterNotice(&st.failed, f) }

// Err is why the stream failed once it has (nil before): a *StreamError for a
// reset (ResetByPeer tells who), or the session's error when its connection was lost.
// The origin keeps running an exchange whose connection was lost, so that the edge can
// collect its response on another one, and stops one the edge reset.
func (st *Stream) Err() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.failErr
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// maxData is the most message bytes one frame carries: our FrameData, within the peer's
// max_frame less room for the preamble (with an ack, up to 21 bytes) and trailer.
func (st *Stream) maxData() int {
	n := st.s.cfg.FrameData
	if lim := int(st.s.peer.MaxFrame) - 32; n > lim {
		n = lim
	}
	return n
}

// PeerInstance is the instance the peer named in its HELLO (empty if it named none): the
// process at the other end of this stream's connection.
func (st *Stream) PeerInstance() string { return st.s.peer.Instance }

// SetEncoding overrides Config.Encoding for this stream's outgoing message (nil: send it
// as identity). It takes effect only when called before the first Write, Flush or
// CloseWrite.
func (st *Stream) SetEncoding(e Encoding) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.decided {
		st.encoding, st.encodingSet = e, true
	}
}

// decideLocked fixes, at the first Write, Flush or CloseWrite, whether the message is
// buffered whole to be coded: an Encoding is in effect and both sides share a codec.
func (st *Stream) decideLocked() {
	if st.decided {
		return
	}
	st.decided = true
	if !st.encodingSet {
		st.encoding = st.s.cfg.Encoding
	}
	st.coding = st.encoding != nil && st.s.codedLimit > 0
}

// queuedLocked notes that frames of st were queued for the writer. st.mu is held. During
// a write operation the operation writes them when it ends (endWriteLocked); otherwise
// (a resend on its own goroutine) sendLoop is woken.
func (st *Stream) queuedLocked() {
	if st.writing {
		st.owed = true
		return
	}
	st.s.wake()
}

// beginWriteLocked starts a write operation. st.mu is held.
func (st *Stream) beginWriteLocked() { st.writing = true }

// endWriteLocked ends a write operation: it releases st.mu and writes what the
// operation queued, on this goroutine if the connection's writer is free.
func (st *Stream) endWriteLocked() { st.endWriteFinishing(false) }

// endWriteFinishing is endWriteLocked for a CloseWrite that ends the exchange (done:
// the peer's message was read whole too): the stream is forgotten (finish) before its
// last frame is written. The peer may open its next stream the moment it has that frame;
// were this stream still counted then, the new one would find this side at its stream
// limit and be refused.
func (st *Stream) endWriteFinishing(done bool) {
	owed := st.owed
	st.writing, st.owed = false, false
	st.mu.Unlock()
	if done {
		st.finish()
	}
	if owed {
		st.s.kick()
	}
}

// flushOwedLocked hands what the operation queued so far to sendLoop, before the
// operation waits for something the peer can only send once it has those frames
// (window credit). st.mu is held.
func (st *Stream) flushOwedLocked() {
	if st.owed {
		st.owed = false
		st.s.wake()
	}
}

// Write buffers p into frames of the outgoing message (or, while the message is to be
// coded, into the whole message).
func (st *Stream) Write(p []byte) (int, error) {
	st.mu.Lock()
	st.beginWriteLocked()
	defer st.endWriteLocked()
	if st.werr != nil {
		return 0, st.werr
	}
	if st.sdone {
		return 0, ErrWriteClosed
	}
	st.decideLocked()
	if st.coding {
		if len(st.wbuf)+len(p) <= st.s.codedLimit {
			if st.wbuf == nil {
				st.wbuf = make([]byte, 0, max(len(p), 512))
			}
			st.wbuf = append(st.wbuf, p...)
			return len(p), nil
		}
		// Too large to be coded whole: stream it, coded by the stream codec if the peer
		// has it, else as identity.
		st.coding = false
		if !st.startStreamingLocked(StreamStart(st.wbuf, p)) {
			st.s.m.fallbacks[fbTooLarge].Inc()
			if err := st.emitBufLocked(false, true); err != nil {
				return 0, err
			}
		} else if err := st.encodeBufLocked(); err != nil {
			return 0, err
		}
	}
	if st.senc != nil {
		return st.writeStreamedLocked(p)
	}
	limit := st.maxData()
	if st.wbuf == nil {
		st.wbuf = make([]byte, 0, min(limit, max(len(p), 512)))
	}
	written := 0
	for len(p) > 0 {
		n := min(limit-len(st.wbuf), len(p))
		st.wbuf = append(st.wbuf, p[:n]...)
		p = p[n:]
		written += n
		if len(st.wbuf) >= limit {
			if err := st.emitBufLocked(false, true); err != nil {
				return written - len(st.wbuf), err
			}
		}
	}
	return written, nil
}

// Flush sends what Write buffered without ending the message. A message buffered to be
// coded is sent as identity instead: a flushed message is being streamed.
func (st *Stream) Flush() error {
	st.mu.Lock()
	st.beginWriteLocked()
	defer st.endWriteLocked()
	if st.werr != nil {
		return st.werr
	}
	if st.sdone || (len(st.wbuf) == 0 && st.senc == nil) {
		return nil // (a stream encoder may hold bytes while wbuf is empty)
	}
	st.decideLocked()
	if st.coding {
		st.coding = false
		if st.startStreamingLocked(st.wbuf) {
			if err := st.encodeBufLocked(); err != nil {
				return err
			}
		} else {
			st.s.m.fallbacks[fbFlushed].Inc()
		}
	}
	if st.senc != nil {
		if err := st.senc.Flush(); err != nil {
			return st.encodeErrLocked(err)
		}
	}
	return st.emitBufLocked(false, false)
}

// startStreamingLocked switches the outgoing message, buffered in wbuf to be coded whole,
// to the stream codec when it cannot be: the peer decodes the stream codec in our format,
// nothing went out yet, and the Encoding codes the message (judged on its start, the
// first bytes written). wbuf still holds the raw bytes buffered, for encodeBufLocked.
// st.mu is held.
func (st *Stream) startStreamingLocked(start []byte) bool {
	sc := st.s.streamOut
	if sc == nil || st.sstarted {
		return false
	}
	st.mu.Unlock() // Choose may take its time; only this goroutine writes the stream
	id := st.s.chooseCodec(st.encoding, start)
	st.mu.Lock()
	if id == 0 || st.werr != nil {
		return false
	}
	enc, err := sc.NewStreamEncoder(streamSink{st})
	if err != nil {
		// Every encoder in use (the stream codec bounds its memory): uncoded this time.
		st.s.m.fallbacks[fbStreamBusy].Inc()
		return false
	}
	st.senc, st.scodec = enc, sc.ID()
	return true
}

// encodeBufLocked codes the raw bytes buffered in wbuf, the start of a message that has
// just switched to streaming. st.mu is held.
func (st *Stream) encodeBufLocked() error {
	raw := st.wbuf
	st.wbuf = nil
	_, err := st.writeStreamedLocked(raw)
	return err
}

// writeStreamedLocked codes p into the outgoing streamed message. The checksum covers
// the message as written; the encoder writes its output through streamSink into frames.
// st.mu is held.
func (st *Stream) writeStreamedLocked(p []byte) (int, error) {
	st.scrc = crc32.Update(st.scrc, castagnoli, p)
	st.rawSent += len(p)
	if _, err := st.senc.Write(p); err != nil {
		return 0, st.encodeErrLocked(err)
	}
	return len(p), nil
}

// encodeErrLocked is the write error after the stream encoder failed: the frame error
// that made it fail (werr), or the encoder's own, which resets the stream (a message
// half sent cannot be sent again). st.mu is held.
func (st *Stream) encodeErrLocked(err error) error {
	// The message ends here either way: give the encoder back now (this is the writer's
	// goroutine, the only one that touches it), not when it is collected.
	st.senc.Release()
	st.senc = nil
	if st.werr != nil {
		return st.werr
	}
	st.werr = fmt.Errorf("tunnel: coding a streamed message: %w", err)
	st.s.m.fallbacks[fbEncodeError].Inc()
	werr := st.werr
	st.mu.Unlock()
	st.fail(&StreamError{Code: frame.CodeInternal, Reason: werr.Error()}, true)
	st.mu.Lock()
	return werr
}

// streamSink takes a stream encoder's output into DATA frames of the stream. The encoder
// writes only during the stream's Write, Flush and CloseWrite, with st.mu held.
type streamSink struct{ st *Stream }

func (w streamSink) Write(b []byte) (int, error) {
	st := w.st
	limit := st.maxData()
	if st.wbuf == nil {
		st.wbuf = make([]byte, 0, limit)
	}
	n := 0
	for len(b) > 0 {
		k := min(limit-len(st.wbuf), len(b))
		st.wbuf = append(st.wbuf, b[:k]...)
		b = b[k:]
		n += k
		if len(st.wbuf) >= limit {
			if err := st.emitBufLocked(false, true); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// CloseWrite ends the outgoing message: the last frame carries the CRC-32C trailer. A
// message buffered whole is handed to the session to be coded in wire order.
func (st *Stream) CloseWrite() error {
	st.mu.Lock()
	if st.werr != nil {
		st.mu.Unlock()
		return st.werr
	}
	if st.sdone {
		st.mu.Unlock()
		return nil
	}
	st.beginWriteLocked()
	st.decideLocked()
	if st.coding {
		st.coding = false
		raw := st.wbuf
		st.wbuf = nil
		// Choose may take its time (trial compression): not under st.mu, which recvLoop
		// needs to deliver to this stream. Only this goroutine writes the stream.
		st.mu.Unlock()
		id := st.s.chooseCodec(st.encoding, raw)
		st.mu.Lock()
		if st.werr != nil {
			err := st.werr
			st.endWriteLocked()
			return err
		}
		if id != 0 {
			queued, err := st.s.enqueueCoded(st, raw, id)
			if err != nil {
				st.werr = err
				st.endWriteLocked()
				return err
			}
			if queued {
				st.codedOut = true
				st.sdone = true
				st.endWriteFinishing(st.rdone)
				return nil
			}
		}
		st.wbuf = raw // identity after all
	}
	if st.senc != nil {
		if err := st.senc.Close(); err != nil {
			err = st.encodeErrLocked(err)
			st.endWriteLocked()
			return err
		}
		st.senc.Release()
		st.senc = nil
	}
	if err := st.emitBufLocked(true, false); err != nil {
		st.endWriteLocked()
		return err
	}
	st.sdone = true
	st.endWriteFinishing(st.rdone)
	return nil
}

// emitBufLocked sends wbuf as DATA frames of at most maxData bytes. With keepTail a last
// partial frame stays buffered for Write to fill; with end the last frame ends the
// message. On error the bytes not sent stay in wbuf. st.mu is held.
func (st *Stream) emitBufLocked(end, keepTail bool) error {
	limit := st.maxData()
	off := 0
	var err error
	for {
		rest := len(st.wbuf) - off
		if (keepTail && rest < limit) || (!end && rest == 0) {
			break
		}
		n := min(rest, limit)
		last := end && n == rest
		if err = st.emitLocked(st.wbuf[off:off+n], last); err != nil {
			break
		}
		off += n
		if last {
			break
		}
	}
	st.wbuf = st.wbuf[:copy(st.wbuf, st.wbuf[off:])]
	return err
}

// emitAllLocked sends msg as the rest of the message, ended. st.mu is held.
func (st *Stream) emitAllLocked(msg []byte, end bool) error {
	limit := st.maxData()
	for {
		n := min(len(msg), limit)
		last := end && n == len(msg)
		if err := st.emitLocked(msg[:n], last); err != nil {
			return err
		}
		msg = msg[n:]
		if last || len(msg) == 0 {
			return nil
		}
	}
}

// emitLocked turns data into one identity DATA frame, waiting for window credit. st.mu
// is held.
func (st *Stream) emitLocked(data []byte, end bool) error {
	pre := frame.Preamble{Codec: st.scodec} // identity, or a streamed message; epoch 0
	size := len(data)
	start := !st.sstarted
	if start {
		size += pre.Len()
	}
	if end {
		size += frame.TrailerLen
	}
	for st.swindow < int64(size) {
		if st.writeDL.expired {
			return ErrTimeout
		}
		st.s.m.stalls.Inc()
		st.flushOwedLocked()
		st.mu.Unlock()
		select {
		case <-st.ssig: // credit, a failure or the deadline
		case <-st.s.ctx.Done():
		}
		st.mu.Lock()
		if st.werr != nil {
			return st.werr
		}
	}
	st.swindow -= int64(size)
	if st.scodec == 0 {
		st.scrc = crc32.Update(st.scrc, castagnoli, data)
	}
	var fl frame.Flags
	if start {
		fl |= frame.FlagStart
	}
	if end {
		fl |= frame.FlagEnd
		// Counted before the frame can reach the peer, so that the count is never behind
		// what the peer saw.
		if st.scodec == 0 {
			st.s.m.codecSent[0].add(st.sentBytes+len(data), st.sentBytes+len(data))
		} else {
			st.s.m.codecSent[st.scodec].add(st.rawSent, st.sentBytes+len(data))
		}
	}
	err := st.s.enqueueData(st, func(id uint32) queued {
		q := queued{h: frame.Header{Length: uint32(size), Type: frame.TypeData, Flags: fl, StreamID: id}, payload: getBuf()}
		if start {
			q.payload = pre.Append(q.payload)
			q.pre, q.preLen = pre, len(q.payload)
		}
		q.payload = append(q.payload, data...)
		if end {
			q.payload = frame.AppendTrailer(q.payload, st.scrc)
		}
		return q
	})
	if err != nil {
		st.werr = err
		return err
	}
	st.sstarted = true
	st.sentBytes += len(data)
	return nil
}

func (st *Stream) addSendWindow(n int64) {
	st.mu.Lock()
	st.swindow += n
	st.mu.Unlock()
	signal(st.ssig)
}

// receive takes one DATA frame of an identity or streamed message from recvLoop: codec
// is the START preamble's codec id (0 on other frames), p the frame's payload, data the
// message bytes in it (after the preamble), credit the window bytes it uses. Errors it
// returns are connection errors. retained reports whether the stream kept p for Read.
func (st *Stream) receive(fl frame.Flags, codec uint8, p, data []byte, credit int64) (retained bool, err error) {
	st.mu.Lock()
	if st.rerr != nil {
		st.mu.Unlock()
		return false, nil // reset or failed locally; late frames are dropped
	}
	if st.rdone {
		st.mu.Unlock()
		return false, fmt.Errorf("%w: stream %d: DATA after END", frame.ErrBadPayload, st.id)
	}
	if credit > st.rwindow {
		st.mu.Unlock()
		return false, fmt.Errorf("%w: stream %d: %d bytes with window %d", errFlowControl, st.id, credit, st.rwindow)
	}
	st.rwindow -= credit
	if fl.Has(frame.FlagStart) {
		if st.rstarted {
			st.mu.Unlock()
			return false, fmt.Errorf("%w: stream %d: second START", frame.ErrBadPayload, st.id)
		}
		st.rstarted = true
		st.codec, st.streamed = codec, codec != 0
	} else if !st.rstarted {
		st.mu.Unlock()
		return false, fmt.Errorf("%w: stream %d: DATA before START", frame.ErrBadPayload, st.id)
	}
	var want uint32
	end := fl.Has(frame.FlagEnd)
	if end {
		var err error
		if data, want, err = frame.ParseTrailer(data); err != nil {
			st.mu.Unlock()
			return false, err
		}
	}
	if st.streamed {
		// Streamed: Read decodes, and checks want against what it decoded.
		st.rwant = want
	} else {
		st.rcrc = crc32.Update(st.rcrc, castagnoli, data)
	}
	if end && !st.streamed && st.rcrc != want {
		got := st.rcrc
		st.mu.Unlock()
		st.s.m.checksum.Inc()
		// The last bytes were never released: the message cannot complete downstream.
		st.fail(&ChecksumError{Want: want, Got: got}, false)
		st.s.sendControl(frame.TypeRSTStream, 0, st.id, frame.AppendRST(nil, frame.CodeChecksum, "message checksum mismatch"))
		return false, nil
	}
	if len(data) > 0 {
		st.chunks = append(st.chunks, chunk{data: data, buf: p, credit: uint32(credit)})
		retained = true
	} else {
		st.credit += uint32(credit)
	}
	st.rbytes += len(data)
	finished := false
	if end {
		st.rdone = true
		finished = st.sdone
		if !st.streamed {
			st.s.m.codecRecv[0].add(st.rbytes, st.rbytes)
		}
	}
	st.mu.Unlock()
	signal(st.rsig)
	if finished {
		st.finish()
	}
	return retained, nil
}

// Read reads the peer's message. It returns io.EOF after the whole message arrived and
// its checksum matched, a *ChecksumError if it did not, a *StreamError on reset.
func (st *Stream) Read(b []byte) (int, error) { return st.readChunks(b, false) }

// readStreamed decodes a streamed message into b. The decoder reads the coded bytes
// through readChunks, so the window is returned to the peer as it consumes them and the
// coded bytes held are bounded by the window, whatever the message decodes to.
func (st *Stream) readStreamed(b []byte) (int, error) {
	if st.decoded {
		return 0, io.EOF
	}
	if st.rdec == nil {
		d, err := st.s.cfg.StreamCodec.NewStreamDecoder(chunkReader{st})
		if err != nil {
			return 0, st.decodeFailed(err)
		}
		st.rdec = d
	}
	n, err := st.rdec.Read(b)
	st.rcrc = crc32.Update(st.rcrc, castagnoli, b[:n])
	st.rraw += n
	if err == nil {
		return n, nil
	}
	if err != io.EOF {
		return n, st.decodeFailed(err)
	}
	st.rdec.Release()
	st.rdec = nil
	st.mu.Lock()
	want, coded := st.rwant, st.rbytes
	rerr := st.rerr
	st.mu.Unlock()
	if rerr != nil {
		return n, rerr
	}
	if st.rcrc != want {
		st.s.m.checksum.Inc()
		cerr := &ChecksumError{Want: want, Got: st.rcrc}
		st.fail(cerr, false)
		st.s.sendControl(frame.TypeRSTStream, 0, st.ID(), frame.AppendRST(nil, frame.CodeChecksum, "message checksum mismatch"))
		return n, cerr
	}
	st.decoded = true
	st.s.m.codecRecv[st.codec].add(st.rraw, coded)
	if n > 0 {
		return n, nil
	}
	return 0, io.EOF
}

// decodeFailed is Read's error when the stream decoder failed: the stream's own error if
// it failed (reset, connection lost: the decoder saw it as its input's error), else a
// codec error, and the stream is reset with CODEC: the message cannot be resent.
func (st *Stream) decodeFailed(err error) error {
	if st.rdec != nil {
		st.rdec.Release()
		st.rdec = nil
	}
	st.mu.Lock()
	rerr := st.rerr
	st.mu.Unlock()
	if rerr != nil {
		return rerr
	}
	cerr := &StreamError{Code: frame.CodeCodec, Reason: "streamed message does not decode: " + err.Error()}
	st.s.m.resyncs[rsDecode].Inc()
	st.fail(cerr, true)
	return cerr
}

// chunkReader reads a streamed message's coded bytes for its decoder.
type chunkReader struct{ st *Stream }

func (r chunkReader) Read(b []byte) (int, error) { return r.st.readChunks(b, true) }

// readChunks reads the message bytes as they arrived: the message itself, or with raw
// the coded bytes of a streamed message (for its decoder). Without raw, a streamed
// message (known at its first frame) is read decoded, through readStreamed.
func (st *Stream) readChunks(b []byte, raw bool) (int, error) {
	for {
		st.mu.Lock()
		if st.streamed && !raw {
			st.mu.Unlock()
			return st.readStreamed(b)
		}
		if len(st.chunks) > 0 {
			n := 0
			for n < len(b) && len(st.chunks) > 0 {
				c := &st.chunks[0]
				k := copy(b[n:], c.data)
				n += k
				c.data = c.data[k:]
				if len(c.data) == 0 {
					st.credit += c.credit
					putBuf(c.buf)
					st.chunks[0] = chunk{}
					st.chunks = st.chunks[1:]
				}
			}
			var update uint32
			if !st.rdone && st.credit >= st.s.local.Window/4 {
				update, st.credit = st.credit, 0
				st.rwindow += int64(update)
			}
			id := st.id
			st.mu.Unlock()
			if update > 0 {
				st.s.sendControl(frame.TypeWindowUpdate, 0, id, frame.AppendWindowUpdate(nil, update))
			}
			return n, nil
		}
		if st.rerr != nil {
			err := st.rerr
			st.mu.Unlock()
			return 0, err
		}
		if st.rdone {
			st.mu.Unlock()
			return 0, io.EOF
		}
		if st.readDL.expired {
			st.mu.Unlock()
			return 0, ErrTimeout
		}
		st.mu.Unlock()
		<-st.rsig // data, a failure or the deadline
	}
}

// Reset aborts the stream in both directions and tells the peer why.
func (st *Stream) Reset(code frame.Code, reason string) {
	st.fail(&StreamError{Code: code, Reason: reason}, true)
}

// Close releases the stream. If either message is unfinished the stream is reset (CANCEL),
// so the peer stops working on it.
func (st *Stream) Close() error {
	st.mu.Lock()
	clean := st.sdone && st.rdone && st.rerr == nil && st.werr == nil
	st.mu.Unlock()
	if clean {
		st.finish()
		return nil
	}
	st.fail(&StreamError{Code: frame.CodeCancel, Reason: "closed before the exchange completed"}, true)
	return nil
}

// fail records err on both directions (first error wins), wakes waiters, forgets the
// stream and optionally sends RST_STREAM.
func (st *Stream) fail(err error, sendRST bool) {
	st.mu.Lock()
	// A message that arrived whole stays readable when the connection is lost after it:
	// the edge has its response (and the origin may have forgotten its copy once the
	// edge's session acknowledged decoding it: AfterDelivered). At the edge it also stays
	// when the origin resets the stream after it: the origin stops reading a request the
	// server answered early (the edge's write fails, and it reads the answer).
	whole := st.rdone && (errors.Is(err, ErrSessionClosed) || st.s.client && isPeerReset(err))
	if st.rerr == nil && !whole && !(st.rdone && len(st.chunks) == 0 && isPeerReset(err)) {
		st.rerr = err
	}
	if st.werr == nil {
		st.werr = err
	}
	if !whole {
		st.chunks = nil
	}
	if !st.failedSet {
		st.failedSet, st.failErr = true, err
		st.failed.Fire()
	}
	st.delivered.Cancel() // with failedSet, under mu: no acknowledgement counts from here
	st.mu.Unlock()
	signal(st.rsig)
	signal(st.ssig)
	st.sent.Fire() // it never will be sent
	s := st.s
	s.mu.Lock()
	st.pending = nil
	if st.coded != nil { // never taken by sendLoop: it is not sent at all
		s.releaseLocked(st.coded.cost)
		st.coded = nil
	}
	id := st.id
	s.mu.Unlock()
	st.finish()
	if sendRST && id != 0 {
		code := frame.CodeInternal
		reason := err.Error()
		if se, ok := err.(*StreamError); ok {
			code, reason = se.Code, se.Reason
		}
		s.sendControl(frame.TypeRSTStream, 0, id, frame.AppendRST(nil, code, reason))
	}
}

func isPeerReset(err error) bool {
	se, ok := err.(*StreamError)
	return ok && se.Remote
}

// finish forgets the stream once its exchange is over. A stream whose coded message the
// peer has not acknowledged yet lingers until it has: if the peer rejects the message, it
// is resent through this stream. A failed stream is forgotten at once.
func (st *Stream) finish() {
	st.mu.Lock()
	if st.finished {
		st.mu.Unlock()
		return
	}
	if st.werr == nil && (st.codedOut || st.resending) {
		st.finishWanted = true
		st.mu.Unlock()
		st.s.linger(st)
		return
	}
	st.finished = true
	st.readDL.stopLocked()
	st.writeDL.stopLocked()
	st.mu.Unlock()
	st.s.removeStream(st)
}
