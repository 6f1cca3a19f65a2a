package proxy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEdgeReconfigure(t *testing.T) {
	peers := map[string]Opener{"dc1": OpenerFunc(nil)}
	e, err := NewEdge(EdgeConfig{Routes: []Route{{Peer: "dc1", Upstream: "a"}}, Peers: peers}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, DefaultExchangeTimeout, e.limits().ExchangeTimeout)

	routes := []Route{{PathPrefix: "/b/", Peer: "dc1", Upstream: "b"}, {Peer: "dc1", Upstream: "a"}}
	require.NoError(t, e.Reconfigure(routes, Limits{ExchangeTimeout: 5 * time.Second}))
	require.Equal(t, 5*time.Second, e.limits().ExchangeTimeout)
	require.Len(t, *e.routes.Load(), 2)
	routes[0].Upstream = "changed" // the edge keeps its own copy
	require.Equal(t, "b", (*e.routes.Load())[0].Upstream)

	for name, tc := range map[string]struct {
		routes []Route
		lim    Limits
		want   string
	}{
		"unknown peer":        {[]Route{{Peer: "dc9", Upstream: "a"}}, Limits{}, "unknown peer"},
		"no routes":           {nil, Limits{}, "at least one route"},
		"semaphore size":      {[]Route{{Peer: "dc1", Upstream: "a"}}, Limits{MaxConcurrentExchanges: 7}, "need a restart"},
		"route without upstr": {[]Route{{Peer: "dc1"}}, Limits{}, "no upstream"},
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorContains(t, e.Reconfigure(tc.routes, tc.lim), tc.want)
			require.Equal(t, 5*time.Second, e.limits().ExchangeTimeout, "a refused configuration changes nothing")
			require.Len(t, *e.routes.Load(), 2)
		})
	}
}

func TestOriginReconfigureKeepsUnchangedPools(t *testing.T) {
	a := Upstream{Name: "a", Address: "127.0.0.1:1", PoolSize: 4}
	b := Upstream{Name: "b", Address: "127.0.0.1:2", PoolSize: 4}
	o, err := NewOrigin(OriginConfig{Node: "o", Upstreams: []Upstream{a, b}}, nil, nil)
	require.NoError(t, err)
	before := *o.pools.Load()

	b2 := b
	b2.Address = "127.0.0.1:3"
	c := Upstream{Name: "c", Address: "127.0.0.1:4"}
	require.NoError(t, o.Reconfigure([]Upstream{a, b2, c}, Limits{MaxRequestBytes: 1 << 10}))
	after := *o.pools.Load()
	require.Same(t, before["a"], after["a"], "an unchanged upstream keeps its pool and idle connections")
	require.NotSame(t, before["b"], after["b"])
	require.Equal(t, "127.0.0.1:3", after["b"].up.Address)
	require.True(t, before["b"].retired, "the replaced pool closes connections given back to it")
	require.False(t, after["a"].retired)
	require.Contains(t, after, "c")
	require.EqualValues(t, 1<<10, o.limits().MaxRequestBytes)

	require.NoError(t, o.Reconfigure([]Upstream{a}, Limits{}))
	require.True(t, after["c"].retired, "a removed upstream's pool is retired")
	require.NotContains(t, *o.pools.Load(), "b")

	require.ErrorContains(t, o.Reconfigure([]Upstream{a, a}, Limits{}), "duplicate")
	require.ErrorContains(t, o.Reconfigure([]Upstream{a}, Limits{MaxConcurrentExchanges: 3}), "need a restart")
	require.Len(t, *o.pools.Load(), 1, "a refused configuration changes nothing")
}
