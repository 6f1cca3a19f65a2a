package quic

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/soapgw/soapgw/internal/tunnel"
)

// ProveFunc runs the edge's side of authentication on rw (the control stream) after
// QUIC's TLS handshake.
type ProveFunc func(cs tls.ConnectionState, rw io.ReadWriter) error

// PeerConfig describes one origin the edge keeps UDP tunnel connections to.
type PeerConfig struct {
	Name        string // peer name, for logs and metrics
	Address     string // host:port of the origin's UDP tunnel listener
	Connections int    // connections kept up (default 1: QUIC streams do not block each other)
	DialTimeout time.Duration
	BackoffMin  time.Duration // first reconnect delay (default 50 ms)
	BackoffMax  time.Duration // reconnect delay ceiling (default 5 s)
	Session     *tunnel.Config
	// TLS returns the handshake configuration for a new connection (credentials may be
	// reloaded between dials). Required.
	TLS func() *tls.Config
	// Prove authenticates this edge on the control stream. Required.
	Prove ProveFunc
	// SequencedWindow is how many sequenced (stateful-codec) messages may be
	// unacknowledged at once. 1: a message never waits for another's packets, and
	// concurrent messages are coded stateless; more trades that bounded head-of-line
	// blocking for compression under concurrency. 0 (default): auto, 16 while the path
	// loses (almost) no packets, 1 while it does (SPEC.md).
	SequencedWindow int
	// BulkWindow is the window of bulk messages (Stream.SetBulk); 0: bulkWindow.
	BulkWindow int
	// Redundancy says when each message that fits one packet is sent a second time, as
	// a QUIC datagram a few ms after its stream data, the origin doing the same for its
	// answers: a lost packet then rarely costs a probe timeout (redundant.go). It costs
	// about the bytes of every small message once more. The zero value is off; auto
	// sends copies only while the peer reports packets lost (loss.go).
	Redundancy Redundancy
	// Divert says the edge keeps a TCP tunnel to the same origin beside this one
	// (fallback tcp), where it collects a response the origin diverts: a large one while
	// the UDP path loses packets (SPEC.md, "Large responses over TCP"). It is announced in
	// HELLO; the proxy's resumer does the collecting.
	Divert bool
	// ListenPacket opens the UDP socket of a new connection; nil: an ephemeral port on
	// all interfaces. Tests pass lossy sockets here.
	ListenPacket func() (net.PacketConn, error)
}

// Peer keeps connections up to one origin and opens exchanges on them.
type Peer struct {
	cfg     PeerConfig
	session *tunnel.Config
	m       *Metrics
	log     *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   []*conn
	changed chan struct{} // closed and replaced when conns change (or a stream frees for bulkWaiters)
	lastErr error

	bulkWaiters atomic.Int32 // OpenBulkStream calls waiting for a connection under its bulk limit
}

// NewPeer starts the connection slots; they run until Close or ctx ends.
func NewPeer(ctx context.Context, cfg PeerConfig, m *Metrics, log *slog.Logger) *Peer {
	if cfg.Connections <= 0 {
		cfg.Connections = 1
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 50 * time.Millisecond
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(5*time.Second, cfg.BackoffMin)
	}
	if cfg.ListenPacket == nil {
		cfg.ListenPacket = func() (net.PacketConn, error) { return net.ListenUDP("udp", nil) }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Peer{cfg: cfg, session: withDefaults(cfg.Session), m: m, changed: make(chan struct{}),
		log: log.With("peer", cfg.Name, "address", cfg.Address, "transport", "udp")}
	p.ctx, p.cancel = context.WithCancel(ctx)
	for range cfg.Connections {
		p.wg.Add(1)
		go p.maintain()
	}
	return p
}

// Name is the configured peer name.
func (p *Peer) Name() string { return p.cfg.Name }

// Ready reports whether a connection is up and takes new exchanges.
func (p *Peer) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if c.alive() {
			return true
		}
	}
	return false
}

// RTT is the smallest smoothed RTT among live connections (0 if none).
func (p *Peer) RTT() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best time.Duration
	for _, c := range p.conns {
		if r := c.qc.ConnectionStats().SmoothedRTT; r > 0 && (best == 0 || r < best) {
			best = r
		}
	}
	return best
}

// OpenStream opens an exchange on the least loaded live connection. When none is up it
// waits for one until ctx ends or DialTimeout passes, then fails with tunnel.ErrNoPeer
// and the last dial error. When the origin's stream credit is used up it waits for a slot
// (backpressure), bounded by ctx.
func (p *Peer) OpenStream(ctx context.Context) (*Stream, error) { return p.openStream(ctx, false) }

// OpenBulkStream opens an exchange nobody waits on (a one-way delivery; the stream is
// SetBulk) on a connection with fewer streams than tunnel.BulkLimit of the origin's
// limit, waiting (bounded by ctx) for one to free otherwise: bulk streams never take the
// thirty-second of the streams left to exchanges someone waits on, however many a spool has.
func (p *Peer) OpenBulkStream(ctx context.Context) (*Stream, error) { return p.openStream(ctx, true) }

func (p *Peer) openStream(ctx context.Context, bulk bool) (*Stream, error) {
	var wait *time.Timer // made only when no connection is up: most calls find one
	defer func() {
		if wait != nil {
			wait.Stop()
		}
	}()
	for {
		p.mu.Lock()
		var best *conn
		atLimit := false
		for _, c := range p.conns {
			if !c.alive() {
				continue
			}
			if bulk && !c.bulkRoom() {
				atLimit = true
				continue
			}
			if best == nil || c.streams.Load() < best.streams.Load() {
				best = c
			}
		}
		changed, lastErr := p.changed, p.lastErr
		p.mu.Unlock()
		if best != nil {
			qs, err := best.qc.OpenStreamSync(ctx)
			if err == nil {
				st := newStream(best, qs, nil)
				st.bulk = bulk
				best.opened(st)
				return st, nil
			}
			if ctx.Err() != nil {
				return nil, err
			}
			continue // the connection went down meanwhile: try another
		}
		if atLimit {
			// Every connection is up to its bulk limit: wait for a stream to end
			// (streamFreed), bounded by ctx alone, like a wait at the stream limit. The
			// wait counts before the second look, so a stream that ends after that look
			// wakes it, and one that ended before is seen by it.
			p.bulkWaiters.Add(1)
			p.mu.Lock()
			changed = p.changed
			room := false
			for _, c := range p.conns {
				room = room || (c.alive() && c.bulkRoom())
			}
			p.mu.Unlock()
			if !room {
				select {
				case <-changed:
				case <-ctx.Done():
				case <-p.ctx.Done():
				}
			}
			p.bulkWaiters.Add(-1)
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("%w: every UDP tunnel connection to %q had its bulk streams at the limit until the exchange's deadline: %w", tunnel.ErrStreamLimit, p.cfg.Name, err)
			}
			if p.ctx.Err() != nil {
				return nil, tunnel.ErrSessionClosed
			}
			continue
		}
		if wait == nil {
			wait = time.NewTimer(p.cfg.DialTimeout)
		}
		select {
		case <-changed:
			continue
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", tunnel.ErrNoPeer, ctx.Err())
		case <-wait.C:
		case <-p.ctx.Done():
			return nil, tunnel.ErrSessionClosed
		}
		if lastErr != nil {
			return nil, fmt.Errorf("%w: %w", tunnel.ErrNoPeer, lastErr)
		}
		return nil, fmt.Errorf("%w: no UDP tunnel connection up", tunnel.ErrNoPeer)
	}
}

// Close stops the slots and closes every connection.
func (p *Peer) Close() error {
	p.cancel()
	p.wg.Wait()
	return nil
}

// bulkRoom reports whether an edge's connection takes another bulk stream: its exchanges
// are under tunnel.BulkLimit of the origin's stream limit, less the control stream, which
// QUIC's stream credit counts with the exchanges.
func (c *conn) bulkRoom() bool {
	return c.streams.Load() < max(int64(tunnel.BulkLimit(c.peer.MaxStreams))-1, 1)
}

// streamFreed wakes the OpenBulkStream calls waiting for a connection under its bulk
// limit (it runs when an edge stream ends; nothing to do while none waits).
func (p *Peer) streamFreed() {
	if p.bulkWaiters.Load() > 0 {
		p.setConns(func(cs []*conn) []*conn { return cs }, nil)
	}
}

func (p *Peer) setConns(f func([]*conn) []*conn, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = f(p.conns)
	if err != nil {
		p.lastErr = err
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// maintain keeps one connection up: dial, serve until it dies, back off, redial. The
// backoff restarts after a connection that lived, so a flapping link never storms.
func (p *Peer) maintain() {
	defer p.wg.Done()
	backoff := p.cfg.BackoffMin
	for p.ctx.Err() == nil {
		c, pc, err := p.connect()
		if err != nil && p.ctx.Err() != nil {
			return // shutting down
		}
		if err != nil {
			p.m.dials.WithLabelValues(p.cfg.Name, "error").Inc()
			p.setConns(func(cs []*conn) []*conn { return cs }, err)
			p.log.Warn("udp tunnel connect failed", "err", err, "retry_in", backoff)
			d := backoff/2 + rand.N(backoff/2+1)
			select {
			case <-p.ctx.Done():
			case <-time.After(d):
			}
			backoff = min(backoff*2, p.cfg.BackoffMax)
			continue
		}
		p.m.dials.WithLabelValues(p.cfg.Name, "ok").Inc()
		p.m.track(c)
		p.setConns(func(cs []*conn) []*conn { return append(cs, c) }, nil)
		p.log.Info("udp tunnel connection up", "local", c.qc.LocalAddr(), "origin_node", c.peer.Node)
		select {
		case <-c.done():
			p.retire(c, pc)
		case <-c.goAwayCh:
			// The origin is draining: connect anew now (it may be a restarted origin
			// behind the same address) and let this one finish its exchanges.
			p.setConns(func(cs []*conn) []*conn { return cs }, nil) // wake waiters: c no longer takes streams
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				select {
				case <-c.done():
				case <-p.ctx.Done():
				}
				p.retire(c, pc)
			}()
		case <-p.ctx.Done():
			p.retire(c, pc)
		}
		backoff = p.cfg.BackoffMin
	}
}

// retire closes c (if it is not closed yet), waits for its goroutines and drops it.
func (p *Peer) retire(c *conn, pc net.PacketConn) {
	why := "edge shutting down"
	if p.ctx.Err() == nil {
		why = ""
	}
	c.close(closeNormal, why)
	c.wait()
	p.m.untrack(c)
	_ = pc.Close() // quic-go does not close a socket it was given
	cause := context.Cause(c.qc.Context())
	p.setConns(func(cs []*conn) []*conn {
		for i, x := range cs {
			if x == c {
				return append(cs[:i], cs[i+1:]...)
			}
		}
		return cs
	}, nil)
	if p.ctx.Err() == nil {
		p.log.Warn("udp tunnel connection down; reconnecting", "err", cause)
	}
}

// connect dials, authenticates on the control stream and exchanges HELLO.
func (p *Peer) connect() (*conn, net.PacketConn, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	defer cancel()
	addr, err := net.ResolveUDPAddr("udp", p.cfg.Address)
	if err != nil {
		return nil, nil, fmt.Errorf("resolve %s: %w", p.cfg.Address, err)
	}
	pc, err := p.cfg.ListenPacket()
	if err != nil {
		return nil, nil, fmt.Errorf("udp socket: %w", err)
	}
	fail := func(err error) (*conn, net.PacketConn, error) {
		_ = pc.Close()
		return nil, nil, err
	}
	qcfg := quicConfig(p.session, -1, p.cfg.DialTimeout, p.cfg.Redundancy != RedundancyOff)
	// quic.Dial, not a Transport: one socket per connection lets the edge use zero-length
	// connection ids, so the origin's packets carry none (4 bytes less per response). The
	// origin still tells connections apart by its own ids, so a change of the edge's
	// address (NAT rebinding) keeps working.
	qc, err := quicgo.Dial(ctx, pc, addr, p.cfg.TLS(), qcfg)
	if err != nil {
		return fail(fmt.Errorf("dial %s: %w", p.cfg.Address, err))
	}
	c := newConn(qc, p.session, p.m, p.cfg.Name, p.log)
	c.streamFreed = p.streamFreed
	c.redundancy = p.cfg.Redundancy
	c.divert = p.cfg.Divert
	c.window.fixed = uint64(max(p.cfg.SequencedWindow, 0))
	c.window.bulk = uint64(max(p.cfg.BulkWindow, 0))
	c.window.gauge = p.m.window.WithLabelValues(p.cfg.Name)
	ctrl, err := qc.OpenStreamSync(ctx)
	if err != nil {
		c.close(closeNormal, "")
		return fail(fmt.Errorf("open control stream: %w", err))
	}
	dl, _ := ctx.Deadline()
	_ = ctrl.SetDeadline(dl)
	c.ctrl = ctrl
	// HELLO goes out with the key proof (one write, one round trip for both): the origin
	// reads the proof first and HELLO after it, and HELLO holds nothing secret.
	hello := &helloAfterFirstWrite{ReadWriter: ctrl, hello: c.helloMessage(1)}
	if err := p.cfg.Prove(qc.ConnectionState().TLS, hello); err != nil {
		c.close(closeAuth, "")
		return fail(fmt.Errorf("authenticating to %s: %w", p.cfg.Address, closeReason(qc, err)))
	}
	br := bufio.NewReaderSize(ctrl, 1024)
	err = nil
	if !hello.sent { // no key proof was written (mutual TLS alone, or insecure)
		_, err = ctrl.Write(hello.hello)
	}
	if err == nil {
		err = c.readHello(br)
	}
	if err != nil {
		c.close(closeProtocol, "")
		return fail(fmt.Errorf("hello with %s: %w", p.cfg.Address, closeReason(qc, err)))
	}
	_ = ctrl.SetDeadline(time.Time{})
	c.wg.Add(1)
	go c.readControl(br)
	c.startCopies()
	c.startNudge()
	return c, pc, nil
}

// helloAfterFirstWrite appends HELLO to the first write on the control stream.
type helloAfterFirstWrite struct {
	io.ReadWriter
	hello []byte
	sent  bool
}

func (w *helloAfterFirstWrite) Write(p []byte) (int, error) {
	if w.sent {
		return w.ReadWriter.Write(p)
	}
	w.sent = true
	if _, err := w.ReadWriter.Write(append(append(make([]byte, 0, len(p)+len(w.hello)), p...), w.hello...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// closeReason prefers the origin's reason for closing (bad_key...) over a bare stream error.
func closeReason(qc *quicgo.Conn, err error) error {
	var ae *quicgo.ApplicationError
	if cause := context.Cause(qc.Context()); errors.As(cause, &ae) && ae.Remote {
		return fmt.Errorf("the origin closed the connection: %s (%w)", ae.ErrorMessage, err)
	}
	return err
}
