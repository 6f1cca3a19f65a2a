package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/soapgw/soapgw/internal/config"
)

func TestSoapgwConfigs(t *testing.T) {
	p := SoapgwParams{Codec: "zstd", EdgeListen: "10.0.0.1:1", EdgeAdmin: "10.0.0.1:2", TunnelListen: "10.0.0.2:3",
		OriginAdmin: "10.0.0.2:4", Upstream: "10.0.0.2:5", OriginCodec: true, KeyFile: "/k/tunnel.key"}
	edge, origin, err := SoapgwConfigs(p)
	require.NoError(t, err)
	var e, o map[string]any
	require.NoError(t, yaml.Unmarshal(edge, &e))
	require.NoError(t, yaml.Unmarshal(origin, &o))
	peer := e["edge"].(map[string]any)["peers"].([]any)[0].(map[string]any)
	require.Equal(t, "10.0.0.2:3", peer["address"])
	require.Equal(t, "zstd", peer["codec"])
	require.Equal(t, 1, peer["connections"])
	require.Equal(t, "10.0.0.1:1", e["edge"].(map[string]any)["listeners"].([]any)[0].(map[string]any)["listen"])
	require.Equal(t, "10.0.0.1:2", e["admin"].(map[string]any)["listen"])
	og := o["origin"].(map[string]any)
	require.Equal(t, "zstd", og["codec"])
	require.Equal(t, "10.0.0.2:3", og["listen"])
	require.Equal(t, "http://10.0.0.2:5", og["upstreams"].([]any)[0].(map[string]any)["url"])
	require.Equal(t, map[string]any{"key_file": "/k/tunnel.key"}, og["auth"], "the tunnel is authenticated as deployed")
	require.Equal(t, map[string]any{"key_file": "/k/tunnel.key"}, peer["auth"])

	require.NotContains(t, peer, "transport", "tcp is the default")
	require.NotContains(t, e["edge"], "one_way", "no one-way scenario: no spool")
	require.NotContains(t, og, "one_way")

	p.OriginCodec = false
	_, origin, err = SoapgwConfigs(p)
	require.NoError(t, err)
	require.NotContains(t, string(origin), "codec")

	p.Transport, p.Redundancy = "udp", "on"
	edge, _, err = SoapgwConfigs(p)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(edge, &e))
	peer = e["edge"].(map[string]any)["peers"].([]any)[0].(map[string]any)
	require.Equal(t, "udp", peer["transport"])
	require.Equal(t, "on", peer["redundancy"])
	require.NotContains(t, peer, "fallback")

	p.Redundancy, p.Fallback = "auto", "tcp"
	edge, _, err = SoapgwConfigs(p)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(edge, &e))
	peer = e["edge"].(map[string]any)["peers"].([]any)[0].(map[string]any)
	require.Equal(t, "tcp", peer["fallback"])
}

func TestSoapgwWithoutBinaryIsSkipped(t *testing.T) {
	_, err := soapgwPair{codec: "identity"}.Start(context.Background(), &Env{})
	require.ErrorIs(t, err, ErrSkipped)
}

func TestConfigByName(t *testing.T) {
	for _, name := range append([]string{"direct", "nginx-pair"}, "soapgw/identity", "soapgw/zstd-stream", "soapgw/auto",
		"soapgw-udp/token", "soapgw-udp-auto/token", "soapgw-udp-redundant/auto", "soapgw-udp-tcp/auto") {
		c, err := ConfigByName(name)
		require.NoError(t, err)
		require.Equal(t, name, c.Name())
		require.NotEmpty(t, c.Describe())
	}
	for _, name := range DefaultConfigs {
		_, err := ConfigByName(name)
		require.NoError(t, err)
	}
	names := ConfigNames()
	require.Len(t, names, 2+5*len(SoapgwCodecs))
	for _, name := range names {
		c, err := ConfigByName(name)
		require.NoError(t, err, name)
		require.Equal(t, name, c.Name())
		if strings.HasPrefix(name, "soapgw-udp") {
			require.Contains(t, c.Describe(), "UDP (QUIC)")
		}
	}
	require.Subset(t, names, DefaultConfigs)
	require.Contains(t, names, "soapgw-udp/token")
	_, err := ConfigByName("soapgw/")
	require.Error(t, err)
	_, err = ConfigByName("soapgw-udp/brotli")
	require.ErrorContains(t, err, `unknown codec "brotli"`)
	_, err = ConfigByName("haproxy")
	require.True(t, strings.Contains(err.Error(), "unknown configuration"))
}

// TestSoapgwConfigsOneWay: with one-way scenarios in the run, the edge marks their
// operations in edge.one_way (spool in the run's directory) and the origin delivers them
// (origin.one_way, its ledger beside it); soapgw's own configuration parser accepts both.
func TestSoapgwConfigsOneWay(t *testing.T) {
	spec, _ := ScenarioByName("stress-oneway")
	key, err := writeTunnelKey(t.TempDir())
	require.NoError(t, err)
	p := SoapgwParams{Codec: "auto", KeyFile: key, EdgeListen: "10.0.0.1:1", EdgeAdmin: "10.0.0.1:2", TunnelListen: "10.0.0.2:3",
		OriginAdmin: "10.0.0.2:4", Upstream: "10.0.0.2:5", OriginCodec: true,
		OneWay:    []OneWayOperation{{PathPrefix: spec.Path, Operation: spec.OneWayOperation}, {Operation: "notify"}},
		SpoolFile: "/w/lan/02-soapgw-auto/soapgw/edge-spool.db", LedgerFile: "/w/lan/02-soapgw-auto/soapgw/origin-ledger.db"}
	edge, origin, err := SoapgwConfigs(p)
	require.NoError(t, err)

	ec, err := config.Parse("edge.yaml", edge)
	require.NoError(t, err, "%s", edge)
	ow := ec.Edge.OneWay
	require.NotNil(t, ow)
	require.Equal(t, p.SpoolFile, ow.Spool)
	require.Equal(t, []config.OneWayOperation{
		{PathPrefix: "/axis/services/CalendarOneWay", Operation: "addEntry"},
		{Operation: "notify"},
	}, ow.Operations)
	require.Equal(t, 202, ow.AcceptStatus, "soapgw's defaults: 202 Accepted, as the server answers")
	require.Equal(t, 1024, ow.Deliveries, "soapgw's default")
	require.NotContains(t, string(edge), "deliveries")

	p.Deliveries = 256
	edge, _, err = SoapgwConfigs(p)
	require.NoError(t, err)
	ec, err = config.Parse("edge.yaml", edge)
	require.NoError(t, err, "%s", edge)
	require.Equal(t, 256, ec.Edge.OneWay.Deliveries)

	oc, err := config.Parse("origin.yaml", origin)
	require.NoError(t, err, "%s", origin)
	require.NotNil(t, oc.Origin.OneWay)
	require.Equal(t, p.LedgerFile, oc.Origin.OneWay.Ledger)
	require.Equal(t, config.InDoubtHold, oc.Origin.OneWay.InDoubt, "at most once: a duplicate would fail the run")
}

func TestDescribeOneWay(t *testing.T) {
	require.Equal(t, "addEntry under /a, ping", describeOneWay([]OneWayOperation{{PathPrefix: "/a", Operation: "addEntry"}, {Operation: "ping"}}))
	require.NotEmpty(t, fsName(t.TempDir()))
}
