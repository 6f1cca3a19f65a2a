package netsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// UDPLinkConfig describes an emulated datagram path: the shaping of [LinkConfig] (delay,
// bandwidth) applied per datagram, plus what only a datagram path can show (loss, jitter).
// The zero value is a transparent relay.
type UDPLinkConfig struct {
	// Delay is the one-way delay added in each direction (RTT = 2*Delay).
	Delay time.Duration
	// Jitter varies each datagram's delay uniformly within ±Jitter (never below the
	// serialization time). It does not reorder: a datagram never leaves before the one
	// sent ahead of it in the same direction, as on a single path.
	Jitter time.Duration
	// Loss is the fraction of datagrams dropped, independently in each direction
	// (0.01 = 1 %). 0 to 1.
	Loss float64
	// Bandwidth is the capacity of each direction in bytes per second; 0 means
	// unlimited. A datagram occupies the wire for its payload plus 28 bytes of IPv4 and
	// UDP headers.
	Bandwidth int64
	// QueueBytes bounds the backlog waiting for the wire in each direction when
	// Bandwidth is set (a router's tail-drop queue); 0 means 64 KiB.
	QueueBytes int
	// Seed makes the losses and jitter repeatable; 0 picks one.
	Seed uint64
}

// Validate reports a configuration that cannot be emulated.
func (c UDPLinkConfig) Validate() error {
	if c.Delay < 0 {
		return fmt.Errorf("netsim: UDPLinkConfig.Delay: must not be negative, got %v", c.Delay)
	}
	if c.Jitter < 0 {
		return fmt.Errorf("netsim: UDPLinkConfig.Jitter: must not be negative, got %v", c.Jitter)
	}
	if !(c.Loss >= 0 && c.Loss <= 1) { // also NaN
		return fmt.Errorf("netsim: UDPLinkConfig.Loss: must be from 0 to 1, got %v", c.Loss)
	}
	if c.Bandwidth < 0 {
		return fmt.Errorf("netsim: UDPLinkConfig.Bandwidth: must not be negative, got %d", c.Bandwidth)
	}
	if c.QueueBytes < 0 {
		return fmt.Errorf("netsim: UDPLinkConfig.QueueBytes: must not be negative, got %d", c.QueueBytes)
	}
	return nil
}

const (
	// udpQueueLen bounds the datagrams in flight per direction (on the wire or waiting
	// for it); beyond it they are dropped, as a router's queue would.
	udpQueueLen = 4096
	// udpHeaderBytes are the IPv4 and UDP headers a datagram also puts on the wire.
	udpHeaderBytes = 28
	// defaultUDPQueueBytes is the backlog bound when QueueBytes is 0.
	defaultUDPQueueBytes = 64 << 10
)

// UDPLink relays datagrams between clients and one target address across an emulated
// path: each client address gets its own socket towards the target (as a NAT would), and
// every datagram is dropped with probability Loss or else serialized at Bandwidth and
// delayed by Delay ± Jitter. Create it with [NewUDPLink]; stop it with Close or by
// cancelling its context.
//
//	client ──► down ─► toTarget (loss, rate, delay±jitter) ─► ups[client] ──► target
//	client ◄── down ◄─ toClient (loss, rate, delay±jitter) ◄─ ups[client] ◄── target
//
// Each direction is a FIFO with a due time per datagram, like a [Link]'s; one scheduler
// goroutine per direction writes them when due, one reader per socket admits them.
type UDPLink struct {
	cfg    UDPLinkConfig
	target *net.UDPAddr
	down   *net.UDPConn

	ctx       context.Context
	cancel    context.CancelFunc
	stopAfter func() bool
	closeOnce sync.Once
	wg        sync.WaitGroup // reader per socket, scheduler per direction

	mu  sync.Mutex // guards ups
	ups map[string]*net.UDPConn

	toTarget, toClient *udpDir

	clients, dropped atomic.Int64
}

type udpDatagram struct {
	due  time.Time
	b    []byte
	conn *net.UDPConn
	to   *net.UDPAddr
}

// udpDir is one direction of the path: its random source, the state of its wire, and
// the FIFO of admitted datagrams.
type udpDir struct {
	mu       sync.Mutex // serializes admit: draws, wireFree, lastDue and the send on q
	rng      *rand.Rand
	wireFree time.Time // when the wire has serialized everything admitted
	lastDue  time.Time // due time of the latest admitted datagram (the FIFO floor)
	q        chan udpDatagram

	bytes, segments atomic.Int64 // delivered
}

// NewUDPLink listens on 127.0.0.1:0 (UDP) and relays to target across the emulated path.
func NewUDPLink(ctx context.Context, target string, cfg UDPLinkConfig) (*UDPLink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, fmt.Errorf("netsim: UDP link target %s: %w", target, err)
	}
	down, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("netsim: listen for UDP link to %s: %w", target, err)
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	if cfg.QueueBytes == 0 {
		cfg.QueueBytes = defaultUDPQueueBytes
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &UDPLink{cfg: cfg, target: ta, down: down, ctx: lctx, cancel: cancel, ups: map[string]*net.UDPConn{},
		// One random stream per direction, so that one direction's traffic does not
		// change the other's draws.
		toTarget: &udpDir{rng: rand.New(rand.NewPCG(seed, 1)), q: make(chan udpDatagram, udpQueueLen)},
		toClient: &udpDir{rng: rand.New(rand.NewPCG(seed, 2)), q: make(chan udpDatagram, udpQueueLen)},
	}
	l.stopAfter = context.AfterFunc(lctx, l.shutdown)
	l.wg.Add(3)
	go l.readClients()
	go l.schedule(l.toTarget)
	go l.schedule(l.toClient)
	return l, nil
}

// Addr returns the address clients send to in order to cross the link.
func (l *UDPLink) Addr() string { return l.down.LocalAddr().String() }

// Stats returns the link's counters: Connections counts client addresses, Segments count
// datagrams delivered, Bytes their payload (UDP and IP headers excluded), Dropped the
// datagrams dropped (by Loss or a full queue).
func (l *UDPLink) Stats() LinkStats {
	return LinkStats{
		Connections:  l.clients.Load(),
		Dropped:      l.dropped.Load(),
		BytesUp:      l.toTarget.bytes.Load(),
		BytesDown:    l.toClient.bytes.Load(),
		SegmentsUp:   l.toTarget.segments.Load(),
		SegmentsDown: l.toClient.segments.Load(),
	}
}

// Close stops the link and waits for its goroutines.
func (l *UDPLink) Close() error {
	l.shutdown()
	l.stopAfter()
	l.wg.Wait()
	return nil
}

func (l *UDPLink) shutdown() {
	l.closeOnce.Do(func() {
		l.cancel()
		_ = l.down.Close()
		l.mu.Lock()
		for _, c := range l.ups {
			_ = c.Close()
		}
		l.mu.Unlock()
	})
}

// admit drops d or queues it with the time it is due at the far side. The steps follow
// a router's: tail drop when the backlog waiting for the wire is over QueueBytes (or
// the FIFO is full), serialization at Bandwidth, random loss, then the propagation
// delay ± jitter, never ahead of the datagram before. The random draws happen in a fixed
// order (loss, then jitter), each only when its parameter is set, so a seed and a
// sequence of datagrams give the same fates.
func (l *UDPLink) admit(dir *udpDir, d udpDatagram, now time.Time) {
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if len(dir.q) == cap(dir.q) {
		// Only admit sends on q, under dir.mu, so the room seen here stays.
		l.dropped.Add(1)
		return
	}
	txEnd := now
	if bw := l.cfg.Bandwidth; bw > 0 {
		start := now
		if dir.wireFree.After(start) {
			start = dir.wireFree
		}
		// Never drop into an idle wire, even a datagram larger than the queue.
		if backlog := start.Sub(now); backlog > 0 && backlog > time.Duration(l.cfg.QueueBytes)*time.Second/time.Duration(bw) {
			l.dropped.Add(1)
			return
		}
		txEnd = start.Add(time.Duration(int64(len(d.b)+udpHeaderBytes) * int64(time.Second) / bw))
		dir.wireFree = txEnd
	}
	if l.cfg.Loss > 0 && dir.rng.Float64() < l.cfg.Loss {
		l.dropped.Add(1)
		return
	}
	due := txEnd.Add(l.cfg.Delay)
	if j := int64(l.cfg.Jitter); j > 0 {
		due = due.Add(time.Duration(dir.rng.Int64N(2*j+1) - j))
		if due.Before(txEnd) {
			due = txEnd
		}
	}
	if due.Before(dir.lastDue) {
		due = dir.lastDue // jitter must not reorder
	}
	dir.lastDue = due
	d.due = due
	dir.q <- d
}

func (l *UDPLink) readClients() {
	defer l.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := l.down.ReadFromUDP(buf)
		if err != nil {
			return
		}
		up := l.upFor(from)
		if up == nil {
			return
		}
		l.admit(l.toTarget, udpDatagram{b: append([]byte(nil), buf[:n]...), conn: up, to: l.target}, time.Now())
	}
}

// upFor returns the socket towards the target for a client, opening it on first use.
func (l *UDPLink) upFor(client *net.UDPAddr) *net.UDPConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return nil
	}
	if c := l.ups[client.String()]; c != nil {
		return c
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil
	}
	l.ups[client.String()] = c
	l.clients.Add(1)
	l.wg.Add(1)
	go l.readTarget(c, client)
	return c
}

func (l *UDPLink) readTarget(c *net.UDPConn, client *net.UDPAddr) {
	defer l.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, _, err := c.ReadFromUDP(buf)
		if err != nil {
			return
		}
		l.admit(l.toClient, udpDatagram{b: append([]byte(nil), buf[:n]...), conn: l.down, to: client}, time.Now())
	}
}

// schedule delivers one direction's datagrams when due; admit keeps due times
// monotonic, so a FIFO is enough.
func (l *UDPLink) schedule(dir *udpDir) {
	defer l.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var d udpDatagram
		select {
		case d = <-dir.q:
		case <-l.ctx.Done():
			return
		}
		if wait := time.Until(d.due); wait > 0 {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-l.ctx.Done():
				return
			}
		}
		if _, err := d.conn.WriteToUDP(d.b, d.to); err != nil {
			continue
		}
		dir.bytes.Add(int64(len(d.b)))
		dir.segments.Add(1)
	}
}
