package proxy

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
)

// connectionAuth reports whether an exchange took part in an authentication that binds
// the upstream connection rather than the request: NTLM, and Negotiate (Kerberos or
// NTLM) as IIS runs it by default, where the server authenticates a connection after a
// handshake of several requests and then treats every later request on it as that user's,
// with or without credentials; IIS's Persistent-Auth field says so outright. Such a
// connection must never go back to the pool that every client of the upstream shares:
// the next client's request on it would run as the user who authenticated it.
func connectionAuth(req, resp httpwire.Header) bool {
	for i := range req {
		if equalFold(req[i].Name, "Authorization") && isConnScheme(firstToken(req[i].Value)) {
			return true
		}
	}
	for i := range resp {
		switch {
		case equalFold(resp[i].Name, "WWW-Authenticate"):
			// A challenge list: "Negotiate, NTLM", "NTLM <token>", `Basic realm="a, b"`;
			// each element's first token names a scheme or is a parameter.
			for _, elem := range strings.Split(resp[i].Value, ",") {
				if isConnScheme(firstToken(elem)) {
					return true
				}
			}
		case equalFold(resp[i].Name, "Persistent-Auth"):
			return true
		}
	}
	return false
}

// firstToken is v's first space-separated token, without leading whitespace.
func firstToken(v string) string {
	v = strings.TrimLeft(v, " \t")
	if i := strings.IndexAny(v, " \t"); i >= 0 {
		return v[:i]
	}
	return v
}

func isConnScheme(s string) bool { return equalFold(s, "NTLM") || equalFold(s, "Negotiate") }

// Connection affinity. For connection-bound authentication to work through the pair,
// every request of one client connection that authenticated so must reach the upstream
// on the one upstream connection it authenticated, and no other client's request ever
// may. The edge tags the exchange ids of such a client connection (from its first request
// with NTLM or Negotiate credentials on) with an affinity key: the id's own edge instance
// prefix and a number for the client connection, "<instance>-<n>~c<conn>". Exchange ids
// are opaque to origins that predate this (they keep ids whole for held responses and
// logs), so no format changes. The origin keeps the upstream connection of such an
// exchange pinned to the key instead of pooled (upstreamPool.pin), and the key's later
// exchanges take it back (takePinned).

// affinitySep separates an exchange id from its affinity key.
const affinitySep = "~"

// affinityCounter numbers the client connections that get an affinity key.
var affinityCounter atomic.Uint64

// affine returns id tagged with the client connection's affinity key: when the
// connection has one, or when req starts a connection-bound authentication on a
// connection that stays open after it (then the connection gets its key now; a client
// that closes after each call, HTTP/1.0 style, could never use a pinned connection again,
// which would only sit idle at the upstream).
func (cc *clientConn) affine(id string, req *httpwire.Request) string {
	if cc.affinity == "" {
		if req.Close || !connectionAuth(req.Header, nil) {
			return id
		}
		cc.affinity = "c" + strconv.FormatUint(affinityCounter.Add(1), 10)
	}
	return id + affinitySep + cc.affinity
}

// affinityKey is the key an exchange id carries, with the edge instance it belongs to
// (keys are unique only within an edge process); "" for none.
func affinityKey(id string) string {
	i := strings.LastIndex(id, affinitySep)
	j := strings.IndexByte(id, '-')
	if i < 0 || j < 0 || j > i || i+len(affinitySep) == len(id) || envelope.IsOneWay(id) {
		return ""
	}
	return id[:j+1] + id[i+len(affinitySep):]
}

// maxPinnedConns bounds the connections an upstream pool keeps pinned to affinity keys.
// When the table is full a new pin takes the place of the one idle longest: its client has
// most likely gone (the edge does not say when a client connection closes); were it still
// there, its next request finds no pin and the server asks it to authenticate again, on a
// connection of its own. The new pin is the one a handshake in progress needs.
const maxPinnedConns = 256

// takePinned returns the idle connection pinned to key, if it is still usable, and unpins
// it: an exchange of key that finds none (or finds it busy with another of its exchanges)
// goes to a connection of its own.
func (p *upstreamPool) takePinned(key string) *upstreamConn {
	p.mu.Lock()
	uc := p.pins[key]
	delete(p.pins, key)
	p.notePinsLocked()
	p.mu.Unlock()
	if uc == nil {
		return nil
	}
	if time.Since(uc.idleSince) < p.up.IdleTimeout && uc.alive() {
		return uc
	}
	_ = uc.conn.Close()
	return nil
}

// pin keeps uc idle for key's next exchange, not in the shared pool. Pins idle longer than
// the upstream's idle timeout are closed here (a key's client may be long gone: the edge
// does not say when its connection closes), and the one idle longest when the table is
// full (maxPinnedConns).
func (p *upstreamPool) pin(key string, uc *upstreamConn) {
	uc.idleSince = time.Now()
	_ = uc.conn.SetDeadline(time.Time{})
	uc.armed = false
	var closing []*upstreamConn
	p.mu.Lock()
	oldestKey := ""
	for k, c := range p.pins {
		switch {
		case uc.idleSince.Sub(c.idleSince) >= p.up.IdleTimeout:
			closing = append(closing, c)
			delete(p.pins, k)
		case k != key && (oldestKey == "" || c.idleSince.Before(p.pins[oldestKey].idleSince)):
			oldestKey = k
		}
	}
	switch old := p.pins[key]; {
	case p.retired:
		closing = append(closing, uc)
	default:
		if old != nil { // another exchange of key took a connection of its own
			closing = append(closing, old)
		} else if len(p.pins) >= maxPinnedConns {
			closing = append(closing, p.pins[oldestKey])
			delete(p.pins, oldestKey)
			if p.m != nil {
				p.m.pinsEvicted.WithLabelValues(p.up.Name).Inc()
			}
		}
		if p.pins == nil {
			p.pins = make(map[string]*upstreamConn)
		}
		p.pins[key] = uc
	}
	p.notePinsLocked()
	p.mu.Unlock()
	for _, c := range closing {
		_ = c.conn.Close()
	}
}

// notePinsLocked sets the pinned connections gauge; p.mu is held.
func (p *upstreamPool) notePinsLocked() {
	if p.m != nil {
		p.m.pinnedConns.WithLabelValues(p.up.Name).Set(float64(len(p.pins)))
	}
}
