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

// UDPLinkConfig describes an emulated datagram path.
type UDPLinkConfig struct {
	// Delay is the one-way delay added in each direction (RTT = 2*Delay).
	Delay time.Duration
	// Loss is the fraction of datagrams dropped, independently in each direction
	// (0.01 = 1 %). 0 to 1.
	Loss float64
	// Seed makes the losses repeatable; 0 picks one.
	Seed uint64
}

// Validate reports a configuration that cannot be emulated.
func (c UDPLinkConfig) Validate() error {
	if c.Delay < 0 {
		return fmt.Errorf("netsim: UDPLinkConfig.Delay: must not be negative, got %v", c.Delay)
	}
	if c.Loss < 0 || c.Loss > 1 {
		return fmt.Errorf("netsim: UDPLinkConfig.Loss: must be from 0 to 1, got %v", c.Loss)
	}
	return nil
}

// udpQueueLen bounds the datagrams in flight per direction; beyond it they are dropped,
// as a router's queue would.
const udpQueueLen = 4096

// UDPLink relays datagrams between clients and one target address across an emulated
// path: each client address gets its own socket towards the target (as a NAT would), and
// every datagram is delayed by Delay or dropped with probability Loss. Create it with
// [NewUDPLink]; stop it with Close or by cancelling its context.
//
//	client ──► down ─► (loss, delay) ─► up[client] ──► target
//	client ◄── down ◄─ (loss, delay) ◄─ up[client] ◄── target
type UDPLink struct {
	cfg    UDPLinkConfig
	target *net.UDPAddr
	down   *net.UDPConn

	ctx       context.Context
	cancel    context.CancelFunc
	stopAfter func() bool
	closeOnce sync.Once
	wg        sync.WaitGroup // reader per socket, scheduler per direction

	mu  sync.Mutex
	rng *rand.Rand
	ups map[string]*net.UDPConn

	toTarget, toClient chan udpDatagram

	clients, dropped         atomic.Int64
	bytesUp, bytesDown       atomic.Int64
	segmentsUp, segmentsDown atomic.Int64
}

type udpDatagram struct {
	due  time.Time
	b    []byte
	conn *net.UDPConn
	to   *net.UDPAddr
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
	lctx, cancel := context.WithCancel(ctx)
	l := &UDPLink{cfg: cfg, target: ta, down: down, ctx: lctx, cancel: cancel,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), ups: map[string]*net.UDPConn{},
		toTarget: make(chan udpDatagram, udpQueueLen), toClient: make(chan udpDatagram, udpQueueLen)}
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
		BytesUp:      l.bytesUp.Load(),
		BytesDown:    l.bytesDown.Load(),
		SegmentsUp:   l.segmentsUp.Load(),
		SegmentsDown: l.segmentsDown.Load(),
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

// lose decides a datagram's fate.
func (l *UDPLink) lose() bool {
	if l.cfg.Loss == 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rng.Float64() < l.cfg.Loss
}

func (l *UDPLink) enqueue(q chan udpDatagram, d udpDatagram) {
	if l.lose() {
		l.dropped.Add(1)
		return
	}
	d.due = time.Now().Add(l.cfg.Delay)
	select {
	case q <- d:
	default:
		l.dropped.Add(1)
	}
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
		l.enqueue(l.toTarget, udpDatagram{b: append([]byte(nil), buf[:n]...), conn: up, to: l.target})
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
		l.enqueue(l.toClient, udpDatagram{b: append([]byte(nil), buf[:n]...), conn: l.down, to: client})
	}
}

// schedule delivers one direction's datagrams when due; a constant delay keeps them in
// order, so a FIFO is enough.
func (l *UDPLink) schedule(q chan udpDatagram) {
	defer l.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var d udpDatagram
		select {
		case d = <-q:
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
		if q == l.toTarget {
			l.bytesUp.Add(int64(len(d.b)))
			l.segmentsUp.Add(1)
		} else {
			l.bytesDown.Add(int64(len(d.b)))
			l.segmentsDown.Add(1)
		}
	}
}
