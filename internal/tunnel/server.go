package tunnel

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// StreamHandler serves one stream the peer opened. It owns the stream and must Close it.
// ctx is cancelled when the server shuts down hard or the session dies.
type StreamHandler func(ctx context.Context, st *Stream)

// Server accepts tunnel connections (the origin side) and runs a handler per stream.
type Server struct {
	cfg      *Config
	m        *Metrics
	log      *slog.Logger
	handler  StreamHandler
	maxConns int

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	sessions map[*Session]struct{}
	draining bool
	conns    sync.WaitGroup // per-connection goroutines
	handlers sync.WaitGroup // per-stream handlers
}

// NewServer returns a server; maxConns caps concurrent tunnel connections (0: 256).
func NewServer(cfg *Config, m *Metrics, log *slog.Logger, maxConns int, h StreamHandler) *Server {
	if maxConns <= 0 {
		maxConns = 256
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, m: m, log: log, handler: h, maxConns: maxConns, ctx: ctx, cancel: cancel, sessions: map[*Session]struct{}{}}
}

// Serve accepts connections on ln until ln is closed or Shutdown is called.
func (srv *Server) Serve(ln net.Listener) error {
	var delay time.Duration
	sem := make(chan struct{}, srv.maxConns)
	for {
		conn, err := ln.Accept()
		if err != nil {
			if srv.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Back off on accept errors such as EMFILE instead of spinning.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			srv.log.Warn("tunnel accept failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-srv.ctx.Done():
				return nil
			}
			continue
		}
		delay = 0
		select {
		case sem <- struct{}{}:
		default:
			srv.log.Warn("tunnel connection limit reached; closing new connection", "remote", conn.RemoteAddr(), "limit", srv.maxConns)
			_ = conn.Close()
			continue
		}
		srv.conns.Add(1)
		go func() {
			defer srv.conns.Done()
			defer func() { <-sem }()
			srv.serveConn(conn)
		}()
	}
}

func (srv *Server) serveConn(conn net.Conn) {
	s, err := ServerSession(srv.ctx, conn, srv.cfg, srv.m)
	if err != nil {
		srv.log.Warn("tunnel handshake failed", "remote", conn.RemoteAddr(), "err", err)
		return
	}
	srv.mu.Lock()
	if srv.draining {
		srv.mu.Unlock()
		s.GoAway(frame.CodeNoError, "shutting down")
	} else {
		srv.sessions[s] = struct{}{}
		srv.mu.Unlock()
	}
	log := srv.log.With("remote", conn.RemoteAddr().String(), "peer_node", s.Peer().Node)
	log.Info("tunnel connection accepted")
	logFormatMismatch(log, s, "")
	defer func() {
		srv.mu.Lock()
		delete(srv.sessions, s)
		srv.mu.Unlock()
		_ = s.Close()
	}()
	ctx, cancel := context.WithCancel(srv.ctx)
	defer cancel()
	stop := context.AfterFunc(s.Context(), cancel)
	defer stop()
	for {
		st, err := s.AcceptStream(ctx)
		if err != nil {
			if srv.ctx.Err() == nil {
				log.Info("tunnel connection closed", "err", s.Err())
			}
			return
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
		go func() {
			defer srv.handlers.Done()
			srv.handler(ctx, st)
		}()
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
