package proxy

import (
	"fmt"
	"time"
)

// Reconfigure replaces the edge's routes and limits for requests that start from now on;
// exchanges in flight finish with what they started with. The peers cannot change (their
// tunnels are built at start), nor MaxConcurrentExchanges (it sizes a semaphore); a
// configuration that changes either is refused, and nothing changes.
func (e *Edge) Reconfigure(routes []Route, lim Limits) error {
	cfg := EdgeConfig{Routes: routes, Peers: e.cfg.Peers}
	if err := cfg.validate(); err != nil {
		return err
	}
	lim = lim.withDefaults()
	if lim.MaxConcurrentExchanges != e.lim.MaxConcurrentExchanges {
		return fmt.Errorf("proxy: max_concurrent_exchanges changes need a restart (running %d)", e.lim.MaxConcurrentExchanges)
	}
	routes = append([]Route(nil), routes...)
	e.routes.Store(&routes)
	e.cur.Store(&lim)
	return nil
}

// limits are the limits in force: those of NewEdge or of the last Reconfigure.
func (e *Edge) limits() *Limits { return e.cur.Load() }

// Reconfigure replaces the origin's upstreams and limits for exchanges that start from now
// on. An upstream whose settings are unchanged keeps its pool of idle connections; a
// changed or removed one has its pool retired: idle connections close at once, busy ones
// when their exchange ends. MaxConcurrentExchanges cannot change without a restart.
func (o *Origin) Reconfigure(ups []Upstream, lim Limits) error {
	lim = lim.withDefaults()
	if lim.MaxConcurrentExchanges != o.lim.MaxConcurrentExchanges {
		return fmt.Errorf("proxy: max_concurrent_exchanges changes need a restart (running %d)", o.lim.MaxConcurrentExchanges)
	}
	old := *o.pools.Load()
	pools, err := o.newPools(ups, old)
	if err != nil {
		return err
	}
	o.pools.Store(&pools)
	o.cur.Store(&lim)
	for name, p := range old {
		if pools[name] != p {
			p.retire()
		}
	}
	return nil
}

// limits are the limits in force: those of NewOrigin or of the last Reconfigure.
func (o *Origin) limits() *Limits { return o.cur.Load() }

// newPools builds the pool map for ups, reusing from old the pools of upstreams whose
// settings did not change.
func (o *Origin) newPools(ups []Upstream, old map[string]*upstreamPool) (map[string]*upstreamPool, error) {
	pools := make(map[string]*upstreamPool, len(ups))
	for _, u := range ups {
		if _, dup := pools[u.Name]; dup {
			return nil, fmt.Errorf("proxy: duplicate upstream %q", u.Name)
		}
		u = u.withDefaults()
		if p := old[u.Name]; p != nil && p.up == u {
			pools[u.Name] = p
			continue
		}
		tlsConf, err := u.TLS.clientConfig(u.Address)
		if err != nil {
			return nil, fmt.Errorf("proxy: upstream %q: tls: %w", u.Name, err)
		}
		pools[u.Name] = &upstreamPool{up: u, tls: tlsConf, m: o.m}
		o.m.diverted.WithLabelValues(u.Name) // at 0, for increase() and the dashboard
		o.m.pinnedConns.WithLabelValues(u.Name)
		o.m.pinsEvicted.WithLabelValues(u.Name)
	}
	return pools, nil
}

// withDefaults fills the connect and idle timeouts. ResponseTimeout stays as given: 0 (the
// default) arms no deadline of its own for the response head, only the exchange's.
func (u Upstream) withDefaults() Upstream {
	if u.ConnectTimeout <= 0 {
		u.ConnectTimeout = 5 * time.Second
	}
	if u.IdleTimeout <= 0 {
		u.IdleTimeout = 60 * time.Second
	}
	return u
}
