package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// Session is one tunnel connection: many streams over one net.Conn.
type Session struct {
	conn   net.Conn
	cfg    *Config
	client bool // dialing side: opens odd stream ids
	local  frame.Hello
	peer   frame.Hello
	m      *sessionMetrics

	br *bufio.Reader
	bw *bufio.Writer

	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu         sync.Mutex
	streams    map[uint32]*Stream
	nextID     uint32 // next id this side assigns
	lastPeerID uint32 // highest stream id the peer opened and we accepted
	goAwaySent bool
	goAwayRecv bool
	ctrlQ      []queued  // control frames, written before any DATA
	ring       []*Stream // streams with pending DATA frames or a coded message, served one item each in turn
	ringHead   int
	ringBulk   int // streams in the ring marked bulk (Stream.SetBulk)
	ringUrgent int // the other streams in the ring: someone waits on them
	numOpen    int // streams opened by this side and not yet finished
	lingering  int // streams whose exchange is over, kept until their coded message is acknowledged

	// Codecs (codec.go). Fixed after the handshake:
	codecs         [frame.MaxCodecID + 1]MessageCodec // local codecs by id
	peerCodec      [frame.MaxCodecID + 1]bool         // ids the peer decodes, in our format
	formatMismatch []uint8                            // ids both have, in different formats
	peerDecodesFn  func(uint8) bool
	codedLimit     int         // largest message coded whole: min(MaxCodedMessage, peer's max_coded); 0: none
	streamOut      StreamCodec // codes messages too large or flushed, if the peer decodes it in our format
	streamInID     uint8       // id of our StreamCodec (0: none): START frames with it are streamed in
	// Guarded by mu:
	sendEpoch     uint64
	retained      int          // CodecRetention bytes reserved by queued and unacknowledged coded messages
	sent          []*sentCoded // coded messages written and not yet acknowledged, oldest first
	sentHead      int          // sent[:sentHead] are acknowledged
	sentByID      map[uint32]*sentCoded
	acksPending   uint64 // coded messages received and processed, not yet acknowledged
	ackArmed      bool
	ackTimer      *time.Timer
	resendsActive int // identity sends running on their own goroutine (sendIdentity)
	// writeTok holds the writer's token (capacity 1): whoever took it owns bw and the
	// fields below. sendLoop takes it when woken; a stream operation that queued frames
	// takes it if it is free and writes them itself (kick), which saves a goroutine
	// hand-off per message. A channel, not a mutex: waiting for it is a durable block
	// (testing/synctest), and sendLoop can give up waiting when the session ends.
	writeTok  chan struct{}
	bulkTimer *time.Timer // holdBulk's, owned by sendLoop
	ctrlOut   []queued    // control frames taken from ctrlQ, being written
	sentOut   []*Stream   // streams whose message's last frame is written, flushed next
	// Owned by the writer (writeTok):
	encs       [frame.MaxCodecID + 1]MessageEncoder
	encEpoch   uint64
	encBuf     []byte
	hdrBuf     []byte
	cbuf       [8]byte               // a compact header being written (writer only)
	hdrOut     [frame.HeaderLen]byte // a header being written by write (writer only)
	compactOut uint32                // stream id of the last compact header written (writer only)
	compactIn  uint32                // stream id of the last compact header read (recvLoop only)
	trailerBuf [frame.TrailerLen]byte
	// Owned by recvLoop:
	asm        assembly
	recvEpoch  atomic.Uint64 // written only by recvLoop; atomic so that tests can read it
	recvBroken bool
	decs       [frame.MaxCodecID + 1]MessageDecoder
	ackScratch []*Stream

	wsignal  chan struct{} // wakes sendLoop; capacity 1
	acceptCh chan *Stream

	goAwayCh chan struct{}          // closed when the peer sends GOAWAY
	closing  atomic.Bool            // CloseGracefully: close once everything queued is written
	onFree   atomic.Pointer[func()] // called when a stream finishes (Peer wakes waiters)
	lastRecv atomic.Int64           // unix nanos of the last read that returned bytes
	out      progressWriter         // under bw: write deadlines that measure progress
	rtt      atomic.Int64           // nanos, last measured
	pingSent atomic.Int64           // unix nanos of the outstanding PING, 0 if none
}

// frameBufSize is the capacity of pooled frame buffers: a default DATA frame (16 KiB of
// message bytes) with its header, preamble and trailer.
const frameBufSize = 16<<10 + 64

// bufPool holds frame buffers, each behind a *[]byte so that pooling it boxes nothing;
// the emptied *[]byte of a buffer taken out waits in slicePool for the next one put
// back. (Putting &b for each buffer cost an allocation per frame, two per exchange.)
var (
	bufPool   = sync.Pool{New: func() any { b := make([]byte, 0, frameBufSize); return &b }}
	slicePool = sync.Pool{New: func() any { return new([]byte) }}
)

func getBuf() []byte {
	p := bufPool.Get().(*[]byte)
	b := (*p)[:0]
	*p = nil
	slicePool.Put(p)
	return b
}

// putBuf recycles a frame buffer. Only frame-sized buffers go back, so getBuf can rely on
// the capacity; right-sized control frames and oversized payloads are left to the GC.
func putBuf(b []byte) {
	if cap(b) >= frameBufSize {
		p := slicePool.Get().(*[]byte)
		*p = b[:0]
		bufPool.Put(p)
	}
}

// pooledOnly returns b if it is a buffer of the pool's size (one getBuf gave that was
// never grown), nil otherwise: a decoded message that outgrew its pooled buffer is not
// kept in the pool at its new size.
func pooledOnly(b []byte) []byte {
	if cap(b) == frameBufSize {
		return b
	}
	return nil
}

func (s *Session) String() string {
	return fmt.Sprintf("session(%s->%s %s)", s.conn.LocalAddr(), s.conn.RemoteAddr(), s.peer.Node)
}

// ClientSession runs the handshake on conn as the dialing side and returns a running session.
func ClientSession(ctx context.Context, conn net.Conn, cfg *Config, m *Metrics, peerLabel string) (*Session, error) {
	return newSession(ctx, conn, cfg, true, m, peerLabel)
}

// ServerSession runs the handshake on conn as the accepting side and returns a running session.
func ServerSession(ctx context.Context, conn net.Conn, cfg *Config, m *Metrics) (*Session, error) {
	return newSession(ctx, conn, cfg, false, m, "")
}

func newSession(ctx context.Context, conn net.Conn, cfg *Config, client bool, m *Metrics, peerLabel string) (*Session, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		// Frames are batched by sendLoop; Nagle would only add delay (seed 003 §6.5).
		_ = tc.SetNoDelay(true)
	}
	s := &Session{
		conn:     conn,
		cfg:      cfg,
		client:   client,
		local:    cfg.hello(),
		out:      progressWriter{conn: conn},
		streams:  make(map[uint32]*Stream),
		wsignal:  make(chan struct{}, 1),
		writeTok: make(chan struct{}, 1),
		acceptCh: make(chan *Stream, cfg.MaxStreams),
		goAwayCh: make(chan struct{}),
	}
	s.writeTok <- struct{}{}
	s.br = bufio.NewReaderSize(progressReader{conn, &s.lastRecv}, 64<<10)
	s.bw = bufio.NewWriterSize(&s.out, 64<<10)
	if client {
		s.nextID = 1
	} else {
		s.nextID = 2
	}
	if err := s.handshake(ctx); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if peerLabel == "" {
		peerLabel = s.peer.Node
	}
	s.initCodecs()
	s.m = m.session(peerLabel, cfg)
	m.formatMismatches(peerLabel, cfg, s.formatMismatch)
	s.m.setEpoch(s, s.sendEpoch)
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.lastRecv.Store(time.Now().UnixNano())
	s.m.up.Inc()
	s.out.timeout = s.cfg.WriteTimeout // the handshake's own deadline is over
	s.wg.Add(2)
	go s.recvLoop()
	go s.sendLoop()
	if cfg.KeepaliveInterval > 0 {
		s.wg.Add(1)
		go s.keepaliveLoop()
	}
	return s, nil
}

// handshake sends our HELLO and reads the peer's, both bounded by HandshakeTimeout or ctx.
func (s *Session) handshake(ctx context.Context) error {
	dl := time.Now().Add(s.cfg.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = s.conn.SetDeadline(dl)
	defer s.conn.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	payload := frame.AppendHello(nil, s.local)
	b := frame.Header{Length: uint32(len(payload)), Type: frame.TypeHello}.Append(nil)
	// Write concurrently with the read: on a synchronous conn (net.Pipe) both sides
	// writing first would deadlock.
	werr := make(chan error, 1)
	go func() { _, err := s.conn.Write(append(b, payload...)); werr <- err }()
	if err := s.readHello(); err != nil {
		return err
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("%w: send hello: %w", ErrHandshake, err)
	}
	return s.checkPeer()
}

func (s *Session) readHello() error {
	var hb [frame.HeaderLen]byte
	if _, err := io.ReadFull(s.br, hb[:]); err != nil {
		return fmt.Errorf("%w: read hello: %w", ErrHandshake, err)
	}
	h, err := frame.ParseHeader(hb[:], frame.MaxHello)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	if h.Type != frame.TypeHello {
		return fmt.Errorf("%w: first frame is %s, not HELLO (is the peer a soapgw tunnel port?)", ErrHandshake, h.Type)
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(s.br, p); err != nil {
		return fmt.Errorf("%w: read hello: %w", ErrHandshake, err)
	}
	peer, err := frame.ParseHello(p)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	s.peer = peer
	return nil
}

func (s *Session) checkPeer() error {
	peer := s.peer
	if peer.Proto != frame.Proto {
		reason := fmt.Sprintf("protocol version %d, want %d", peer.Proto, frame.Proto)
		g := frame.AppendGoAway(nil, 0, frame.CodeProtocol, reason)
		_, _ = s.conn.Write(append(frame.Header{Length: uint32(len(g)), Type: frame.TypeGoAway}.Append(nil), g...))
		return fmt.Errorf("%w: peer %q speaks %s", ErrHandshake, peer.Node, reason)
	}
	return nil
}

// initCodecs sets up the codec state both ends start with: epoch 1, fresh encoders and
// decoders, nothing retained.
func (s *Session) initCodecs() {
	shared := false
	for _, mc := range s.cfg.Codecs {
		s.codecs[mc.ID()] = mc
	}
	for _, id := range s.peer.Codecs {
		if id == 0 || id > frame.MaxCodecID {
			continue
		}
		if mc := s.codecs[id]; mc != nil && mc.Format() != s.peer.FormatOf(id) {
			// Same codec, different wire format (another release, another zstd
			// dictionary): the peer could not decode what we send, nor we what it sends.
			s.formatMismatch = append(s.formatMismatch, id)
			continue
		}
		s.peerCodec[id] = true
		shared = shared || s.codecs[id] != nil
	}
	if shared {
		s.codedLimit = min(s.cfg.MaxCodedMessage, int(s.peer.MaxCoded))
	}
	if sc := s.cfg.StreamCodec; sc != nil {
		s.streamInID = sc.ID()
		if slices.Contains(s.peer.Codecs, sc.ID()) {
			if sc.Format() == s.peer.FormatOf(sc.ID()) {
				s.streamOut = sc
			} else {
				s.formatMismatch = append(s.formatMismatch, sc.ID())
			}
		}
	}
	s.peerDecodesFn = s.peerDecodes
	s.sendEpoch = 1
	s.recvEpoch.Store(1)
	s.sentByID = map[uint32]*sentCoded{}
	s.hdrBuf = make([]byte, 0, 64)
}

// Peer returns the peer's HELLO.
func (s *Session) Peer() frame.Hello { return s.peer }

// FormatMismatches lists the codecs both sides have but in different wire formats, which
// this session does not use.
func (s *Session) FormatMismatches() []uint8 { return s.formatMismatch }

// PeerSupports reports whether the peer decodes codec id in this side's format.
func (s *Session) PeerSupports(id uint8) bool { return s.peerDecodes(id) }

// Context is cancelled when the session closes; context.Cause gives the reason.
func (s *Session) Context() context.Context { return s.ctx }

// RTT is the round-trip time measured by the last keepalive PING (0 before the first).
func (s *Session) RTT() time.Duration { return time.Duration(s.rtt.Load()) }

// NumStreams is the number of streams in progress, including finished exchanges whose
// coded message the peer has not acknowledged yet.
func (s *Session) NumStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams) + s.numOpen
}

// Draining reports whether either side announced GOAWAY.
func (s *Session) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.goAwayRecv || s.goAwaySent
}

// LocalAddr and RemoteAddr of the underlying connection.
func (s *Session) LocalAddr() net.Addr  { return s.conn.LocalAddr() }
func (s *Session) RemoteAddr() net.Addr { return s.conn.RemoteAddr() }

// OpenStream starts a new exchange. No frame is sent until the first Write/CloseWrite.
func (s *Session) OpenStream(ctx context.Context) (*Stream, error) { return s.openStream(ctx, false) }

// OpenBulkStream starts an exchange nobody waits on (a one-way delivery; the stream is
// SetBulk), and only while the session has BulkLimit's reserve free: bulk streams
// never take the streams an ordinary exchange needs, however many a spool has waiting.
// At the bulk limit it fails with ErrStreamLimit.
func (s *Session) OpenBulkStream(ctx context.Context) (*Stream, error) {
	return s.openStream(ctx, true)
}

// BulkLimit is the streams of a connection whose peer allows maxStreams that bulk
// streams may fill: all but a thirty-second (32 of the default 1,024; at least one),
// which stays free for exchanges someone waits on. Those then run at once beside a
// spool's backlog instead of waiting for a delivery to end or for an extra connection's
// handshake (on a slow link, several round trips through the queue the deliveries fill);
// more of them than that still get an extra connection, as at the stream limit. The
// reserve costs a backlog its share of the window where the deliveries in flight bound
// its pace (gprs and 3g: a sixteenth cost 7 % on gprs), so it is kept small.
func BulkLimit(maxStreams uint32) uint32 {
	if maxStreams <= 1 {
		return 1
	}
	return maxStreams - max(maxStreams/32, 1)
}

// hasRoom reports whether the session would take a stream (a bulk one: below BulkLimit)
// from Peer.OpenStream now: it is up, not draining, and under the peer's limit.
func (s *Session) hasRoom(bulk bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return context.Cause(s.ctx) == nil && !s.goAwayRecv && !s.goAwaySent && s.usedLocked() < s.limitLocked(bulk)
}

// usedLocked is the streams that count against the peer's limit. s.mu is held.
func (s *Session) usedLocked() uint32 { return uint32(len(s.streams) - s.lingering + s.numOpen) }

// limitLocked is the peer's stream limit, or its bulk limit. s.mu is held.
func (s *Session) limitLocked(bulk bool) uint32 {
	if bulk {
		return BulkLimit(s.peer.MaxStreams)
	}
	return s.peer.MaxStreams
}

func (s *Session) openStream(ctx context.Context, bulk bool) (*Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := context.Cause(s.ctx); err != nil {
		return nil, &refusedError{fmt.Errorf("%w: %w", ErrSessionClosed, err)}
	}
	if s.goAwayRecv {
		return nil, &refusedError{ErrGoAway}
	}
	if s.usedLocked() >= s.limitLocked(bulk) {
		return nil, &refusedError{ErrStreamLimit}
	}
	s.numOpen++
	st := newStream(s, 0, s.peer.Window)
	st.bulk = bulk
	return st, nil
}

// AcceptStream waits for the next stream the peer opens.
func (s *Session) AcceptStream(ctx context.Context) (*Stream, error) {
	select {
	case st := <-s.acceptCh:
		return st, nil
	case <-s.ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrSessionClosed, context.Cause(s.ctx))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// GoAway tells the peer this side accepts no new streams; streams already accepted go on.
func (s *Session) GoAway(code frame.Code, reason string) {
	s.mu.Lock()
	if s.goAwaySent {
		s.mu.Unlock()
		return
	}
	s.goAwaySent = true
	last := s.lastPeerID
	s.mu.Unlock()
	s.sendControl(frame.TypeGoAway, 0, 0, frame.AppendGoAway(nil, last, code, reason))
}

// Close closes the session and waits for its goroutines. Streams in progress fail with
// ErrSessionClosed. Close is idempotent.
func (s *Session) Close() error {
	s.closeWithError(ErrSessionClosed)
	s.wg.Wait()
	return nil
}

// CloseGracefully writes every frame already queued (the last frames of finished
// exchanges, RSTs, GOAWAY), then closes the session. If ctx ends first it closes at once.
// Close alone would drop queued frames: an exchange whose handler has returned may still
// have its END frame waiting for the writer.
func (s *Session) CloseGracefully(ctx context.Context) error {
	s.closing.Store(true)
	s.wake()
	linger := time.NewTimer(maxLinger)
	defer linger.Stop()
	select {
	case <-s.ctx.Done(): // the peer read everything and closed
	case <-ctx.Done():
	case <-linger.C:
	}
	return s.Close()
}

// maxLinger bounds how long CloseGracefully waits for the peer to close after our last
// frame, whatever ctx allows: a peer that never closes must not hold a shutdown.
const maxLinger = 10 * time.Second

// Done is closed when the session is closed.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// GoAwayReceived is closed when the peer announced it takes no new streams.
func (s *Session) GoAwayReceived() <-chan struct{} { return s.goAwayCh }

// Err is why the session closed, or nil while it is open.
func (s *Session) Err() error { return context.Cause(s.ctx) }

// closeWithError tears the session down once; safe from any goroutine, including the loops.
func (s *Session) closeWithError(err error) {
	s.once.Do(func() {
		s.cancel(err)
		_ = s.conn.Close()
		s.m.up.Dec()
		s.mu.Lock()
		streams := make([]*Stream, 0, len(s.streams))
		for _, st := range s.streams {
			streams = append(streams, st)
		}
		s.streams = map[uint32]*Stream{}
		s.lingering = 0
		if s.ackTimer != nil {
			s.ackTimer.Stop()
		}
		s.mu.Unlock()
		s.m.setEpoch(s, 0)
		serr := fmt.Errorf("%w: %w", ErrSessionClosed, err)
		if errors.Is(err, ErrSessionClosed) {
			serr = err
		}
		for _, st := range streams {
			st.fail(serr, false)
		}
		// Messages awaiting acknowledgement can no longer be resent.
		s.mu.Lock()
		clear(s.sent)
		s.sent, s.sentHead, s.sentByID = nil, 0, map[uint32]*sentCoded{}
		s.releaseLocked(s.retained)
		s.mu.Unlock()
	})
}

// maxQueuedControl bounds control frames waiting for the writer. A peer that sends PINGs
// (or provokes RSTs) faster than it reads our answers would otherwise grow this queue
// without limit; past it the session is closed, as HTTP/2 servers do against such floods.
const maxQueuedControl = 1024

// errControlFlood closes a session whose peer provoked too many queued control frames.
var errControlFlood = errors.New("tunnel: peer provoked more than 1024 queued control frames without reading them")

// sendControl queues a control frame ahead of all DATA.
func (s *Session) sendControl(t frame.Type, fl frame.Flags, id uint32, payload []byte) {
	s.mu.Lock()
	s.sendControlLocked(t, fl, id, payload)
	s.mu.Unlock()
	s.wake()
}

// sendControlLocked queues a control frame; s.mu is held and the caller wakes sendLoop.
func (s *Session) sendControlLocked(t frame.Type, fl frame.Flags, id uint32, payload []byte) {
	if len(s.ctrlQ) >= maxQueuedControl {
		go s.closeWithError(errControlFlood)
		return
	}
	s.ctrlQ = append(s.ctrlQ, ctrlFrame(t, fl, id, payload))
}

// queued is a frame waiting for sendLoop: its header and its payload apart, so the writer
// chooses the header's form (full or compact) and adds acknowledgements to a preamble
// without parsing bytes it built itself.
type queued struct {
	h       frame.Header
	payload []byte         // preamble (START frames), message bytes, trailer (END frames)
	pre     frame.Preamble // a START frame's preamble, the first preLen bytes of payload
	preLen  int
}

// ctrlFrame queues a control frame. The payload is copied: callers may pass bytes they
// reuse (a PING answer echoes the read buffer), and the copy, right-sized, never enters
// the frame buffer pool.
func ctrlFrame(t frame.Type, fl frame.Flags, id uint32, payload []byte) queued {
	return queued{h: frame.Header{Length: uint32(len(payload)), Type: t, Flags: fl, StreamID: id}, payload: bytes.Clone(payload)}
}

func (s *Session) wake() {
	select {
	case s.wsignal <- struct{}{}:
	default:
	}
}

// enqueueData hands a DATA frame of st to the writer; build makes it once st has its id.
func (s *Session) enqueueData(st *Stream, build func(id uint32) queued) error {
	s.mu.Lock()
	if err := s.assignIDLocked(st); err != nil {
		s.mu.Unlock()
		return err
	}
	st.pending = append(st.pending, build(st.id))
	s.enterRingLocked(st)
	s.mu.Unlock()
	st.queuedLocked()
	return nil
}

// assignIDLocked checks that st may still send and gives a locally opened stream its id
// with its first frame, under the same lock that appends the frame to the ring, so ids
// reach the wire in increasing order as the peer requires.
func (s *Session) assignIDLocked(st *Stream) error {
	if err := context.Cause(s.ctx); err != nil {
		if st.id == 0 {
			return &refusedError{fmt.Errorf("%w: %w", ErrSessionClosed, err)}
		}
		return fmt.Errorf("%w: %w", ErrSessionClosed, err)
	}
	if st.id == 0 {
		if s.goAwayRecv {
			return &refusedError{ErrGoAway}
		}
		st.id = s.nextID
		s.nextID += 2
		s.numOpen--
		s.streams[st.id] = st
		s.m.streams.Inc()
	}
	return nil
}

// outItem is what sendLoop writes next after the control frames: a built DATA frame or a
// coded message to encode, and acknowledgements to piggyback on its START preamble.
type outItem struct {
	st      *Stream
	data    queued // a DATA frame, when hasData
	coded   *codedMsg
	hasData bool
	ack     uint64
	epoch   uint64 // for coded
}

// next takes the queued control frames and at most one DATA item, round-robin by stream.
func (s *Session) next(ctrl []queued) ([]queued, outItem) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctrl = append(ctrl[:0], s.ctrlQ...)
	clear(s.ctrlQ)
	s.ctrlQ = s.ctrlQ[:0]
	for s.ringHead < len(s.ring) {
		st := s.ring[s.ringHead]
		s.ring[s.ringHead] = nil
		s.ringHead++
		it := outItem{st: st}
		var start bool
		switch {
		case st.coded != nil:
			it.coded, it.epoch, start = st.coded, s.sendEpoch, true
			st.coded = nil
		case len(st.pending) > 0:
			it.data, it.hasData = st.pending[0], true
			start = it.data.h.Flags.Has(frame.FlagStart)
			st.pending[0] = queued{}
			st.pending = st.pending[1:]
		default: // reset while queued
			s.leaveRingLocked(st)
			continue
		}
		if len(st.pending) > 0 || st.coded != nil {
			s.ring = append(s.ring, st)
		} else {
			st.pending = nil
			s.leaveRingLocked(st)
		}
		if start && s.acksPending > 0 {
			it.ack, s.acksPending = s.acksPending, 0
		}
		if s.ringHead > 64 && s.ringHead*2 > len(s.ring) {
			// Under constant load the ring never empties: compact it so it cannot grow.
			n := copy(s.ring, s.ring[s.ringHead:])
			clear(s.ring[n:])
			s.ring, s.ringHead = s.ring[:n], 0
		}
		return ctrl, it
	}
	s.ring, s.ringHead = s.ring[:0], 0
	return ctrl, outItem{}
}

// sendLoop writes what the stream operations left queued: control frames (PING, window
// updates, RST, acknowledgements, GOAWAY), frames queued while another goroutine held
// the writer's token, and the rest of a backlog a kick left (see kick). It drains
// everything queued into the buffered writer and flushes once the queues are empty, so
// frames of concurrent exchanges share TCP segments and syscalls under load, while a
// lone exchange is flushed at once.
//
// It returns holding the token after a failed write or a graceful close, so nothing is
// written after those; when the session ends otherwise its connection is closed, and a
// stream operation's write fails at once.
func (s *Session) sendLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.wsignal:
		case <-s.ctx.Done():
			return
		}
		s.holdBulk()
		select {
		case <-s.writeTok:
		case <-s.ctx.Done():
			return
		}
		if ok, _ := s.drain(0); !ok {
			return
		}
		if s.closing.Load() && s.queueEmpty() {
			// Everything is written. Half-close instead of closing: a socket closed with
			// unread input (the peer's window updates) sends RST, and an RST makes the
			// peer's kernel drop the data it has not read yet: the end of the responses
			// this close was meant to deliver. recvLoop keeps reading until the peer,
			// having read everything, closes its side.
			if hc, ok := s.conn.(interface{ CloseWrite() error }); ok && hc.CloseWrite() == nil {
				return
			}
			s.closeWithError(ErrSessionClosed)
			return
		}
		s.writeTok <- struct{}{}
	}
}

// maxKickItems bounds what a stream operation writes for others when it holds the
// writer's token: under load the queue never empties, and the exchange that happened to
// take the token must get back to its own work. sendLoop writes the rest.
const maxKickItems = 16

// maxKickStreams is the most exchanges a connection may carry for a stream operation to
// write its frames itself. Beyond it sendLoop writes: by the time it runs, the frames of
// several exchanges may be queued and leave in one system call, the batching that pays
// under load, while a lone exchange saves the hand-off.
const maxKickStreams = 2

// kick writes the queued frames on the calling goroutine if no other goroutine is
// writing and the connection is not busy, else wakes sendLoop (which waits for the
// token and then writes them). Only stream operations call it, with no lock held: never
// recvLoop, which must keep reading whatever the connection's send side does.
func (s *Session) kick() {
	s.mu.Lock()
	busy := len(s.streams)-s.lingering > maxKickStreams
	s.mu.Unlock()
	if busy {
		s.wake()
		return
	}
	select {
	case <-s.writeTok:
	default:
		s.wake()
		return
	}
	ok, more := s.drain(maxKickItems)
	s.writeTok <- struct{}{}
	if ok && (more || s.closing.Load()) {
		s.wake() // the rest of the backlog, or the graceful close, is sendLoop's
	}
}

// drain writes the queued control frames and up to limit DATA items (0: until the
// queues are empty), then flushes. The caller holds the writer's token. ok is false when the connection
// failed (the session is closing); more reports that items were left queued.
func (s *Session) drain(limit int) (ok, more bool) {
	var it outItem
	for n := 0; ; n++ {
		if limit > 0 && n == limit {
			more = true
			break
		}
		s.ctrlOut, it = s.next(s.ctrlOut)
		if len(s.ctrlOut) == 0 && !it.hasData && it.coded == nil {
			break
		}
		for i, q := range s.ctrlOut {
			if err := s.write(q); err != nil {
				return false, false
			}
			s.ctrlOut[i] = queued{}
		}
		var err error
		ended := false // the item ends its stream's message (AfterSent)
		switch {
		case it.coded != nil:
			ended, err = s.writeCoded(it)
		case it.ack > 0:
			ended = it.data.h.Flags.Has(frame.FlagEnd)
			err = s.writeWithAck(it.data, it.ack)
		case it.hasData:
			ended = it.data.h.Flags.Has(frame.FlagEnd)
			err = s.write(it.data)
		}
		if err != nil {
			return false, false
		}
		if ended {
			s.sentOut = append(s.sentOut, it.st)
		}
	}
	if err := s.bw.Flush(); err != nil {
		s.closeWithError(fmt.Errorf("tunnel: write: %w", err))
		return false, false
	}
	for i, st := range s.sentOut {
		st.sent.Fire()
		s.sentOut[i] = nil
	}
	s.sentOut = s.sentOut[:0]
	return true, more
}

// queueEmpty reports whether everything is written and settled: no frame queued, every
// coded message acknowledged (a rejected one could not be resent after the close), no
// resend running, and our own acknowledgements sent (queued now if pending).
func (s *Session) queueEmpty() bool {
	s.mu.Lock()
	if s.acksPending > 0 {
		s.queueAckLocked()
		s.mu.Unlock()
		s.wake()
		return false
	}
	defer s.mu.Unlock()
	return len(s.ctrlQ) == 0 && s.ringHead == len(s.ring) && s.sentHead == len(s.sent) && s.resendsActive == 0
}

// write writes a queued frame, its header in the shortest form, and recycles its payload.
func (s *Session) write(q queued) error {
	hb := s.appendHeader(s.hdrOut[:0], q.h)
	s.m.countFrameOf(&s.m.sent, q.h.Type, len(hb)+len(q.payload))
	_, err := s.bw.Write(hb)
	if err == nil && len(q.payload) > 0 {
		_, err = s.bw.Write(q.payload)
	}
	putBuf(q.payload)
	if err != nil {
		s.closeWithError(fmt.Errorf("tunnel: write: %w", err))
	}
	return err
}

// appendHeader appends h's header in the shortest form: compact for small DATA frames
// (see frame.IsCompact). Only the writer (writeTok) calls it.
func (s *Session) appendHeader(dst []byte, h frame.Header) []byte {
	if !h.Compactable() {
		return h.Append(dst)
	}
	dst = h.AppendCompact(dst, s.compactOut)
	s.compactOut = h.StreamID
	return dst
}

// readHeader reads the next frame header, full or compact, and returns it with its size
// on the wire. Only recvLoop calls it, so compactIn needs no lock.
func (s *Session) readHeader(hb *[frame.HeaderLen]byte) (frame.Header, int, error) {
	b0, err := s.br.ReadByte()
	if err != nil {
		return frame.Header{}, 0, err
	}
	if frame.IsCompact(b0) {
		h, n, err := frame.ReadCompact(b0, s.br, s.compactIn, s.local.MaxFrame)
		if err != nil {
			return h, 0, err
		}
		s.compactIn = h.StreamID
		return h, 1 + n, nil
	}
	hb[0] = b0
	if _, err := io.ReadFull(s.br, hb[1:]); err != nil {
		return frame.Header{}, 0, err
	}
	h, err := frame.ParseHeader(hb[:], s.local.MaxFrame)
	return h, frame.HeaderLen, err
}

// recvLoop is the connection's only reader.
func (s *Session) recvLoop() {
	defer s.wg.Done()
	var hb [frame.HeaderLen]byte
	for {
		h, hlen, err := s.readHeader(&hb)
		if err != nil {
			if errors.Is(err, frame.ErrFrameTooLarge) || errors.Is(err, frame.ErrBadPayload) {
				s.protocolError(err)
			} else {
				s.closeWithError(readErr(err))
			}
			return
		}
		var p []byte
		if h.Length > 0 {
			// DATA payloads up to a frame buffer's size come from the pool; the stream
			// keeps the buffer until Read has consumed it, then returns it.
			if h.Type == frame.TypeData && int(h.Length) <= frameBufSize {
				p = getBuf()[:h.Length]
			} else {
				p = make([]byte, h.Length)
			}
			if _, err := io.ReadFull(s.br, p); err != nil {
				s.closeWithError(readErr(err))
				return
			}
		}
		if s.ctx.Err() != nil {
			return // closed while this frame was read
		}
		s.m.received[min(int(h.Type), len(s.m.received)-1)].Inc()
		s.m.bytesIn.Add(float64(hlen + len(p)))
		retained, err := s.handle(h, p)
		if !retained {
			putBuf(p)
		}
		if err != nil {
			s.protocolError(err)
			return
		}
	}
}

func readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("tunnel: peer closed the connection: %w", err)
	}
	return fmt.Errorf("tunnel: read: %w", err)
}

// protocolError tells the peer why the connection dies, then kills it.
func (s *Session) protocolError(err error) {
	code := frame.CodeProtocol
	if errors.Is(err, errFlowControl) {
		code = frame.CodeFlowControl
	}
	s.mu.Lock()
	last := s.lastPeerID
	s.mu.Unlock()
	s.sendControl(frame.TypeGoAway, 0, 0, frame.AppendGoAway(nil, last, code, err.Error()))
	// Give sendLoop a moment to put the GOAWAY on the wire; the reason helps operators.
	time.AfterFunc(50*time.Millisecond, func() { s.closeWithError(fmt.Errorf("tunnel: protocol error: %w", err)) })
}

var errFlowControl = errors.New("flow control window exceeded")

// handle processes one frame. retained reports whether a stream kept p (which it then
// returns to the pool itself).
func (s *Session) handle(h frame.Header, p []byte) (retained bool, err error) {
	switch h.Type {
	case frame.TypeData:
		return s.handleData(h, p)
	case frame.TypeWindowUpdate:
		incr, err := frame.ParseWindowUpdate(p)
		if err != nil {
			return false, err
		}
		if st := s.stream(h.StreamID); st != nil {
			st.addSendWindow(int64(incr))
		}
	case frame.TypeRSTStream:
		code, reason, err := frame.ParseRST(p)
		if err != nil {
			return false, err
		}
		if st := s.stream(h.StreamID); st != nil {
			st.fail(&StreamError{Code: code, Reason: reason, Remote: true}, false)
		}
	case frame.TypePing:
		v, err := frame.ParsePing(p)
		if err != nil {
			return false, err
		}
		if h.Flags.Has(frame.FlagAck) {
			if sent := s.pingSent.Load(); sent != 0 && uint64(sent) == v {
				rtt := time.Now().UnixNano() - sent
				s.rtt.Store(rtt)
				s.m.rtt.Observe(time.Duration(rtt).Seconds())
				s.pingSent.Store(0)
			}
			return false, nil
		}
		s.sendControl(frame.TypePing, frame.FlagAck, 0, p)
	case frame.TypeGoAway:
		last, code, reason, err := frame.ParseGoAway(p)
		if err != nil {
			return false, err
		}
		s.handleGoAway(last, code, reason)
	case frame.TypeHello:
		return false, fmt.Errorf("%w: HELLO after handshake", frame.ErrBadPayload)
	case frame.TypeCodecAck:
		if h.StreamID != 0 {
			return false, fmt.Errorf("%w: CODEC_ACK on stream %d", frame.ErrBadPayload, h.StreamID)
		}
		n, err := frame.ParseCodecAck(p)
		if err != nil {
			return false, err
		}
		return false, s.handleAcks(n)
	case frame.TypeCodecNack:
		epoch, _, err := frame.ParseCodecNack(p)
		if err != nil {
			return false, err
		}
		return false, s.handleNack(h.StreamID, epoch)
	}
	return false, nil // unknown types are ignored (SPEC.md)
}

func (s *Session) handleGoAway(last uint32, code frame.Code, reason string) {
	s.mu.Lock()
	if !s.goAwayRecv {
		close(s.goAwayCh)
	}
	s.goAwayRecv = true
	var refused []*Stream
	for id, st := range s.streams {
		if id%2 == s.nextID%2 && id > last {
			refused = append(refused, st)
		}
	}
	s.mu.Unlock()
	for _, st := range refused {
		st.fail(&StreamError{Code: frame.CodeRefused, Reason: "peer going away", Remote: true}, false)
	}
	if code != frame.CodeNoError {
		s.closeWithError(fmt.Errorf("tunnel: peer sent GOAWAY %s: %s", code, reason))
	}
}

func (s *Session) stream(id uint32) *Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[id]
}

func (s *Session) handleData(h frame.Header, p []byte) (retained bool, err error) {
	if s.asm.active {
		return false, s.continueCoded(h, p)
	}
	if h.StreamID == 0 {
		return false, fmt.Errorf("%w: DATA on stream 0", frame.ErrBadPayload)
	}
	// Parse the preamble before anything else: its ack field counts whatever becomes of
	// the stream, and a coded message must be decoded even for a stream gone here.
	data, credit := p, int64(len(p))
	var pre frame.Preamble
	start := h.Flags.Has(frame.FlagStart)
	if start {
		if pre, data, err = frame.ParsePreamble(p); err != nil {
			return false, err
		}
		if pre.Ack > 0 {
			if err := s.handleAcks(pre.Ack); err != nil {
				return false, err
			}
			credit -= int64(pre.AckLen()) // control data, not flow-controlled
		}
	}
	// A streamed message (StreamCodec) travels like identity: its frames interleave
	// with other streams', and Read decodes it.
	coded := start && pre.Codec != 0 && pre.Codec != s.streamInID
	s.mu.Lock()
	if s.ctx.Err() != nil {
		// closeWithError has failed every stream; recvLoop may still be working through
		// frames already buffered. A stream created now would never be failed.
		s.mu.Unlock()
		return false, ErrSessionClosed
	}
	st := s.streams[h.StreamID]
	if st == nil {
		peerParity := h.StreamID%2 != s.nextID%2
		if !peerParity || h.StreamID <= s.lastPeerID {
			// A late frame for a stream that is already finished or reset here.
			s.mu.Unlock()
			if coded {
				return false, s.startCoded(h, nil, pre, data, credit)
			}
			return false, nil
		}
		if !start {
			s.mu.Unlock()
			return false, fmt.Errorf("%w: stream %d opened without START", frame.ErrBadPayload, h.StreamID)
		}
		s.lastPeerID = h.StreamID
		refuse := s.goAwaySent || uint32(len(s.streams)-s.lingering) >= s.local.MaxStreams
		if !refuse {
			st = newStream(s, h.StreamID, s.peer.Window)
			s.streams[h.StreamID] = st
			select {
			case s.acceptCh <- st:
				s.m.streams.Inc()
			default:
				delete(s.streams, h.StreamID)
				st, refuse = nil, true
			}
		}
		s.mu.Unlock()
		if refuse {
			s.sendControl(frame.TypeRSTStream, 0, h.StreamID, frame.AppendRST(nil, frame.CodeRefused, "stream refused"))
			if coded {
				return false, s.startCoded(h, nil, pre, data, credit)
			}
			return false, nil
		}
	} else {
		s.mu.Unlock()
	}
	if coded {
		return false, s.startCoded(h, st, pre, data, credit)
	}
	return st.receive(h.Flags, pre.Codec, p, data, credit)
}

// linger keeps st, whose exchange is over, until its coded message is acknowledged. It
// no longer counts against the stream limits: the peer has finished it.
func (s *Session) linger(st *Stream) {
	s.mu.Lock()
	if !st.lingering && st.id != 0 && s.streams[st.id] == st {
		st.lingering = true
		s.lingering++
	}
	s.mu.Unlock()
}

// removeStream forgets a finished stream.
func (s *Session) removeStream(st *Stream) {
	s.mu.Lock()
	if st.lingering {
		st.lingering = false
		if s.streams[st.id] == st {
			s.lingering--
		}
	}
	if st.id == 0 {
		s.numOpen--
	} else if s.streams[st.id] == st {
		delete(s.streams, st.id)
		s.m.streams.Dec()
	}
	s.mu.Unlock()
	if f := s.onFree.Load(); f != nil {
		(*f)()
	}
}

// keepaliveLoop sends a PING every KeepaliveInterval, measures RTT from its ACK, and closes
// a session whose peer has been silent for KeepaliveTimeout after a PING.
func (s *Session) keepaliveLoop() {
	defer s.wg.Done()
	tick := min(s.cfg.KeepaliveInterval, s.cfg.KeepaliveTimeout) / 2
	t := time.NewTicker(max(tick, 10*time.Millisecond))
	defer t.Stop()
	lastPing := time.Now()
	var acked uint64      // the peer's transport acknowledged this many bytes (PeerAcked)
	var ackedAt time.Time // when acked last grew by more than ackProgress
	s.ping()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			sent := s.pingSent.Load()
			silent := now.Sub(time.Unix(0, s.lastRecv.Load()))
			if s.cfg.PeerAcked != nil {
				if n, ok := s.cfg.PeerAcked(s.conn); ok && n > acked+ackProgress {
					acked, ackedAt = n, now
				}
				if !ackedAt.IsZero() {
					silent = min(silent, now.Sub(ackedAt))
				}
			}
			if sent != 0 && now.Sub(time.Unix(0, sent)) > s.cfg.KeepaliveTimeout && silent > s.cfg.KeepaliveTimeout {
				s.closeWithError(fmt.Errorf("%w: peer silent for %s", ErrKeepaliveTimeout, silent.Round(time.Millisecond)))
				return
			}
			if sent == 0 && now.Sub(lastPing) >= s.cfg.KeepaliveInterval {
				lastPing = now
				s.ping()
			}
		}
	}
}

// ackProgress is how many more bytes the peer's transport must have acknowledged since
// the last check for the keepalive to count it alive (Config.PeerAcked): more than our
// own PINGs (a few dozen bytes each, with TLS), so that a peer whose kernel merely
// acknowledges them while its process hangs is not taken for alive.
const ackProgress = 1024

func (s *Session) ping() {
	now := time.Now().UnixNano()
	s.pingSent.Store(now)
	s.sendControl(frame.TypePing, 0, 0, frame.AppendPing(nil, uint64(now)))
}

// progressReader notes the time of every read that returned bytes. The peer counts as
// alive while any byte arrives, even inside one frame that takes longer than
// KeepaliveTimeout to cross a slow link (64 KiB at 40 kbit/s: 13 s), and even while its
// PING answer waits behind a queue of bulk data in the network.
type progressReader struct {
	r    io.Reader
	last *atomic.Int64
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// progressWriter is the connection as sendLoop's buffered writer sees it. Its write
// deadline measures progress, not the size of the queue: each chunk of at most
// progressChunk bytes must be taken by the connection within timeout (at least 7/8 of
// it), however much is queued behind it. A deadline over a whole flush would fail a
// healthy tunnel on a slow link as soon as the queue holds more than the link carries in
// WriteTimeout (16 responses of 200 KB on a 1 Mbit/s link). The deadline is re-armed at
// most every timeout/8, so a busy connection does not pay a timer update per write.
// timeout is 0 during the handshake, which sets its own deadline.
type progressWriter struct {
	conn    net.Conn
	timeout time.Duration
	armedAt time.Time
}

// progressChunk is the most one connection write may carry under one deadline.
const progressChunk = 64 << 10

func (w *progressWriter) Write(b []byte) (int, error) {
	if w.timeout <= 0 {
		return w.conn.Write(b)
	}
	written := 0
	for len(b) > 0 {
		if now := time.Now(); now.Sub(w.armedAt) > w.timeout/8 {
			if err := w.conn.SetWriteDeadline(now.Add(w.timeout)); err != nil {
				return written, err
			}
			w.armedAt = now
		}
		n, err := w.conn.Write(b[:min(len(b), progressChunk)])
		written += n
		b = b[n:]
		if err != nil {
			return written, err
		}
	}
	return written, nil
}
