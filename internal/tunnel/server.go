package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soapgw/soapgw/internal/ratelog"
	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// StreamHandler serves one stream the peer opened. It owns the stream and must Close it.
// ctx is cancelled when the server shuts down hard or the session dies.
type StreamHandler func(ctx context.Context, st *Stream)

// AuthFunc secures and authenticates an accepted connection before the tunnel handshake
// runs on it, within ctx. It returns the connection to run the session on and a short
// description of the peer's proven identity (for logs). An error may implement
// HandshakeResult() string to name its cause in the handshake metric.
type AuthFunc func(ctx context.Context, conn net.Conn) (net.Conn, string, error)

// ServerConfig says how a Server admits tunnel connections. Zero fields take the
// defaults documented on each.
type ServerConfig struct {
	// Session configures each session (nil: DefaultConfig()).
	Session *Config
	// MaxConnections caps the sessions that completed authentication (default 256). A
	// connection takes a slot only once authenticated, so unauthenticated ones can never
	// keep a real edge out.
	MaxConnections int
	// Authenticate runs on every accepted connection first. nil: the connection is used
	// as it is (plaintext, unauthenticated; only for insecure: true).
	Authenticate AuthFunc
	// HandshakeTimeout bounds everything before a session runs: authentication and the
	// HELLO exchange (default 5 s).
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the connections in their handshake at once (default 256).
	MaxHandshakes int
	// MaxHandshakesPerSource bounds those from one IP address (default 16).
	MaxHandshakesPerSource int
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.MaxConnections <= 0 {
		c.MaxConnections = 256
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 5 * time.Second
	}
	if c.MaxHandshakes <= 0 {
		c.MaxHandshakes = 256
	}
	if c.MaxHandshakesPerSource <= 0 {
		c.MaxHandshakesPerSource = 16
	}
	return c
}

// Server accepts tunnel connections (the origin side) and runs a handler per stream.
type Server struct {
	cfg     ServerConfig
	m       *Metrics
	log     *slog.Logger
	warn    *ratelog.Limiter // refusals and failed handshakes: an attacker must not fill the disk
	handler StreamHandler
	adm     *admission
	slots   chan struct{} // one per authenticated session

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	sessions map[*Session]*streamWorkers
	draining bool
	conns    sync.WaitGroup // per-connection goroutines
	handlers sync.WaitGroup // per-stream handlers
}

// NewServer returns a server that runs h for every stream its sessions accept.
func NewServer(cfg ServerConfig, m *Metrics, log *slog.Logger, h StreamHandler) *Server {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg: cfg, m: m, log: log, warn: ratelog.New(log, 10*time.Second), handler: h,
		adm:   newAdmission(cfg.MaxHandshakes, cfg.MaxHandshakesPerSource),
		slots: make(chan struct{}, cfg.MaxConnections),
		ctx:   ctx, cancel: cancel, sessions: map[*Session]*streamWorkers{},
	}
}

// Handshake results counted besides those of the AuthFunc.
const (
	resultOK              = "ok"
	resultEvicted         = "evicted"          // closed to make room for newer connections
	resultHello           = "hello_failed"     // authenticated, but no valid HELLO
	resultConnectionLimit = "connection_limit" // authenticated, but max_connections sessions are up
	resultError           = "error"            // an AuthFunc error without a cause
)

// Serve accepts connections on ln until ln is closed or Shutdown is called.
func (srv *Server) Serve(ln net.Listener) error {
	var delay time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if srv.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Back off on accept errors such as EMFILE instead of spinning.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			srv.warn.Warn("accept", "tunnel accept failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-srv.ctx.Done():
				return nil
			}
			continue
		}
		delay = 0
		p, _ := srv.adm.admit(conn)
		srv.m.handshakesPending(srv.adm.pendingCount())
		srv.conns.Add(1)
		go func() {
			defer srv.conns.Done()
			srv.serveConn(p)
		}()
	}
}

// serveConn authenticates p's connection, runs the HELLO exchange once the connection
// holds a session slot, then serves its streams.
func (srv *Server) serveConn(p *pending) {
	conn := p.conn
	s, who, result, err := srv.handshake(conn)
	evicted := srv.adm.done(p)
	srv.m.handshakesPending(srv.adm.pendingCount())
	if evicted && err != nil {
		result = resultEvicted
	}
	srv.m.handshake(result)
	if err != nil {
		_ = conn.Close()
		srv.warn.Warn(result, "tunnel handshake refused", "result", result, "remote", conn.RemoteAddr().String(), "err", err)
		return
	}
	srv.serveSession(s, who)
}

// handshake authenticates conn, takes a session slot and runs the HELLO exchange, all
// within HandshakeTimeout. On success the caller owns the slot.
func (srv *Server) handshake(conn net.Conn) (s *Session, who, result string, err error) {
	ctx, cancel := context.WithTimeout(srv.ctx, srv.cfg.HandshakeTimeout)
	defer cancel()
	who = "unauthenticated"
	if srv.cfg.Authenticate != nil {
		conn, who, err = srv.cfg.Authenticate(ctx, conn)
		if err != nil {
			result = resultError
			var r interface{ HandshakeResult() string }
			if errors.As(err, &r) {
				result = r.HandshakeResult()
			}
			return nil, "", result, err
		}
	}
	select {
	case srv.slots <- struct{}{}:
	default:
		return nil, "", resultConnectionLimit, fmt.Errorf("%d tunnel connections are up (max_connections)", srv.cfg.MaxConnections)
	}
	s, err = ServerSession(ctx, conn, srv.cfg.Session, srv.m)
	if err != nil {
		<-srv.slots
		return nil, "", resultHello, err
	}
	return s, who, resultOK, nil
}

// maxIdleWorkers bounds the stream workers of one session that wait for a stream; a
// worker that finishes an exchange while this many wait ends instead.
const maxIdleWorkers = 16

// serveSession serves s's streams until the session or the server ends, then releases
// the session's slot (taken by handshake). Exchanges still running then go on (the
// origin's held exchanges outlive their connection); it returns once they are done.
//
// Streams are served by workers: each waits in AcceptStream, serves the stream it gets
// and waits again, and the worker that takes the last waiting one's place starts another.
// A goroutine started per stream behind an accept loop cost a hand-off more per exchange
// (receiver -> acceptor -> handler) and a fresh stack that grew on every exchange.
func (srv *Server) serveSession(s *Session, who string) {
	// Handlers' context ends with the server (its drain deadline) or with this
	// connection; the cause tells which (ConnectionLost), for handlers whose work
	// outlives the connection (the origin's held exchanges).
	ctx, cancel := context.WithCancelCause(srv.ctx)
	stop := context.AfterFunc(s.Context(), func() { cancel(errConnectionEnded) })
	w := &streamWorkers{srv: srv, s: s, ctx: ctx}
	srv.mu.Lock()
	if srv.draining {
		srv.mu.Unlock()
		s.GoAway(frame.CodeNoError, "shutting down")
	} else {
		srv.sessions[s] = w
		srv.mu.Unlock()
	}
	log := srv.log.With("remote", s.conn.RemoteAddr().String(), "peer_node", s.Peer().Node)
	log.Info("tunnel connection accepted", "authenticated_as", who)
	logFormatMismatch(log, s, "")
	w.start()
	<-ctx.Done() // the session or the server ended
	if srv.ctx.Err() == nil {
		log.Info("tunnel connection closed", "err", s.Err())
	}
	// Workers waiting for a stream return now; busy ones once their exchange is done.
	cancel(errConnectionEnded)
	stop()
	srv.mu.Lock()
	delete(srv.sessions, s)
	srv.mu.Unlock()
	_ = s.Close()
	<-srv.slots
	w.wg.Wait()
}

// streamWorkers are the goroutines serving one session's streams (serveSession).
type streamWorkers struct {
	srv  *Server
	s    *Session
	ctx  context.Context
	idle atomic.Int32 // waiting in AcceptStream
	live atomic.Int32 // running
	wg   sync.WaitGroup
}

func (w *streamWorkers) start() {
	w.wg.Add(1)
	w.live.Add(1)
	go w.run()
}

func (w *streamWorkers) run() {
	defer w.wg.Done()
	defer w.live.Add(-1)
	srv := w.srv
	for {
		w.idle.Add(1)
		st, err := w.s.AcceptStream(w.ctx)
		if w.idle.Add(-1) == 0 && err == nil {
			w.start() // keep one waiting, so the next stream does not wait for this exchange
		}
		if err != nil {
			return // the session or the server ended
		}
		// handlers.Add must not race with Shutdown's handlers.Wait: both happen under
		// srv.mu, and once draining no handler starts. A stream that was accepted but
		// not yet handled is refused, which tells the peer it was never processed and
		// may be sent again elsewhere.
		srv.mu.Lock()
		if srv.draining {
			srv.mu.Unlock()
			st.Reset(frame.CodeRefused, "shutting down")
			continue
		}
		srv.handlers.Add(1)
		srv.mu.Unlock()
		srv.handler(w.ctx, st)
		srv.handlers.Done()
		if w.idle.Load() >= maxIdleWorkers {
			return
		}
	}
}

// Shutdown drains: it sends GOAWAY on every session so peers open no new streams (and
// send those it refuses elsewhere), waits for running handlers, lets every session write
// what they queued, then closes the sessions. If ctx ends first it cancels the handlers'
// context, closes every session at once (which fails their stream operations) and returns
// ctx.Err() without waiting further, as net/http.Server.Shutdown does. The caller closes
// the listener first.
func (srv *Server) Shutdown(ctx context.Context) error {
	srv.mu.Lock()
	srv.draining = true
	for s := range srv.sessions {
		s.GoAway(frame.CodeNoError, "shutting down")
	}
	srv.mu.Unlock()
	done := make(chan struct{})
	go func() { srv.handlers.Wait(); close(done) }()
	select {
	case <-done:
		srv.mu.Lock()
		sessions := make([]*Session, 0, len(srv.sessions))
		for s := range srv.sessions {
			sessions = append(sessions, s)
		}
		srv.mu.Unlock()
		var wg sync.WaitGroup
		for _, s := range sessions {
			wg.Add(1)
			go func() { defer wg.Done(); _ = s.CloseGracefully(ctx) }()
		}
		wg.Wait()
		srv.cancel()
		srv.conns.Wait()
		return ctx.Err()
	case <-ctx.Done():
		srv.cancel()
		srv.mu.Lock()
		for s := range srv.sessions {
			go s.Close()
		}
		srv.mu.Unlock()
		return ctx.Err()
	}
}
