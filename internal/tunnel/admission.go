package tunnel

import (
	"net"
	"sync"
)

// admission bounds the connections that have not yet authenticated, per source address
// and in total, so that a flood of silent sockets, garbage or bogus TLS handshakes
// cannot hold the resources real edges need.
//
// When a budget is full, a new connection is not refused: the OLDEST pending connection
// of the source with the most pending ones is evicted (closed) instead. A real edge
// completes its handshake in a round trip or two, so it is never the oldest for long,
// while sockets that sit silent are pushed out by whoever arrives next; and a source
// flooding from one address only ever evicts its own connections until it holds more
// than anybody else.
type admission struct {
	total, perSource int

	mu      sync.Mutex
	n       int
	seq     uint64
	sources map[string][]*pending
}

// pending is an accepted connection that has not finished its handshake.
type pending struct {
	conn    net.Conn
	source  string
	seq     uint64
	evicted bool // closed by admission to make room; guarded by admission.mu
}

func newAdmission(total, perSource int) *admission {
	return &admission{total: total, perSource: perSource, sources: map[string][]*pending{}}
}

// admit registers conn as pending and returns it, closing the connection it evicts to
// make room, if any (reported as victim).
func (a *admission) admit(conn net.Conn) (p *pending, victim *pending) {
	src := sourceOf(conn.RemoteAddr())
	a.mu.Lock()
	switch {
	case len(a.sources[src]) >= a.perSource:
		victim = a.evictLocked(src)
	case a.n >= a.total:
		victim = a.evictLocked(a.busiestLocked())
	}
	a.seq++
	p = &pending{conn: conn, source: src, seq: a.seq}
	a.sources[src] = append(a.sources[src], p)
	a.n++
	a.mu.Unlock()
	if victim != nil {
		_ = victim.conn.Close()
	}
	return p, victim
}

// done removes p once its handshake ended, either way. It reports whether p had been
// evicted (so its failure is counted as an eviction, not as the peer's fault).
func (a *admission) done(p *pending) (evicted bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.evicted {
		return true
	}
	a.removeLocked(p)
	return false
}

// pendingCount is the number of connections in their handshake.
func (a *admission) pendingCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// busiestLocked is the source with the most pending connections; among equals, the one
// holding the oldest.
func (a *admission) busiestLocked() string {
	var best string
	var bestN int
	var bestSeq uint64
	for src, ps := range a.sources {
		if len(ps) > bestN || len(ps) == bestN && ps[0].seq < bestSeq {
			best, bestN, bestSeq = src, len(ps), ps[0].seq
		}
	}
	return best
}

// evictLocked marks the oldest pending connection of src evicted and removes it.
func (a *admission) evictLocked(src string) *pending {
	ps := a.sources[src]
	if len(ps) == 0 {
		return nil
	}
	v := ps[0]
	v.evicted = true
	a.removeLocked(v)
	return v
}

func (a *admission) removeLocked(p *pending) {
	ps := a.sources[p.source]
	for i, q := range ps {
		if q == p {
			ps = append(ps[:i], ps[i+1:]...)
			a.n--
			break
		}
	}
	if len(ps) == 0 {
		delete(a.sources, p.source)
	} else {
		a.sources[p.source] = ps
	}
}

// sourceOf is the address budgets are kept per: the IP, without the port.
func sourceOf(addr net.Addr) string {
	if ta, ok := addr.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}
