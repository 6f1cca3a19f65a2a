package proxy

import (
	"sync"
	"time"
)

// largeResponses remembers, at the edge, which operations of which peer had a response
// diverted to the peer's other tunnel lately (Origin.divert: a large response while the
// UDP path loses packets). The next call of such an operation is sent over that tunnel
// at once: its response comes back on the stream of its request, instead of costing a
// diverted answer and a resume, one round trip more. The memory is short
// (largeResponseMemory after the last diversion) and bounded; a response that turns out
// small ends it early. When the UDP path clears, the origin stops diverting and the edge
// forgets within that time.
type largeResponses struct {
	mu  sync.Mutex
	ops map[largeKey]time.Time // when it was last diverted
	now func() time.Time
}

type largeKey struct{ peer, op string }

const (
	// largeResponseMemory is how long after its last diversion an operation's calls go
	// over the other tunnel.
	largeResponseMemory = 30 * time.Second
	// maxLargeOps bounds the memory (operation names come from clients).
	maxLargeOps = 1024
)

// noteDiverted records that op's response (through peer) was diverted.
func (l *largeResponses) noteDiverted(peer, op string) {
	if op == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ops == nil {
		l.ops = map[largeKey]time.Time{}
	}
	now := l.now()
	if len(l.ops) >= maxLargeOps {
		for k, at := range l.ops {
			if now.Sub(at) > largeResponseMemory {
				delete(l.ops, k)
			}
		}
		if len(l.ops) >= maxLargeOps {
			return
		}
	}
	l.ops[largeKey{peer, op}] = now
}

// expected reports whether op's calls through peer go over the other tunnel now.
func (l *largeResponses) expected(peer, op string) bool {
	if op == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.ops[largeKey{peer, op}]
	if ok && l.now().Sub(at) > largeResponseMemory {
		delete(l.ops, largeKey{peer, op})
		return false
	}
	return ok
}

// forget ends the memory of op (its response over the other tunnel was small).
func (l *largeResponses) forget(peer, op string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.ops, largeKey{peer, op})
}

// exchangeOpener is the opener of x's request stream: the peer's other tunnel when x's
// operation had its responses diverted lately (largeResponses), else its own.
func (e *Edge) exchangeOpener(x *exchange, opener Opener) (_ Opener, other bool) {
	if d, ok := opener.(Diverter); ok && e.large.expected(x.route.Peer, x.op) {
		return OpenerFunc(d.OpenDiverted), true
	}
	return opener, false
}
