package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/config"
	"github.com/soapgw/soapgw/internal/proxy"
)

// reloadBase is a configuration with both roles, as config.Parse would return it.
func reloadBase(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Parse("x.yaml", []byte(`node: n
edge:
  listeners: [{name: soap, listen: "127.0.0.1:8080"}]
  peers: [{name: dc1, address: "127.0.0.1:7070", auth: {key: "`+testKey+`"}}]
  routes: [{peer: dc1, upstream: svc}]
origin:
  listen: 127.0.0.1:7070
  auth: {key: "`+testKey+`"}
  upstreams: [{name: svc, url: "http://127.0.0.1:9090"}]
`))
	require.NoError(t, err)
	return c
}

const testKey = "nKixSKzhh4RsndIJql94OdeHY7xbBsz6ke/Wy85ks/M="

func TestProxyLimitsFaultStatus(t *testing.T) {
	c := reloadBase(t)
	require.Equal(t, proxy.FaultStatusSOAP, proxyLimits(c.Limits).FaultStatus, "the default")
	c.Limits.FaultStatus = config.FaultStatusHTTP
	require.Equal(t, proxy.FaultStatusHTTP, proxyLimits(c.Limits).FaultStatus)
	c.Limits.FaultStatus = config.FaultStatusSOAP
	require.Equal(t, proxy.FaultStatusSOAP, proxyLimits(c.Limits).FaultStatus)
}

func TestNeedsRestartNamesOnlyWhatDoesNotReloadLive(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(c *config.Config)
		want   []string
	}{
		"credentials":           {func(c *config.Config) { c.Origin.Auth = &config.Auth{KeyFile: "k"} }, nil},
		"routes":                {func(c *config.Config) { c.Edge.Routes[0].PathPrefix = "/x/" }, nil},
		"upstreams":             {func(c *config.Config) { c.Origin.Upstreams[0].URL = "http://127.0.0.1:9" }, nil},
		"limits":                {func(c *config.Config) { c.Limits.ExchangeTimeout = time.Second }, nil},
		"fault status":          {func(c *config.Config) { c.Limits.FaultStatus = config.FaultStatusHTTP }, nil},
		"concurrency semaphore": {func(c *config.Config) { c.Limits.MaxConcurrentExchanges = 3 }, []string{"limits"}},
		"listeners":             {func(c *config.Config) { c.Edge.Listeners[0].Listen = "127.0.0.1:1" }, []string{"edge"}},
		"peer address":          {func(c *config.Config) { c.Edge.Peers[0].Address = "127.0.0.1:1" }, []string{"edge"}},
		"origin listen":         {func(c *config.Config) { c.Origin.Listen = "127.0.0.1:1" }, []string{"origin"}},
		"insecure":              {func(c *config.Config) { c.Origin.Insecure = true }, []string{"origin"}},
		"codecs and node":       {func(c *config.Config) { c.Codecs.GzipLevel = 1; c.Node = "m" }, []string{"node", "codecs"}},
	} {
		t.Run(name, func(t *testing.T) {
			running, next := reloadBase(t), reloadBase(t)
			tc.change(next)
			require.Equal(t, tc.want, needsRestart(running, next))
		})
	}
}

func TestWithLiveOfTakesOnlyLiveSections(t *testing.T) {
	running, next := reloadBase(t), reloadBase(t)
	next.Edge.Routes[0].Upstream = "other"
	next.Origin.Upstreams[0].URL = "http://127.0.0.1:9"
	next.Limits.ExchangeTimeout = time.Second
	next.Edge.Peers[0].Auth = &config.Auth{KeyFile: "new.key"}
	next.Edge.Peers[0].Address = "127.0.0.1:1" // needs a restart: not taken
	next.Node = "m"                            // likewise
	got := withLiveOf(running, next)
	require.Equal(t, "other", got.Edge.Routes[0].Upstream)
	require.Equal(t, "http://127.0.0.1:9", got.Origin.Upstreams[0].URL)
	require.Equal(t, time.Second, got.Limits.ExchangeTimeout)
	require.Equal(t, "new.key", got.Edge.Peers[0].Auth.KeyFile)
	require.Equal(t, "127.0.0.1:7070", got.Edge.Peers[0].Address)
	require.Equal(t, "n", got.Node)
	require.Empty(t, needsRestart(got, withLiveOf(got, got)))
}
