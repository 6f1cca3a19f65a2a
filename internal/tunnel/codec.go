package tunnel

import (
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// Message codecs on the tunnel.
//
// A message is coded whole: the sending Stream buffers it (up to MaxCodedMessage), and at
// CloseWrite hands it to the writer (see doc.go), which encodes it and writes all its frames back to back.
// recvLoop assembles those frames, decodes the message and hands it to the stream. Both
// loops are the connection's only writer and reader, so a stateful codec (the synchronized
// token cache) sees its messages in the same order on both ends:
//
//	Stream.CloseWrite ─► ring ─► writer: Encode (wire order) ─► START … END, contiguous
//	recvLoop: assemble ─► Decode (wire order) ─► CRC-32C ─► Stream buffer ─► Read
//	                   └► on failure: CODEC_NACK ─► sender resends the message as identity
//
// Each coded message is acknowledged (CODEC_ACK, or the ack field of a START preamble);
// until then the sender keeps its raw bytes. A message the receiver cannot decode (state
// out of step, corrupted, stale epoch) is rejected with CODEC_NACK: both ends move to a new
// epoch with fresh codec state, and the sender resends the retained bytes as identity. A
// message is never delivered corrupted and never lost. See frame/SPEC.md.

// MessageCodec is one encoding of whole messages; ID is the wire codec id (never 0:
// identity is built in).
type MessageCodec interface {
	ID() uint8
	// Format names the codec's wire format and any data both ends must share (a zstd
	// dictionary, a model version). Both sides announce it in HELLO; the codec is used
	// only if the formats are equal.
	Format() uint32
	NewEncoder() (MessageEncoder, error)
	// NewDecoder returns a decoder that refuses to produce more than maxMessage bytes.
	NewDecoder(maxMessage int) (MessageDecoder, error)
}

// MessageEncoder encodes the messages of one session direction, in wire order.
type MessageEncoder interface {
	Encode(dst, msg []byte) ([]byte, error) // appends the payload for msg to dst
}

// MessageDecoder decodes the payloads of one session direction, in wire order. After an
// error the decoder is discarded.
type MessageDecoder interface {
	Decode(dst, payload []byte) ([]byte, error) // appends the message of payload to dst
}

// StreamCodec codes one message as it is written, for the messages a MessageCodec cannot
// take whole: larger than the coded-message limit, or flushed before their end (a server
// streaming its answer). It keeps no state across messages, so a streamed message's
// frames interleave with other streams' like identity frames, use the window like them,
// need no acknowledgement and are decoded by the reader as it reads, never by recvLoop:
//
//	Write ─► StreamEncoder ─► DATA frames (codec id in the START preamble)
//	recvLoop ─► Stream buffer (coded bytes, window-bounded) ─► Read: StreamDecoder ─► CRC-32C
//
// The trailer's CRC-32C covers the decoded message, as for every message. A message
// that fails to decode cannot be resent (its first bytes may be with the reader
// already): the stream is reset with CODEC. See frame/SPEC.md "Streamed messages".
type StreamCodec interface {
	ID() uint8
	Format() uint32
	// NewStreamEncoder returns an encoder writing one coded message to w; it writes on
	// the caller's goroutine only, during Write, Flush and Close.
	NewStreamEncoder(w io.Writer) (StreamEncoder, error)
	// NewStreamDecoder returns a decoder reading one coded message from r, whose memory
	// is bounded whatever r holds.
	NewStreamDecoder(r io.Reader) (StreamDecoder, error)
}

// StreamEncoder codes one message; Release gives its state back (after Close, or to
// abandon the message).
type StreamEncoder interface {
	io.Writer
	Flush() error
	Close() error
	Release()
}

// StreamDecoder decodes one message: Read returns io.EOF at its end. Release gives its
// state back.
type StreamDecoder interface {
	io.Reader
	Release()
}

// chooseSample is how much of a message's start the Encoding sees when the message is
// streamed: enough for its envelope head and the start of its body.
const chooseSample = 4 << 10

// StreamStart is what an Encoding is shown of a message about to be streamed: the bytes
// buffered, topped up from p (the write that overflowed the buffer) to a few KiB. The
// policy judges a message by its start (XML or not), and what is buffered may be only the
// envelope head.
func StreamStart(buffered, p []byte) []byte {
	if len(buffered) >= chooseSample {
		return buffered
	}
	return append(buffered[:len(buffered):len(buffered)], p[:min(len(p), chooseSample)]...)
}

// Encoding chooses the codec id for one outgoing message among those the peer decodes
// (peerDecodes(0) is always true). Returning an id the peer or this side lacks means
// identity. Choose runs on the writing goroutine, at CloseWrite, not in wire order.
type Encoding interface {
	Choose(msg []byte, peerDecodes func(id uint8) bool) uint8
}

// EncodingFunc adapts a function to Encoding.
type EncodingFunc func(msg []byte, peerDecodes func(id uint8) bool) uint8

// Choose calls f.
func (f EncodingFunc) Choose(msg []byte, peerDecodes func(id uint8) bool) uint8 {
	return f(msg, peerDecodes)
}

// Prefer returns an Encoding that picks the first of ids the peer decodes, and identity
// for messages shorter than minSize (coding tiny messages costs more than it saves).
func Prefer(minSize int, ids ...uint8) Encoding {
	return EncodingFunc(func(msg []byte, peerDecodes func(uint8) bool) uint8 {
		if len(msg) < minSize {
			return 0
		}
		for _, id := range ids {
			if peerDecodes(id) {
				return id
			}
		}
		return 0
	})
}

const (
	// retainOverhead is what each retained message costs against CodecRetention besides
	// its bytes: roughly its Stream, which lingers until the ack. So the budget bounds the
	// memory a peer that never acknowledges can pin, however small the messages.
	retainOverhead = 1024
	// ackDelay is how long processed coded messages wait for a START frame to carry their
	// acknowledgement before a CODEC_ACK of their own is sent.
	ackDelay = 100 * time.Millisecond
	// ackBatch pending acknowledgements are sent at once in a CODEC_ACK.
	ackBatch = 64
	// maxKeptAssembly is the largest assembly buffer recvLoop keeps between messages.
	maxKeptAssembly = 256 << 10
)

// codedMsg is a whole outgoing message queued for the writer to encode.
type codedMsg struct {
	st    *Stream
	raw   []byte
	codec uint8
	cost  int // reserved against CodecRetention
}

// sentCoded is a coded message written to the wire and not yet acknowledged.
type sentCoded struct {
	st     *Stream
	id     uint32
	raw    []byte // the message, for a resend; nil once NACKed
	cost   int
	size   int64 // stream window bytes the coded frames consumed
	epoch  uint64
	nacked bool
}

// assembly is the coded message recvLoop is collecting. Coded messages are contiguous on
// the wire, so there is at most one.
type assembly struct {
	active bool
	id     uint32
	st     *Stream // nil: unknown, late or refused stream; decoded all the same, then dropped
	codec  uint8
	epoch  uint64
	limit  int64 // window the coded frames may use
	credit int64 // window bytes used so far
	buf    []byte
}

// peerDecodes reports whether the peer announced it decodes id (identity always).
func (s *Session) peerDecodes(id uint8) bool {
	return id == 0 || (id <= frame.MaxCodecID && s.peerCodec[id])
}

// chooseCodec asks e for the codec of msg and returns it if both sides have it, else 0.
func (s *Session) chooseCodec(e Encoding, msg []byte) uint8 {
	id := e.Choose(msg, s.peerDecodesFn)
	if id == 0 || id > frame.MaxCodecID || !s.peerCodec[id] || s.codecs[id] == nil {
		return 0
	}
	return id
}

// enqueueCoded queues st's whole message for the writer to encode. It reports false, and
// queues nothing, when the retention budget is full: the caller sends identity instead.
func (s *Session) enqueueCoded(st *Stream, raw []byte, codec uint8) (bool, error) {
	cost := len(raw) + retainOverhead
	s.mu.Lock()
	if s.retained > 0 && s.retained+cost > s.cfg.CodecRetention {
		s.mu.Unlock()
		s.m.fallbacks[fbRetentionFull].Inc()
		return false, nil
	}
	if err := s.assignIDLocked(st); err != nil {
		s.mu.Unlock()
		return false, err
	}
	s.retainLocked(cost)
	st.codedRec = codedMsg{st: st, raw: raw, codec: codec, cost: cost} // a stream codes one message: enqueued once
	st.coded = &st.codedRec
	s.enterRingLocked(st)
	s.mu.Unlock()
	st.queuedLocked()
	return true, nil
}

func (s *Session) retainLocked(n int) {
	s.retained += n
	s.m.retained.Add(float64(n))
}

func (s *Session) releaseLocked(n int) {
	s.retained -= n
	s.m.retained.Sub(float64(n))
}

// newEpoch starts the epoch after e unless that happened already. Every encoder is then
// recreated (the writer notices the new epoch), and the peer starts fresh decoders when it
// sees the first message of it.
func (s *Session) newEpoch(e uint64) {
	s.mu.Lock()
	bumped := s.sendEpoch == e
	if bumped {
		s.sendEpoch++
		e = s.sendEpoch
	}
	s.mu.Unlock()
	if bumped {
		s.m.setEpoch(s, e)
	}
}

// encode encodes raw with the writer-owned encoder of codec for epoch.
func (s *Session) encode(codec uint8, epoch uint64, raw []byte) ([]byte, error) {
	if epoch != s.encEpoch {
		clear(s.encs[:])
		s.encEpoch = epoch
	}
	enc := s.encs[codec]
	if enc == nil {
		var err error
		if enc, err = s.codecs[codec].NewEncoder(); err != nil {
			return nil, err
		}
		s.encs[codec] = enc
	}
	t0 := time.Now()
	out, err := enc.Encode(s.encBuf[:0], raw)
	s.m.encodeSec.Observe(time.Since(t0).Seconds())
	return out, err
}

// writeCoded encodes a queued message and writes all its frames back to back, so the peer
// decodes coded messages in the order they were encoded. It runs on the writer, which took
// the message from the ring: from there on the message is committed (encoded and sent
// whole, even if the stream is reset meanwhile, so that both ends' codec state stays in
// step). If the payload does not fit the stream's window or encoding fails, the message
// goes identity instead, and a new epoch starts because the encoder may already hold it.
func (s *Session) writeCoded(it outItem) (ended bool, err error) {
	m, st := it.coded, it.coded.st
	pre := frame.Preamble{Codec: m.codec, Epoch: it.epoch}
	payload, err := s.encode(m.codec, it.epoch, m.raw)
	fallback := -1
	var size int64
	if err != nil {
		fallback = fbEncodeError
	} else {
		size = int64(pre.Len() + len(payload) + frame.TrailerLen)
		st.mu.Lock()
		if st.swindow >= size {
			st.swindow -= size
		} else {
			fallback = fbWindow
		}
		st.mu.Unlock()
	}
	if cap(payload) <= 4<<20 {
		s.encBuf = payload[:0] // reused for the next message once this one is written
	}
	if fallback >= 0 {
		s.newEpoch(it.epoch)
		s.m.fallbacks[fallback].Inc()
		s.mu.Lock()
		s.releaseLocked(m.cost)
		id := st.id
		s.mu.Unlock()
		return false, s.fallbackIdentity(st, id, m.raw, it.ack) // its end goes as identity
	}

	s.mu.Lock()
	id := st.id
	e := &st.sentRec // written once per stream, as its one coded message is
	*e = sentCoded{st: st, id: id, raw: m.raw, cost: m.cost, size: size, epoch: it.epoch}
	s.sent = append(s.sent, e)
	s.sentByID[id] = e
	s.mu.Unlock()

	pre.Ack = it.ack
	crc := crc32.Checksum(m.raw, castagnoli)
	limit := st.maxData()
	rest := payload
	for first := true; ; first = false {
		n := min(len(rest), limit)
		chunk := rest[:n]
		rest = rest[n:]
		last := len(rest) == 0
		h := frame.Header{Type: frame.TypeData, StreamID: id}
		var head []byte
		if first {
			h.Flags |= frame.FlagStart
			head = pre.Append(s.hdrBuf[frame.HeaderLen:frame.HeaderLen])
		}
		var tail []byte
		if last {
			h.Flags |= frame.FlagEnd
			tail = frame.AppendTrailer(s.trailerBuf[:0], crc)
		}
		if err := s.writeFrame(h, head, chunk, tail); err != nil {
			return false, err
		}
		if last {
			break
		}
	}
	s.m.codecSent[m.codec].add(len(m.raw), len(payload))
	return true, nil
}

// fallbackIdentity sends a message the writer could not code as identity. The rest may have
// to wait for window credit, so it goes on a goroutine; but the START frame is written here
// and now, in the message's place: ids must first appear on the wire in increasing order,
// or the peer would take this stream's START, arriving after a later stream's, for a late
// frame of a finished stream.
func (s *Session) fallbackIdentity(st *Stream, id uint32, raw []byte, ack uint64) error {
	pre := frame.Preamble{Ack: ack}
	st.mu.Lock()
	// A fresh direction's window is at least 1024 bytes, so the bare preamble always fits.
	alive := st.werr == nil && st.swindow >= int64(pre.Len()-pre.AckLen())
	if alive {
		st.swindow -= int64(pre.Len() - pre.AckLen())
		st.sstarted, st.scrc, st.sentBytes = true, 0, 0
	}
	st.mu.Unlock()
	switch {
	case alive:
		head := pre.Append(s.hdrBuf[frame.HeaderLen:frame.HeaderLen])
		if err := s.writeFrame(frame.Header{Type: frame.TypeData, Flags: frame.FlagStart, StreamID: id}, head, nil, nil); err != nil {
			return err
		}
	case ack > 0: // the stream was reset: nothing of it is sent, but the ack must go out
		if err := s.write(ctrlFrame(frame.TypeCodecAck, 0, 0, frame.AppendCodecAck(nil, ack))); err != nil {
			return err
		}
	}
	st.sendIdentity(raw, 0, alive, nil)
	return nil
}

// writeFrame writes one frame given in parts. head, if any, must live in
// s.hdrBuf[HeaderLen:], where the header is then put in front of it.
func (s *Session) writeFrame(h frame.Header, head, data, tail []byte) error {
	h.Length = uint32(len(head) + len(data) + len(tail))
	var hdr []byte
	if h.Compactable() {
		hdr = s.appendHeader(s.cbuf[:0], h)
	} else {
		hdr = h.Append(s.hdrBuf[:0])
		hdr = append(hdr, head...) // in place when head already sits behind the header
		head = nil
	}
	s.m.countFrameOf(&s.m.sent, h.Type, len(hdr)+len(head)+len(data)+len(tail))
	var err error
	for _, p := range [...][]byte{hdr, head, data, tail} {
		if len(p) > 0 && err == nil {
			_, err = s.bw.Write(p)
		}
	}
	if err != nil {
		s.closeWithError(fmt.Errorf("tunnel: write: %w", err))
	}
	return err
}

// writeWithAck writes a queued identity START frame with ack added to its preamble. The
// ack is not flow-controlled, so the stream's window accounting is unchanged.
func (s *Session) writeWithAck(q queued, ack uint64) error {
	pre := q.pre
	pre.Ack = ack
	head := pre.Append(s.hdrBuf[frame.HeaderLen:frame.HeaderLen])
	err := s.writeFrame(q.h, head, q.payload[q.preLen:], nil)
	putBuf(q.payload)
	return err
}

// handleAcks processes the acknowledgement of n coded messages (oldest first).
func (s *Session) handleAcks(n uint64) error {
	s.mu.Lock()
	if out := uint64(len(s.sent) - s.sentHead); n > out {
		s.mu.Unlock()
		return fmt.Errorf("%w: ack of %d coded messages with %d outstanding", frame.ErrBadPayload, n, out)
	}
	done := s.ackScratch[:0]
	for range n {
		e := s.sent[s.sentHead]
		s.sent[s.sentHead] = nil
		s.sentHead++
		if !e.nacked {
			delete(s.sentByID, e.id)
			s.releaseLocked(e.cost)
			done = append(done, e.st)
		}
	}
	if s.sentHead == len(s.sent) {
		s.sent, s.sentHead = s.sent[:0], 0
	} else if s.sentHead > 64 && s.sentHead*2 > len(s.sent) {
		k := copy(s.sent, s.sent[s.sentHead:])
		clear(s.sent[k:])
		s.sent, s.sentHead = s.sent[:k], 0
	}
	s.mu.Unlock()
	for i, st := range done {
		st.delivered.Fire()
		st.codedResolved()
		done[i] = nil
	}
	s.ackScratch = done[:0]
	if s.closing.Load() {
		s.wake() // CloseGracefully waits for every coded message to be acknowledged
	}
	return nil
}

// handleNack processes the peer's rejection of the coded message of stream id: start a
// new epoch if it was sent in the current one, and resend the message as identity.
func (s *Session) handleNack(id uint32, epoch uint64) error {
	if id == 0 {
		return fmt.Errorf("%w: CODEC_NACK on stream 0", frame.ErrBadPayload)
	}
	s.mu.Lock()
	e := s.sentByID[id]
	if e == nil {
		st := s.streams[id]
		s.mu.Unlock()
		s.m.nackErrors.Inc()
		if st != nil {
			st.fail(&StreamError{Code: frame.CodeInternal,
				Reason: fmt.Sprintf("peer rejected a coded message (epoch %d) this side is not awaiting an acknowledgement for", epoch)}, true)
		}
		return nil
	}
	if e.epoch != epoch {
		s.mu.Unlock()
		return fmt.Errorf("%w: CODEC_NACK for stream %d names epoch %d, the message was sent in epoch %d", frame.ErrBadPayload, id, epoch, e.epoch)
	}
	delete(s.sentByID, id)
	e.nacked = true
	raw := e.raw
	e.raw = nil
	s.releaseLocked(e.cost)
	s.mu.Unlock()
	s.newEpoch(epoch)
	e.st.sendIdentity(raw, e.size, false, s.m.resends)
	return nil
}

// startCoded begins assembling a coded message whose START frame carried data (after the
// preamble) worth credit window bytes.
func (s *Session) startCoded(h frame.Header, st *Stream, pre frame.Preamble, data []byte, credit int64) error {
	limit := int64(s.local.Window)
	if st != nil {
		st.mu.Lock()
		if st.rerr == nil {
			if st.rdone {
				st.mu.Unlock()
				return fmt.Errorf("%w: stream %d: DATA after END", frame.ErrBadPayload, h.StreamID)
			}
			if st.rstarted {
				st.mu.Unlock()
				return fmt.Errorf("%w: stream %d: second START", frame.ErrBadPayload, h.StreamID)
			}
			limit = st.rwindow
		}
		st.mu.Unlock()
	}
	s.asm = assembly{active: true, id: h.StreamID, st: st, codec: pre.Codec, epoch: pre.Epoch,
		limit: limit, buf: s.asm.buf[:0]}
	return s.addCoded(h, data, credit)
}

// continueCoded takes the next frame of the coded message being assembled.
func (s *Session) continueCoded(h frame.Header, p []byte) error {
	if h.StreamID != s.asm.id {
		return fmt.Errorf("%w: DATA for stream %d inside the coded message of stream %d (coded messages are contiguous)",
			frame.ErrBadPayload, h.StreamID, s.asm.id)
	}
	if h.Flags.Has(frame.FlagStart) {
		return fmt.Errorf("%w: stream %d: second START", frame.ErrBadPayload, h.StreamID)
	}
	return s.addCoded(h, p, int64(len(p)))
}

func (s *Session) addCoded(h frame.Header, data []byte, credit int64) error {
	a := &s.asm
	a.credit += credit
	if a.credit > a.limit {
		return fmt.Errorf("%w: stream %d: coded message of %d bytes with window %d", errFlowControl, a.id, a.credit, a.limit)
	}
	if h.Flags.Has(frame.FlagEnd) && len(data) < frame.TrailerLen {
		return fmt.Errorf("%w: trailer truncated", frame.ErrBadPayload)
	}
	a.buf = append(a.buf, data...)
	if h.Flags.Has(frame.FlagEnd) {
		s.endCoded()
	}
	return nil
}

// endCoded decodes the assembled message (whatever became of its stream, so that the codec
// state stays in step), then delivers it or rejects it with CODEC_NACK, and counts it for
// the acknowledgement either way.
func (s *Session) endCoded() {
	a := &s.asm
	a.active = false
	payload, want, _ := frame.ParseTrailer(a.buf) // addCoded checked the length
	msg, reason, why := s.decodeCoded(a.codec, a.epoch, payload, want)
	if reason >= 0 {
		s.m.resyncs[reason].Inc()
	} else {
		s.m.codecRecv[a.codec].add(len(msg), len(payload))
	}
	s.mu.Lock()
	if reason >= 0 {
		s.sendControlLocked(frame.TypeCodecNack, 0, a.id, frame.AppendCodecNack(nil, a.epoch, why))
	}
	s.codedProcessedLocked()
	s.mu.Unlock()
	s.wake()
	switch {
	case reason < 0 && a.st != nil:
		a.st.deliverCoded(msg, a.credit, a.codec)
	case reason < 0:
		putBuf(pooledOnly(msg)) // its stream is gone; decoded only to keep in step
	}
	a.st = nil
	if cap(a.buf) > maxKeptAssembly {
		a.buf = nil
	}
}

// decodeCoded decodes one coded message in wire order. On failure it returns the resync
// reason (≥ 0) and a reason text for the CODEC_NACK; the message is then dropped.
func (s *Session) decodeCoded(codec uint8, epoch uint64, payload []byte, want uint32) (msg []byte, reason int, why string) {
	c := s.codecs[codec]
	switch {
	case c == nil:
		// Not a desync (no state was touched), so the epoch stays usable.
		return nil, rsDecode, fmt.Sprintf("codec %d not offered in HELLO", codec)
	case epoch < s.recvEpoch.Load():
		return nil, rsStaleEpoch, fmt.Sprintf("epoch %d is older than the current %d", epoch, s.recvEpoch.Load())
	case epoch > s.recvEpoch.Load():
		s.recvEpoch.Store(epoch)
		s.recvBroken = false
		clear(s.decs[:])
	}
	if s.recvBroken {
		return nil, rsStaleEpoch, fmt.Sprintf("epoch %d is out of step since an earlier message", epoch)
	}
	dec := s.decs[codec]
	if dec == nil {
		var err error
		if dec, err = c.NewDecoder(s.cfg.MaxCodedMessage); err != nil {
			s.breakEpoch()
			return nil, rsDecode, "new decoder: " + err.Error()
		}
		s.decs[codec] = dec
	}
	t0 := time.Now()
	// Into a pooled frame buffer: most messages fit, and a decoder growing its output
	// from nothing allocated six to eight times per message. The stream returns the
	// buffer to the pool once its reader has copied the message out (deliverCoded).
	msg, err := dec.Decode(getBuf(), payload)
	s.m.decodeSec.Observe(time.Since(t0).Seconds())
	switch {
	case err != nil:
		putBuf(pooledOnly(msg))
		s.breakEpoch()
		return nil, rsDecode, "decode: " + err.Error()
	case len(msg) > s.cfg.MaxCodedMessage:
		s.breakEpoch()
		return nil, rsDecode, fmt.Sprintf("decoded message of %d bytes exceeds max_coded %d", len(msg), s.cfg.MaxCodedMessage)
	case crc32.Checksum(msg, castagnoli) != want:
		putBuf(pooledOnly(msg))
		s.breakEpoch()
		return nil, rsChecksum, "decoded message does not match its CRC-32C"
	}
	return msg, -1, ""
}

// breakEpoch marks the receive epoch out of step: every later message of it is rejected
// until the peer moves to a new epoch.
func (s *Session) breakEpoch() {
	s.recvBroken = true
	clear(s.decs[:])
}

// codedProcessedLocked counts one coded message processed (decoded or rejected) for the
// acknowledgement. It goes out in the next START preamble the writer writes, or in a
// CODEC_ACK after ackDelay (at once when ackBatch are pending). s.mu is held, so an ack
// is queued after any CODEC_NACK for the messages it covers.
func (s *Session) codedProcessedLocked() {
	s.acksPending++
	if s.acksPending >= ackBatch {
		s.queueAckLocked()
		return
	}
	if !s.ackArmed {
		s.ackArmed = true
		if s.ackTimer == nil {
			s.ackTimer = time.AfterFunc(ackDelay, s.ackTimeout)
		} else {
			s.ackTimer.Reset(ackDelay)
		}
	}
}

func (s *Session) queueAckLocked() {
	if s.acksPending == 0 {
		return
	}
	s.sendControlLocked(frame.TypeCodecAck, 0, 0, frame.AppendCodecAck(nil, s.acksPending))
	s.acksPending = 0
}

func (s *Session) ackTimeout() {
	s.mu.Lock()
	s.ackArmed = false
	s.queueAckLocked()
	s.mu.Unlock()
	s.wake()
}

// sendIdentity sends raw as the stream's whole message, as identity, on a goroutine of
// the session: the normal flow-controlled path, which may wait for window credit. It is
// how a coded message is resent after a CODEC_NACK (restore: the window the rejected
// frames consumed, which the receiver restored too) and how the writer falls back (started:
// the writer wrote the START frame). Nothing is sent for a dead stream; count, if not nil,
// counts what is.
func (st *Stream) sendIdentity(raw []byte, restore int64, started bool, count prometheus.Counter) {
	st.mu.Lock()
	st.codedOut = false
	if st.werr != nil {
		st.mu.Unlock()
		return
	}
	if count != nil {
		count.Inc()
	}
	st.swindow += restore
	st.resending = true
	if !started {
		st.sstarted, st.scrc, st.sentBytes = false, 0, 0
	}
	st.mu.Unlock()
	if restore > 0 {
		signal(st.ssig)
	}
	s := st.s
	s.mu.Lock()
	s.resendsActive++
	s.mu.Unlock()
	s.wg.Add(1) // a loop is running (it called us), so Close is not past its Wait
	go func() {
		defer s.wg.Done()
		st.mu.Lock()
		err := st.emitAllLocked(raw, true)
		st.resending = false
		st.mu.Unlock()
		s.mu.Lock()
		s.resendsActive--
		s.mu.Unlock()
		s.wake()
		if err != nil {
			st.fail(err, true)
			return
		}
		st.codedResolved()
	}()
}

// codedResolved is called when the stream's coded message was acknowledged or resent: a
// stream whose exchange is over is forgotten now.
func (st *Stream) codedResolved() {
	st.mu.Lock()
	st.codedOut = false
	wanted := st.finishWanted && !st.resending
	st.mu.Unlock()
	if wanted {
		st.finish()
	}
}

// deliverCoded hands a decoded message to the stream as one chunk; credit is the window
// its coded frames used.
func (st *Stream) deliverCoded(msg []byte, credit int64, codec uint8) {
	st.mu.Lock()
	if st.rerr != nil {
		st.mu.Unlock()
		putBuf(pooledOnly(msg))
		return
	}
	st.rwindow -= credit
	st.rstarted, st.rdone, st.codec = true, true, codec
	if len(msg) > 0 {
		st.chunks = append(st.chunks, chunk{data: msg, buf: pooledOnly(msg), credit: uint32(credit)})
	} else {
		st.credit += uint32(credit)
		putBuf(pooledOnly(msg))
	}
	finished := st.sdone
	st.mu.Unlock()
	signal(st.rsig)
	if finished {
		st.finish()
	}
}

// logFormatMismatch warns about the codecs both gateways have in different wire formats.
// The session works, with a codec both agree on, but not with the one the operator chose:
// typically gateways of two releases during an upgrade, or different zstd dictionaries.
func logFormatMismatch(log *slog.Logger, s *Session, peer string) {
	for _, id := range s.FormatMismatches() {
		log.Warn("codec not used on this tunnel connection: the peer speaks another wire format of it (another soapgw release, or another zstd dictionary)",
			"codec", s.cfg.codecName(id), "format", s.codecs[id].Format(), "peer_format", s.peer.FormatOf(id),
			"peer", peer, "peer_node", s.peer.Node)
	}
}
