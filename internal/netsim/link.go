package netsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// readSize is the largest chunk read at once when bandwidth is unlimited.
	readSize = 32 << 10
	// segmentSize is the largest chunk read at once when a bandwidth is set,
	// so that serialization delay is charged per segment-sized piece.
	segmentSize = 1460
	// inFlightLimit bounds the bytes queued per direction; it plays the part
	// of the TCP window (see the package doc).
	inFlightLimit = 4 << 20
)

// LinkConfig describes the emulated path. The zero value is a transparent
// forwarder: no delay, no handshake cost, unlimited bandwidth.
type LinkConfig struct {
	// Delay is the one-way delay added in each direction (RTT = 2*Delay).
	// Must not be negative.
	Delay time.Duration
	// Handshake, when true, makes a new connection pay one RTT before the
	// client's first byte is forwarded (and one Delay before the target's),
	// emulating the TCP three-way handshake across the link. It is opt-in
	// so that the zero LinkConfig stays a transparent pipe; set it whenever
	// the cost of connection setup is part of what is being measured (the
	// demo's HTTP/1.0 client opens a connection per call).
	Handshake bool
	// Bandwidth is the capacity of each direction in bytes per second;
	// 0 means unlimited. Must not be negative.
	Bandwidth int64
}

// Validate reports a configuration that cannot be emulated.
func (c LinkConfig) Validate() error {
	if c.Delay < 0 {
		return fmt.Errorf("netsim: LinkConfig.Delay: must not be negative, got %v", c.Delay)
	}
	if c.Bandwidth < 0 {
		return fmt.Errorf("netsim: LinkConfig.Bandwidth: must not be negative, got %d", c.Bandwidth)
	}
	return nil
}

// LinkStats is a snapshot of a Link's counters since it was created.
type LinkStats struct {
	// Connections counts accepted client connections.
	Connections int64
	// DialErrors counts accepted connections that were closed because the
	// target could not be dialed.
	DialErrors int64
	// BytesUp and BytesDown count payload bytes delivered client->target
	// and target->client.
	BytesUp, BytesDown int64
	// SegmentsUp and SegmentsDown count forwarded chunks (one per read on
	// the sending side): a proxy for the number of data packets.
	SegmentsUp, SegmentsDown int64
	// Dropped counts datagrams a UDPLink dropped (its Loss, or a full queue).
	Dropped int64
}

// Link is an emulated network path in front of one target address. Create
// it with [NewLink]; stop it with Close or by cancelling its context.
type Link struct {
	cfg    LinkConfig
	target string
	ln     net.Listener

	ctx       context.Context // cancelled by shutdown; bounds dials
	cancel    context.CancelFunc
	stopAfter func() bool // unregisters the ctx watcher
	closeOnce sync.Once
	wg        sync.WaitGroup // accept loop and one per connection

	mu     sync.Mutex
	closed bool
	pairs  map[*pair]struct{}

	connections, dialErrors  atomic.Int64
	bytesUp, bytesDown       atomic.Int64
	segmentsUp, segmentsDown atomic.Int64
}

// NewLink listens on 127.0.0.1:0 and forwards every accepted connection to
// target across the emulated link. Its goroutines stop when ctx is
// cancelled or Close is called; only Close waits for them.
func NewLink(ctx context.Context, target string, cfg LinkConfig) (*Link, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netsim: listen for link to %s: %w", target, err)
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &Link{
		cfg:    cfg,
		target: target,
		ln:     ln,
		ctx:    lctx,
		cancel: cancel,
		pairs:  make(map[*pair]struct{}),
	}
	// Cancelling the parent ctx must stop everything even if nobody calls
	// Close; AfterFunc does that without a goroutine parked per Link.
	l.stopAfter = context.AfterFunc(lctx, l.shutdown)
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Addr returns the address clients should dial to cross the link.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Stats returns a snapshot of the link's counters.
func (l *Link) Stats() LinkStats {
	return LinkStats{
		Connections:  l.connections.Load(),
		DialErrors:   l.dialErrors.Load(),
		BytesUp:      l.bytesUp.Load(),
		BytesDown:    l.bytesDown.Load(),
		SegmentsUp:   l.segmentsUp.Load(),
		SegmentsDown: l.segmentsDown.Load(),
	}
}

// Close stops accepting, aborts every forwarded connection (bytes still in
// flight are dropped) and waits for all goroutines to return. It is safe to
// call more than once and after the context was cancelled.
func (l *Link) Close() error {
	l.stopAfter()
	l.shutdown()
	l.wg.Wait()
	return nil
}

// shutdown runs once, from Close or from the ctx watcher.
func (l *Link) shutdown() {
	l.closeOnce.Do(func() {
		l.cancel()
		l.mu.Lock()
		l.closed = true
		pairs := make([]*pair, 0, len(l.pairs))
		for p := range l.pairs {
			pairs = append(pairs, p)
		}
		l.mu.Unlock()
		_ = l.ln.Close() // the accept loop sees net.ErrClosed and returns
		for _, p := range pairs {
			p.close(true)
		}
	})
}

func (l *Link) acceptLoop() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.ctx.Err() != nil {
				return
			}
			// Transient (e.g. EMFILE): back off as net/http does, so a
			// persistent error does not spin a CPU.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		l.connections.Add(1)
		l.wg.Add(1)
		go l.serve(c.(*net.TCPConn), time.Now())
	}
}

// serve dials the target for one accepted connection and runs the pair
// until both directions are done.
func (l *Link) serve(client *net.TCPConn, accepted time.Time) {
	defer l.wg.Done()
	var d net.Dialer
	c, err := d.DialContext(l.ctx, "tcp", l.target)
	if err != nil {
		// The client already saw its connect succeed (the listener is
		// local); a reset is the closest we can get to "connection refused".
		l.dialErrors.Add(1)
		_ = client.SetLinger(0)
		_ = client.Close()
		return
	}
	server := c.(*net.TCPConn)
	// Go sets TCP_NODELAY by default; be explicit because the emulation's
	// timing depends on it.
	_ = client.SetNoDelay(true)
	_ = server.SetNoDelay(true)

	p := &pair{client: client, server: server, done: make(chan struct{})}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		p.close(true)
		return
	}
	l.pairs[p] = struct{}{}
	l.mu.Unlock()

	var upStart, downStart time.Time
	if l.cfg.Handshake {
		// SYN (Delay) + SYN-ACK (Delay) before the client may send; the
		// target may answer as soon as the SYN reached it.
		upStart = accepted.Add(2 * l.cfg.Delay)
		downStart = accepted.Add(l.cfg.Delay)
	}
	up := &direction{
		src: client, dst: server, q: newQueue(inFlightLimit),
		cfg: l.cfg, wireFree: upStart,
		bytes: &l.bytesUp, segments: &l.segmentsUp,
	}
	down := &direction{
		src: server, dst: client, q: newQueue(inFlightLimit),
		cfg: l.cfg, wireFree: downStart,
		bytes: &l.bytesDown, segments: &l.segmentsDown,
	}
	var wg sync.WaitGroup
	for _, d := range []*direction{up, down} {
		wg.Add(2)
		go func() { defer wg.Done(); p.read(d) }()
		go func() { defer wg.Done(); p.write(d) }()
	}
	wg.Wait()

	l.mu.Lock()
	delete(l.pairs, p)
	l.mu.Unlock()
}

// pair is one forwarded connection: the accepted client leg and the dialed
// target leg.
type pair struct {
	client, server *net.TCPConn
	done           chan struct{} // closed when the pair is closed
	closeOnce      sync.Once
	halfClosed     atomic.Int32 // directions whose EOF has been delivered
}

// close closes both legs once; with reset, SO_LINGER 0 makes the peers see
// a reset instead of a FIN. done is closed first, so goroutines that then
// fail on the closed sockets know the failure is ours and stop quietly.
func (p *pair) close(reset bool) {
	p.closeOnce.Do(func() {
		close(p.done)
		if reset {
			_ = p.client.SetLinger(0)
			_ = p.server.SetLinger(0)
		}
		_ = p.client.Close()
		_ = p.server.Close()
	})
}

// direction is one half of a pair. wireFree is touched only by the reader.
type direction struct {
	src, dst *net.TCPConn
	q        *queue
	cfg      LinkConfig
	wireFree time.Time // when the emulated wire can take the next byte

	bytes, segments *atomic.Int64
}

// due returns when n bytes read at now reach the far side: they leave once
// the wire is free (and the handshake is over), occupy it for their
// serialization time, then travel for Delay.
func (d *direction) due(now time.Time, n int) time.Time {
	start := now
	if d.wireFree.After(start) {
		start = d.wireFree
	}
	if d.cfg.Bandwidth > 0 && n > 0 {
		start = start.Add(time.Duration(int64(n) * int64(time.Second) / d.cfg.Bandwidth))
	}
	d.wireFree = start
	return start.Add(d.cfg.Delay)
}

func (p *pair) read(d *direction) {
	size := readSize
	if d.cfg.Bandwidth > 0 {
		size = segmentSize
	}
	buf := make([]byte, size)
	for {
		n, err := d.src.Read(buf)
		now := time.Now()
		if n > 0 {
			c := chunk{due: d.due(now, n), data: append([]byte(nil), buf[:n]...)}
			if !d.q.push(c, p.done) {
				return
			}
		}
		if err != nil {
			k := kindEOF
			if !errors.Is(err, io.EOF) {
				k = kindReset
			}
			// If the pair is already closed this is our own doing and the
			// push is refused; otherwise the FIN or reset travels like data.
			d.q.push(chunk{due: d.due(now, 0), kind: k}, p.done)
			return
		}
	}
}

func (p *pair) write(d *direction) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c, ok := d.q.pop(p.done)
		if !ok {
			return
		}
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait) // Go >= 1.23: Reset needs no drain
			select {
			case <-timer.C:
			case <-p.done:
				return
			}
		}
		switch c.kind {
		case kindData:
			// Count before writing, so the counters never lag behind what
			// the receiver can already have read.
			d.bytes.Add(int64(len(c.data)))
			d.segments.Add(1)
			if _, err := d.dst.Write(c.data); err != nil {
				p.close(true)
				return
			}
		case kindEOF:
			if err := d.dst.CloseWrite(); err != nil {
				p.close(true)
				return
			}
			if p.halfClosed.Add(1) == 2 {
				p.close(false)
			}
			return
		case kindReset:
			p.close(true)
			return
		}
	}
}
