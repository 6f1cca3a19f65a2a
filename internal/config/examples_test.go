package config

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// examplesDir holds the documented example configurations.
const examplesDir = "../../deploy/examples"

func TestExamplesLoad(t *testing.T) {
	exampleKey(t)
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	require.NoError(t, err)
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	require.Subset(t, names, []string{"edge.yaml", "origin.yaml", "both.yaml"})

	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f)
			require.NoError(t, err)
			require.True(t, c.Edge != nil || c.Origin != nil)
		})
	}
}

func TestExampleBothTunnelsToItself(t *testing.T) {
	exampleKey(t)
	c, err := Load(filepath.Join(examplesDir, "both.yaml"))
	require.NoError(t, err)
	require.NotNil(t, c.Edge)
	require.NotNil(t, c.Origin)
	require.Equal(t, c.Origin.Listen, c.Edge.Peers[0].Address)
	require.Equal(t, c.Origin.Upstreams[0].Name, c.Edge.Routes[0].Upstream)
}

func TestExamplesUseEnvDefaults(t *testing.T) {
	exampleKey(t)
	t.Setenv("SOAPGW_NODE", "from-env")
	t.Setenv("INVENTORY_URL", "https://elsewhere:9443")
	c, err := Load(filepath.Join(examplesDir, "origin.yaml"))
	require.NoError(t, err)
	require.Equal(t, "from-env", c.Node)
	require.Equal(t, "elsewhere:9443", c.Origin.Upstreams[2].HostPort())
}

func TestMarshalRoundTrip(t *testing.T) {
	exampleKey(t)
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	require.NoError(t, err)
	inputs := map[string][]byte{
		"edge-minimal":   doc(edgeDoc...),
		"origin-minimal": doc(append(originDoc, "      http_version: '1.0'")...),
	}
	for _, f := range files {
		c, err := Load(f)
		require.NoError(t, err)
		out, err := c.Marshal()
		require.NoError(t, err)
		inputs[filepath.Base(f)] = out
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			c, err := Parse(name, in)
			require.NoError(t, err)
			out, err := c.Marshal()
			require.NoError(t, err)
			again, err := Parse(name, out)
			require.NoError(t, err, "marshalled:\n%s", out)
			require.Equal(t, c, again)
		})
	}
}

func TestMarshalShowsDefaults(t *testing.T) {
	c, err := Parse("x.yaml", doc(append(originDoc, "      http_version: '1.0'")...))
	require.NoError(t, err)
	out, err := c.Marshal()
	require.NoError(t, err)
	want := `node: gw
admin:
  listen: ""
  pprof: false
origin:
  listen: :7070
  upstreams:
    - name: bill
      url: http://bill:8080
      http_version: "1.0"
      chunked: false
      host_header: preserve
      connect_timeout: 5s
      response_timeout: 0s
      idle_timeout: 1m0s
      pool_size: 64
      insecure_skip_verify: false
  max_connections: 256
  codec: auto
  rto_min: 20ms
  insecure: true
  handshake_timeout: 5s
  max_handshakes: 256
  max_handshakes_per_source: 16
  resume_window: 30s
  resume_max_bytes: 64MiB
limits:
  max_request_bytes: 32MiB
  max_response_bytes: 64MiB
  max_header_bytes: 64KiB
  exchange_timeout: 10m0s
  exchange_max_duration: 24h0m0s
  max_concurrent_exchanges: 4096
  idle_timeout: 1m30s
  max_client_connections: 10000
  allow_absolute_form: false
  fault_status: soap
codecs:
  gzip_level: 6
  zstd_level: 3
  zstd_dictionary: builtin
  token_dictionary: 1MiB
  auto_min_size: 0
  max_coded_message: 1MiB
  retention: 8MiB
  udp_window: 0
drain_timeout: 15s
`
	require.Equal(t, want, string(out))
}

// exampleKey points the examples' ${SOAPGW_KEY_FILE} at the committed test key, as a
// deployment points it at its own.
func exampleKey(t *testing.T) {
	t.Setenv("SOAPGW_KEY_FILE", testKeyFile)
}

// TestExamplesShowUDPTunnel: the examples show a UDP peer with the TCP fallback, and an
// origin whose UDP listener defaults to its tunnel address (docs/operations.md, "UDP tunnel").
func TestExamplesShowUDPTunnel(t *testing.T) {
	exampleKey(t)
	edge, err := Load(filepath.Join(examplesDir, "edge.yaml"))
	require.NoError(t, err)
	var udp *Peer
	for i, p := range edge.Edge.Peers {
		if p.Transport == TransportUDP {
			udp = &edge.Edge.Peers[i]
		}
	}
	require.NotNil(t, udp, "edge.yaml: a peer with transport: udp")
	require.Equal(t, TransportTCP, udp.Fallback)
	routed := false
	for _, r := range edge.Edge.Routes {
		routed = routed || r.Peer == udp.Name
	}
	require.True(t, routed, "edge.yaml: a route to the UDP peer %s", udp.Name)

	origin, err := Load(filepath.Join(examplesDir, "origin.yaml"))
	require.NoError(t, err)
	require.Equal(t, origin.Origin.Listen, origin.Origin.UDPAddress(), "origin.yaml: udp_listen defaults to listen")
}
