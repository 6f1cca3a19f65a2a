package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// PeerConfig describes one remote gateway the edge keeps tunnels to.
type PeerConfig struct {
	Name        string // peer name from the configuration, used in logs and metrics
	Address     string // host:port of the peer's tunnel listener
	Connections int    // sessions kept up (default 2)
	// MaxConnections caps the sessions, extra ones included: when every session is
	// at the peer's stream limit, an exchange waits for a free stream and the peer
	// opens one more session at a time up to this many (default: Connections, none).
	MaxConnections int
	DialTimeout    time.Duration // per connection attempt, handshake included (default 5 s)
	BackoffMin     time.Duration // first reconnect delay (default 50 ms)
	BackoffMax     time.Duration // reconnect delay ceiling (default 5 s)
	Session        *Config
	// Dial opens the transport connection; nil means TCP via net.Dialer.
	Dial func(ctx context.Context, address string) (net.Conn, error)
}

// Peer keeps Connections sessions up to one remote gateway and spreads streams over them.
// Each slot has its own goroutine that dials, runs the session until it dies and redials
// with jittered exponential backoff, so a flapping link never produces a reconnect storm.
// A call waiting for a session cuts a pending backoff short (at most one dial per slot
// every waitingDialInterval), so calls do not fail while the link is already back.
//
// At the stream limit an exchange waits (bounded by its context) instead of failing,
// and the peer opens extra sessions, one at a time, up to MaxConnections; an extra
// session closes once it has carried no exchange for extraSessionIdle.
type Peer struct {
	cfg PeerConfig
	m   *Metrics
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	sessions []*Session
	changed  chan struct{} // closed and replaced whenever sessions change or a stream frees up for a waiter
	lastErr  error
	waiters  atomic.Int32 // OpenStream calls waiting for a session or a free stream slot
	// kick is closed (and replaced) when a call waits with no session up: slots in
	// their reconnect backoff dial at once.
	kick chan struct{}
	// extra marks the sessions opened beyond Connections for load; extraDialing is
	// set while one is being dialled, extraNotBefore delays the next after a failure.
	extra          map[*Session]bool
	extraDialing   bool
	extraNotBefore time.Time
}

const (
	// waitingDialInterval is the shortest time between two dials of a slot while
	// calls wait: a link that comes back is used within this, and a dead one is not
	// hammered.
	waitingDialInterval = 250 * time.Millisecond
	// extraSessionIdle is how long an extra session may carry no exchange before it
	// is closed; checked every extraSessionCheck.
	extraSessionIdle  = 30 * time.Second
	extraSessionCheck = 5 * time.Second
	// extraDialRetry is the pause after a failed dial for an extra session.
	extraDialRetry = time.Second
)

// NewPeer starts the connection slots; they run until Close or until ctx is cancelled.
func NewPeer(ctx context.Context, cfg PeerConfig, m *Metrics, log *slog.Logger) *Peer {
	if cfg.Connections <= 0 {
		cfg.Connections = 2
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 50 * time.Millisecond
	}
	if cfg.MaxConnections < cfg.Connections {
		cfg.MaxConnections = cfg.Connections
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(5*time.Second, cfg.BackoffMin)
	}
	if cfg.Dial == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Peer{cfg: cfg, m: m, log: log.With("peer", cfg.Name, "address", cfg.Address), changed: make(chan struct{}),
		kick: make(chan struct{}), extra: make(map[*Session]bool)}
	p.ctx, p.cancel = context.WithCancel(ctx)
	m.initPeer(cfg.Name)
	for i := range cfg.Connections {
		p.wg.Add(1)
		go p.maintain(i)
	}
	return p
}

// Name is the configured peer name.
func (p *Peer) Name() string { return p.cfg.Name }

// Ready reports whether at least one session is up and not draining.
func (p *Peer) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.sessions {
		if !s.Draining() && s.Err() == nil {
			return true
		}
	}
	return false
}

// RTT is the smallest keepalive RTT among live sessions (0 if unknown).
func (p *Peer) RTT() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best time.Duration
	for _, s := range p.sessions {
		if r := s.RTT(); r > 0 && (best == 0 || r < best) {
			best = r
		}
	}
	return best
}

// OpenStream opens a stream on the least loaded live session (on a tie, a kept one
// before an extra one, so extra sessions fall idle when the load drops).
//
// When no session is up it wakes the slots and waits for one until ctx is done or
// DialTimeout passes, then fails with ErrNoPeer and the last dial error, so a client
// learns at once that the origin is unreachable rather than hanging. When every session
// is at the peer's stream limit it asks for an extra session and waits for a free stream
// until ctx is done; only then does it fail, with ErrStreamLimit.
func (p *Peer) OpenStream(ctx context.Context) (*Stream, error) { return p.openStream(ctx, false) }

// OpenBulkStream opens a bulk stream (Session.OpenBulkStream) as OpenStream opens one,
// on a session under its bulk limit; when every session is at it, the call waits
// (bounded by ctx) for a stream to end. It opens no extra session: a spool's backlog
// would keep one busy for good, and on a slow link the deliveries share packets best on
// one connection (a second one on gprs cost 25 % more bytes per message), while its
// handshake crawls through the queue they fill. Its waits are not counted in the stream
// wait metric, which tells operators that exchanges lack streams.
func (p *Peer) OpenBulkStream(ctx context.Context) (*Stream, error) { return p.openStream(ctx, true) }

func (p *Peer) openStream(ctx context.Context, bulk bool) (*Stream, error) {
	// The dial wait's timer is made only when a call has to wait: most find a stream at
	// once, and a timer per exchange would be garbage at thousands a second.
	var wait *time.Timer
	defer func() {
		if wait != nil {
			wait.Stop()
		}
	}()
	var candBuf [8]*Session
	waitedAtLimit := false
	for {
		p.mu.Lock()
		changed := p.changed
		cands := candBuf[:0]
		for _, kept := range []bool{true, false} {
			for _, s := range p.sessions {
				if p.extra[s] != kept && !s.Draining() && s.Err() == nil {
					cands = append(cands, s)
				}
			}
		}
		lastErr := p.lastErr
		p.mu.Unlock()
		atLimit := false
		for len(cands) > 0 {
			best := 0
			bestN := cands[0].NumStreams()
			for i := 1; i < len(cands); i++ {
				if n := cands[i].NumStreams(); n < bestN {
					best, bestN = i, n
				}
			}
			st, err := cands[best].openStream(ctx, bulk)
			if err == nil {
				if waitedAtLimit && !bulk {
					p.m.streamWait(p.cfg.Name, "ok")
				}
				return st, nil
			}
			if ctx.Err() != nil {
				return nil, err
			}
			atLimit = atLimit || errors.Is(err, ErrStreamLimit)
			cands = append(cands[:best], cands[best+1:]...)
		}
		// Wait for a session to come up or, when every session is at its stream limit,
		// for a stream to finish (sessions signal that while someone waits) or an extra
		// session to come up. Waiting for a stream is bounded by ctx alone: the
		// exchange's deadline, not the time a dial may take.
		if wait == nil {
			wait = time.NewTimer(p.cfg.DialTimeout)
		}
		dialWait := wait.C
		p.waiters.Add(1)
		if atLimit {
			// The wait counts before this second look at the sessions: a stream that
			// ends after it signals, one that ended before is seen here.
			room := false
			for _, s := range p.sessionsSnapshot() {
				room = room || s.hasRoom(bulk)
			}
			if room {
				p.waiters.Add(-1)
				continue
			}
			waitedAtLimit = true
			dialWait = nil
			if !bulk {
				p.addExtraSession()
			}
		} else {
			p.kickSlots()
		}
		var why error
		select {
		case <-changed:
		case <-ctx.Done():
			why = ctx.Err()
		case <-dialWait:
			why = errWaitedDialTimeout
		case <-p.ctx.Done():
			why = ErrSessionClosed
		}
		p.waiters.Add(-1)
		if why == nil {
			select {
			case <-changed:
				continue // a session came up or a stream slot freed: try again
			default:
			}
		}
		if atLimit {
			if !bulk {
				p.m.streamWait(p.cfg.Name, "deadline")
			}
			return nil, &refusedError{fmt.Errorf("%w: every connection to %q (%d at most) was at the peer's stream limit until the exchange's deadline", ErrStreamLimit, p.cfg.Name, p.cfg.MaxConnections)}
		}
		return nil, p.unavailable(why, lastErr)
	}
}

// streamFreed wakes OpenStream calls waiting for a free stream slot.
func (p *Peer) streamFreed() {
	if p.waiters.Load() > 0 {
		p.setSessions(func(ss []*Session) []*Session { return ss }, nil)
	}
}

// errWaitedDialTimeout marks an OpenStream that gave up after DialTimeout; it is not
// reported as a cause of its own.
var errWaitedDialTimeout = errors.New("waited dial timeout")

func (p *Peer) unavailable(why, lastErr error) error {
	if why == errWaitedDialTimeout {
		why = nil
	}
	switch {
	case lastErr != nil && why != nil:
		return fmt.Errorf("%w: %w (%w)", ErrNoPeer, lastErr, why)
	case lastErr != nil:
		return fmt.Errorf("%w: %w", ErrNoPeer, lastErr)
	case why != nil:
		return fmt.Errorf("%w: no connection up: %w", ErrNoPeer, why)
	}
	return fmt.Errorf("%w: no connection up", ErrNoPeer)
}

func (p *Peer) sessionsSnapshot() []*Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Session(nil), p.sessions...)
}

// Close stops reconnecting and closes every session.
func (p *Peer) Close() error {
	p.mu.Lock() // so that no extra session's goroutine starts after Wait begins
	p.cancel()
	p.mu.Unlock()
	for _, s := range p.sessionsSnapshot() {
		_ = s.Close()
	}
	p.wg.Wait()
	return nil
}

func (p *Peer) setSessions(f func([]*Session) []*Session, err error) {
	p.mu.Lock()
	p.sessions = f(p.sessions)
	if err != nil {
		p.lastErr = err
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// add puts a new session in use: its finished streams wake callers waiting for a slot.
func (p *Peer) add(s *Session) {
	freed := p.streamFreed
	s.onFree.Store(&freed)
	p.setSessions(func(ss []*Session) []*Session { return append(ss, s) }, nil)
}

func (p *Peer) remove(s *Session) {
	p.setSessions(func(ss []*Session) []*Session {
		out := ss[:0]
		for _, x := range ss {
			if x != s {
				out = append(out, x)
			}
		}
		return out
	}, nil)
}

// maintain keeps one connection slot up until the peer is closed.
func (p *Peer) maintain(slot int) {
	defer p.wg.Done()
	backoff := p.cfg.BackoffMin
	failures := 0
	for p.ctx.Err() == nil {
		dialed := time.Now()
		s, err := p.connect()
		if err != nil {
			p.m.dial(p.cfg.Name, false)
			p.setSessions(func(ss []*Session) []*Session { return ss }, err)
			failures++
			if failures == 1 || failures%20 == 0 {
				p.log.Warn("tunnel connect failed", "slot", slot, "attempts", failures, "err", err)
			}
			// Full jitter: sleep a random time in [backoff/2, backoff) so that many edges
			// restarting together do not reconnect in lockstep.
			d := backoff/2 + rand.N(backoff/2+1)
			backoff = min(backoff*2, p.cfg.BackoffMax)
			if !p.backoff(d, dialed) {
				return
			}
			continue
		}
		p.m.dial(p.cfg.Name, true)
		started := time.Now()
		if failures > 0 {
			p.log.Info("tunnel reconnected", "slot", slot, "after_attempts", failures, "peer_node", s.Peer().Node)
		} else {
			p.log.Debug("tunnel connected", "slot", slot, "peer_node", s.Peer().Node)
		}
		logFormatMismatch(p.log, s, p.cfg.Name)
		p.add(s)
		select {
		case <-s.Done():
			p.remove(s)
			if p.ctx.Err() == nil {
				p.log.Warn("tunnel connection lost", "slot", slot, "err", s.Err())
			}
		case <-s.GoAwayReceived():
			// The peer is draining (restart, shutdown). Replace the session now; the old
			// one finishes its streams and is forgotten when it closes.
			p.log.Info("tunnel peer going away; reconnecting", "slot", slot)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				select {
				case <-s.Done():
				case <-p.ctx.Done():
					_ = s.Close()
				}
				p.remove(s)
			}()
		case <-p.ctx.Done():
			_ = s.Close()
			p.remove(s)
			return
		}
		// A session that ended (or was sent away) soon after it started counts as a
		// failure: a peer that accepts and drops connections must meet the backoff, not
		// a reconnect storm. A session that lived resets it.
		if time.Since(started) < minHealthySession {
			failures++
			d := backoff/2 + rand.N(backoff/2+1)
			backoff = min(backoff*2, p.cfg.BackoffMax)
			if !p.backoff(d, dialed) {
				return
			}
		} else {
			failures, backoff = 0, p.cfg.BackoffMin
		}
	}
}

// minHealthySession is how long a session must live for the reconnect backoff to reset.
const minHealthySession = 2 * time.Second

// backoff waits d before a slot's next dial, or less when a call is waiting for a
// session (kickSlots): then the slot dials waitingDialInterval after its last dial at
// the latest. It reports false when the peer is closed.
func (p *Peer) backoff(d time.Duration, lastDial time.Time) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	p.mu.Lock()
	kick := p.kick
	p.mu.Unlock()
	select {
	case <-t.C:
		return true
	case <-p.ctx.Done():
		return false
	case <-kick:
	}
	if early := time.Until(lastDial.Add(waitingDialInterval)); early > 0 && early < d {
		t.Reset(early) // t has not fired: the kick came first
		select {
		case <-t.C:
		case <-p.ctx.Done():
			return false
		}
	}
	return true
}

// kickSlots cuts every slot's pending reconnect backoff short: a call is waiting.
func (p *Peer) kickSlots() {
	p.mu.Lock()
	close(p.kick)
	p.kick = make(chan struct{})
	p.mu.Unlock()
}

// addExtraSession dials one more session when every session is at its stream limit,
// unless MaxConnections are up, one is being dialled, or the last attempt failed less
// than extraDialRetry ago.
func (p *Peer) addExtraSession() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil || p.extraDialing || len(p.sessions) >= p.cfg.MaxConnections || time.Now().Before(p.extraNotBefore) {
		return
	}
	p.extraDialing = true
	p.wg.Add(1) // under mu, after the ctx check: Close cancels under mu before it waits
	go p.runExtraSession()
}

// runExtraSession dials an extra session, serves streams on it while it is busy and
// closes it gracefully once it has been idle for extraSessionIdle.
func (p *Peer) runExtraSession() {
	defer p.wg.Done()
	s, err := p.connect()
	if err != nil {
		p.mu.Lock()
		p.extraDialing = false
		p.extraNotBefore = time.Now().Add(extraDialRetry)
		p.mu.Unlock()
		p.m.dial(p.cfg.Name, false)
		p.log.Warn("extra tunnel connection failed", "err", err)
		p.setSessions(func(ss []*Session) []*Session { return ss }, nil) // waiters look again
		return
	}
	p.mu.Lock()
	p.extra[s] = true
	p.mu.Unlock()
	p.m.dialExtra(p.cfg.Name)
	p.add(s)
	// Only now that s is counted in sessions may another extra be considered: cleared
	// before, a second dial could start while the count still lacked s, one connection
	// past MaxConnections (seen under load by e2e TestStreamLimitBackpressure).
	p.mu.Lock()
	p.extraDialing = false
	n := len(p.sessions)
	p.mu.Unlock()
	p.log.Info("tunnel connection added: every connection was at the origin's stream limit", "connections", n, "max_connections", p.cfg.MaxConnections)
	defer func() {
		p.mu.Lock()
		delete(p.extra, s)
		p.mu.Unlock()
		p.remove(s)
	}()

	tick := time.NewTicker(extraSessionCheck)
	defer tick.Stop()
	var idleSince time.Time
	for {
		select {
		case <-s.Done():
			if p.ctx.Err() == nil {
				p.log.Warn("extra tunnel connection lost", "err", s.Err())
			}
			return
		case <-s.GoAwayReceived():
			// The peer is draining: take no more streams here, let these finish.
			p.remove(s)
			select {
			case <-s.Done():
			case <-p.ctx.Done():
				_ = s.Close()
			}
			return
		case <-p.ctx.Done():
			_ = s.Close()
			return
		case now := <-tick.C:
			if s.NumStreams() > 0 || p.waiters.Load() > 0 {
				idleSince = time.Time{}
				continue
			}
			if idleSince.IsZero() {
				idleSince = now
				continue
			}
			if now.Sub(idleSince) >= extraSessionIdle {
				p.retireIdle(s, tick.C)
				return
			}
		}
	}
}

// retireIdle takes an idle extra session out of use, waits for any stream that was
// opened on it meanwhile, and closes it with a GOAWAY.
func (p *Peer) retireIdle(s *Session, tick <-chan time.Time) {
	p.remove(s)
	for s.NumStreams() > 0 {
		select {
		case <-tick:
		case <-s.Done():
			return
		case <-p.ctx.Done():
			_ = s.Close()
			return
		}
	}
	p.log.Info("extra tunnel connection closed: idle", "idle", extraSessionIdle)
	s.GoAway(frame.CodeNoError, "idle")
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
	defer cancel()
	_ = s.CloseGracefully(ctx)
}

func (p *Peer) connect() (*Session, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	defer cancel()
	conn, err := p.cfg.Dial(ctx, p.cfg.Address)
	if err != nil {
		return nil, err
	}
	s, err := ClientSession(ctx, conn, p.cfg.Session, p.m, p.cfg.Name)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w (within %s)", err, p.cfg.DialTimeout)
		}
		return nil, err
	}
	return s, nil
}
