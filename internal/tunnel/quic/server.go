package quic

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	quicgo "github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"

	"github.com/soapgw/soapgw/internal/tunnel"
)

// Handler serves one exchange on the origin. It owns st and must Close it.
type Handler func(ctx context.Context, st *Stream)

// VerifyFunc authenticates the edge of a connection after QUIC's TLS handshake, using rw
// (the control stream) for a key proof. It returns who the edge is, for logs.
type VerifyFunc func(cs tls.ConnectionState, rw io.ReadWriter) (string, error)

// ServerConfig configures the origin side.
type ServerConfig struct {
	Session *tunnel.Config // node, codecs, limits of coded messages; keepalive
	// TLS is the origin's handshake configuration (ALPN is set here).
	TLS *tls.Config
	// Verify authenticates each edge before any exchange of it is served. Required.
	Verify VerifyFunc
	// HandshakeTimeout bounds the QUIC handshake plus authentication and HELLO (default 5 s).
	HandshakeTimeout time.Duration
	// MaxStreams is how many exchanges one edge connection may have in flight (default
	// 1024). QUIC's stream credit enforces it: an edge with more waits, it is not refused.
	MaxStreams int64
	// MaxConnections bounds the authenticated connections (default 1024).
	MaxConnections int
	// StatelessResetKey, when set, lets the origin answer a packet of a connection it
	// does not know with a stateless reset (RFC 9000 §10.3). Set it to the same value
	// across restarts (derive it from a stable secret): an edge whose origin was
	// restarted then learns at its next packet that its connections are gone and
	// reconnects at once, instead of waiting for the keepalive to time out.
	StatelessResetKey *quicgo.StatelessResetKey
	// SequencedWindow is as PeerConfig.SequencedWindow, for responses.
	SequencedWindow int
	// BulkWindow is as PeerConfig.BulkWindow, for answers to bulk messages.
	BulkWindow int
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 5 * time.Second
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 1024
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = 1024
	}
	return c
}

// quicConfig is the QUIC configuration both sides share: keepalive from the session
// config, stream credit for MaxStreams, and receive windows large enough for big messages
// on long fat links.
func quicConfig(s *tunnel.Config, maxStreams int64, handshake time.Duration, datagrams bool) *quicgo.Config {
	idle := 30 * time.Second
	if s.KeepaliveInterval > 0 {
		idle = s.KeepaliveInterval + max(s.KeepaliveTimeout, time.Second)
	}
	return &quicgo.Config{
		HandshakeIdleTimeout:           handshake,
		MaxIdleTimeout:                 idle,
		KeepAlivePeriod:                s.KeepaliveInterval,
		MaxIncomingStreams:             maxStreams,
		MaxIncomingUniStreams:          -1,             // the protocol uses none
		RequireStreamCreditRelease:     maxStreams > 0, // the origin: see conn.holdCredit
		InitialStreamReceiveWindow:     256 << 10,
		MaxStreamReceiveWindow:         8 << 20,
		InitialConnectionReceiveWindow: 1 << 20,
		MaxConnectionReceiveWindow:     64 << 20,
		EnableDatagrams:                datagrams, // redundant copies (redundant.go)
		DisablePathMTUDiscovery:        testNoPathMTUDiscovery.Load(),
		// With QLOGDIR set, every connection writes a qlog trace there (packets, frames,
		// loss and congestion events) for qvis or a text search; unset, nothing is traced.
		Tracer: qlog.DefaultConnectionTracer,
	}
}

// testNoPathMTUDiscovery, set by a test that counts packets, keeps quic-go from sending
// path MTU probes (and the acknowledgements they draw) in the middle of its count.
var testNoPathMTUDiscovery atomic.Bool

// Server accepts UDP tunnel connections from edges and serves their exchanges.
type Server struct {
	cfg     ServerConfig
	session *tunnel.Config
	m       *Metrics
	log     *slog.Logger
	handle  Handler

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closing atomic.Bool // Shutdown has begun

	mu    sync.Mutex
	conns map[*conn]struct{}
	ln    *quicgo.Listener
	tr    *quicgo.Transport
	pc    net.PacketConn
}

// NewServer returns a server; Serve starts it.
func NewServer(cfg ServerConfig, m *Metrics, log *slog.Logger, h Handler) *Server {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, session: withDefaults(cfg.Session), m: m, log: log, handle: h, conns: map[*conn]struct{}{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// withDefaults fills the session fields this transport uses.
func withDefaults(c *tunnel.Config) *tunnel.Config {
	d := tunnel.DefaultConfig()
	if c == nil {
		return d
	}
	out := *c
	if out.Node == "" {
		out.Node = d.Node
	}
	if out.MaxCodedMessage == 0 {
		out.MaxCodedMessage = d.MaxCodedMessage
	}
	if out.KeepaliveTimeout == 0 {
		out.KeepaliveTimeout = d.KeepaliveTimeout
	}
	return &out
}

// Serve accepts connections on pc until Shutdown. It owns pc.
func (s *Server) Serve(pc net.PacketConn) error {
	if s.cfg.Verify == nil || s.cfg.TLS == nil {
		return errors.New("quic tunnel: server needs TLS and Verify")
	}
	tr := &quicgo.Transport{Conn: pc, StatelessResetKey: s.cfg.StatelessResetKey}
	ln, err := tr.Listen(s.cfg.TLS, quicConfig(s.session, s.cfg.MaxStreams, s.cfg.HandshakeTimeout, true))
	if err != nil {
		_ = tr.Close()
		_ = pc.Close()
		return fmt.Errorf("quic tunnel: listen: %w", err)
	}
	s.mu.Lock()
	s.ln, s.tr, s.pc = ln, tr, pc
	s.mu.Unlock()
	for {
		qc, err := ln.Accept(s.ctx)
		if err != nil {
			if s.closing.Load() || s.ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("quic tunnel: accept: %w", err)
		}
		s.wg.Add(1)
		go s.serveConn(qc)
	}
}

// Addr is the listening address once Serve runs (nil before).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

func (s *Server) serveConn(qc *quicgo.Conn) {
	defer s.wg.Done()
	c, err := s.handshake(qc)
	if err != nil {
		return
	}
	defer s.m.untrack(c)
	defer c.wait()
	s.log.Info("udp tunnel connection up", "peer", c.peer.Node, "remote", qc.RemoteAddr())
	var (
		streams sync.WaitGroup // one per exchange handler
		smu     sync.Mutex     // orders streams.Add before Wait
		stopped bool
		workers = newHandlerWorkers(s.ctx, s.handle, &s.wg)
	)
	defer workers.stop()
	start := func(st *Stream) {
		smu.Lock()
		defer smu.Unlock()
		if stopped {
			_ = st.Close()
			return
		}
		streams.Add(1)
		st.onClose = streams.Done
		workers.serve(st)
	}
	c.server, c.maxStreams, c.serve = true, s.cfg.MaxStreams, start
	c.startCopies()
	for {
		qs, err := qc.AcceptStream(s.ctx)
		if err != nil {
			break
		}
		if st := c.accepted(qs); st != nil {
			start(st)
		}
	}
	smu.Lock()
	stopped = true
	smu.Unlock()
	c.close(closeNormal, "")
	streams.Wait()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.log.Info("udp tunnel connection down", "peer", c.peer.Node, "remote", qc.RemoteAddr(), "err", context.Cause(qc.Context()))
}

// maxIdleWorkers bounds the handler workers of one connection that wait for an exchange;
// a worker that finishes one while this many wait ends instead.
const maxIdleWorkers = 16

// handlerWorkers run a connection's exchange handlers on goroutines that serve one
// exchange after another. A goroutine started per exchange ran on a fresh stack that grew
// every time (runtime.newstack was 6 % of the origin's CPU on loopback).
//
// A worker counts as waiting from the moment it is done with its exchange, before it
// parks on the channel: serve promises the exchange to one of them (waiting - 1) and
// queues it. Handing over only to a worker already parked would start a goroutine
// whenever the last one was still between its exchange and its receive, which on a busy
// host was often enough to start one for half of the exchanges.
type handlerWorkers struct {
	ctx    context.Context
	handle Handler
	// work holds exchanges promised to waiting workers. They are at most maxIdleWorkers
	// plus the promised workers that have not received yet, so a send almost never
	// blocks, and then only until a promised worker arrives.
	work    chan *Stream
	done    chan struct{}
	waiting atomic.Int32    // workers done with an exchange and not promised another
	wg      *sync.WaitGroup // the server's: Shutdown waits for the workers
}

func newHandlerWorkers(ctx context.Context, h Handler, wg *sync.WaitGroup) *handlerWorkers {
	return &handlerWorkers{ctx: ctx, handle: h, work: make(chan *Stream, 2*maxIdleWorkers), done: make(chan struct{}), wg: wg}
}

// serve runs st's handler on a waiting worker, or on a new one if none waits.
func (w *handlerWorkers) serve(st *Stream) {
	for n := w.waiting.Load(); n > 0; n = w.waiting.Load() {
		if w.waiting.CompareAndSwap(n, n-1) {
			w.work <- st
			return
		}
	}
	w.wg.Add(1)
	go w.run(st)
}

func (w *handlerWorkers) run(st *Stream) {
	defer w.wg.Done()
	for {
		w.handle(w.ctx, st)
		if !w.wait() {
			return
		}
		select {
		case st = <-w.work:
		case <-w.done:
			// Nothing is promised any more: stop comes after the connection's last
			// exchange has ended.
			return
		}
	}
}

// wait counts a worker done with its exchange as waiting, unless maxIdleWorkers already
// are: then it reports false and the worker ends.
func (w *handlerWorkers) wait() bool {
	for {
		n := w.waiting.Load()
		if n >= maxIdleWorkers {
			return false
		}
		if w.waiting.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// stop ends the waiting workers; busy ones end after their exchange (the connection
// is down, but a handler may still be answering a held exchange).
func (w *handlerWorkers) stop() { close(w.done) }

// handshake authenticates the edge on the control stream (the first stream it opens) and
// exchanges HELLO, within HandshakeTimeout.
func (s *Server) handshake(qc *quicgo.Conn) (*conn, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.HandshakeTimeout)
	defer cancel()
	fail := func(result string, err error) (*conn, error) {
		s.m.handshakes.WithLabelValues(result).Inc()
		s.log.Warn("udp tunnel connection refused", "remote", qc.RemoteAddr(), "result", result, "err", err)
		code := closeAuth
		if result != "bad_key" && result != "bad_certificate" {
			code = closeProtocol
		}
		_ = qc.CloseWithError(code, result)
		return nil, err
	}
	s.mu.Lock()
	full := len(s.conns) >= s.cfg.MaxConnections
	s.mu.Unlock()
	if full {
		return fail("connection_limit", fmt.Errorf("%d connections already", s.cfg.MaxConnections))
	}
	ctrl, err := qc.AcceptStream(ctx)
	if err != nil {
		return fail("timeout", fmt.Errorf("no control stream: %w", err))
	}
	dl, _ := ctx.Deadline()
	_ = ctrl.SetDeadline(dl)
	who, err := s.cfg.Verify(qc.ConnectionState().TLS, ctrl)
	if err != nil {
		var r interface{ HandshakeResult() string }
		result := "auth_failed"
		if errors.As(err, &r) {
			result = r.HandshakeResult()
		}
		// CONNECTION_CLOSE carries the result to the edge, which logs it.
		return fail(result, err)
	}
	c := newConn(qc, s.session, s.m, "", s.log)
	c.window.fixed = uint64(max(s.cfg.SequencedWindow, 0))
	c.window.bulk = uint64(max(s.cfg.BulkWindow, 0))
	c.ctrl = ctrl
	br := bufio.NewReaderSize(ctrl, 1024)
	if err := c.exchangeHellos(br, s.cfg.MaxStreams); err != nil {
		return fail("protocol_error", err)
	}
	_ = ctrl.SetDeadline(time.Time{})
	c.label = c.peer.Node
	c.m = s.m.conn(c.label, s.session.CodecName)
	c.window.gauge = s.m.window.WithLabelValues(c.label)
	s.m.handshakes.WithLabelValues("ok").Inc()
	s.m.track(c)
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	c.wg.Add(1)
	go c.readControl(br)
	s.log.Debug("udp tunnel edge authenticated", "who", who, "node", c.peer.Node)
	return c, nil
}

// Shutdown stops accepting, tells every edge to open no more exchanges, waits for those in
// flight until ctx ends, then closes every connection and the socket.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	ln, tr, pc := s.ln, s.tr, s.pc
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close() // no new connections; those up keep running
	}
	for _, c := range conns {
		c.goingAway.Store(true)
		c.sendCtrl(ctrlGoAway, []byte("origin shutting down"))
	}
	// Wait for exchanges in flight (their streams) to finish.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		busy := false
		for _, c := range conns {
			if c.streams.Load() > 0 && c.qc.Context().Err() == nil {
				busy = true
			}
		}
		if !busy {
			break
		}
		select {
		case <-ctx.Done():
			break wait
		case <-tick.C:
		}
	}
	s.cancel()
	for _, c := range conns {
		c.close(closeNormal, "origin shutting down")
	}
	s.wg.Wait()
	if tr != nil {
		_ = tr.Close()
		_ = pc.Close() // the transport does not close a socket it was given
	}
	return ctx.Err()
}
