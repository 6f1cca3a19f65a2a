package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTunnelCredentialRules: authentication is the default; every way out of it is named
// in the error, and contradictory settings are refused.
func TestTunnelCredentialRules(t *testing.T) {
	dir := t.TempDir()
	pem := filepath.Join(dir, "c.pem")
	require.NoError(t, os.WriteFile(pem, []byte("x"), 0o600))
	shortKey := filepath.Join(dir, "short.key")
	require.NoError(t, os.WriteFile(shortKey, []byte("# comment\n\nc2hvcnQ=\n"), 0o600))

	origin := func(lines ...string) []byte {
		return doc(append([]string{
			"node: gw",          // 1
			"origin:",           // 2
			"  listen: ':7070'", // 3
			"  upstreams: [{name: bill, url: 'http://b'}]", // 4
		}, lines...)...)
	}
	edge := func(lines ...string) []byte {
		return doc(append([]string{
			"node: gw", // 1
			"edge:",    // 2
			"  listeners: [{name: main, listen: ':8080'}]", // 3
			"  routes: [{peer: dc1, upstream: bill}]",      // 4
			"  peers:",                // 5
			"    - name: dc1",         // 6
			"      address: dc1:7070", // 7
		}, lines...)...)
	}
	for name, tc := range map[string]struct {
		yaml []byte
		want string // "" for valid
	}{
		"origin without credentials":                    {origin(), "x.yaml:2: origin: no way to authenticate edges: add auth (a shared key: `soapgw keygen`), tls with ca_file (mutual TLS), or insecure: true"},
		"origin shared key file":                        {origin("  auth: {key_file: " + testKeyFile + "}"), ""},
		"origin inline key":                             {origin("  auth: {key: '" + testKey + "'}"), ""},
		"origin mutual TLS":                             {origin("  tls: {cert_file: " + pem + ", key_file: " + pem + ", ca_file: " + pem + "}"), ""},
		"origin TLS without a CA authenticates no edge": {origin("  tls: {cert_file: " + pem + ", key_file: " + pem + "}"), "x.yaml:2: origin: no way to authenticate edges"},
		"origin insecure":                               {origin("  insecure: true"), ""},
		"origin insecure with auth":                     {origin("  insecure: true", "  auth: {key: '"+testKey+"'}"), "x.yaml:5: origin.insecure: cannot be combined with auth or tls"},
		"auth without a key":                            {origin("  auth: {}"), "x.yaml:5: origin.auth: needs key_file or key"},
		"auth with both key sources":                    {origin("  auth: {key_file: " + testKeyFile + ", key: '" + testKey + "'}"), "x.yaml:5: origin.auth: key_file and key are exclusive"},
		"missing key file":                              {origin("  auth: {key_file: /nonexistent/tunnel.key}"), `x.yaml:5: origin.auth.key_file: cannot read "/nonexistent/tunnel.key"`},
		"short key in a file, with line":                {origin("  auth: {key_file: " + shortKey + "}"), shortKey + ":3: key is 5 bytes, want at least 32"},
		"short inline key":                              {origin("  auth: {key: c2hvcnQ=}"), "x.yaml:5: origin.auth.key: key:1: key is 5 bytes"},
		"handshake budgets":                             {origin("  insecure: true", "  max_handshakes: 0", "  max_handshakes_per_source: 3"), "x.yaml:6: origin.max_handshakes: must be at least 1, got 0"},
		"per-source budget above total":                 {origin("  insecure: true", "  max_handshakes: 2", "  max_handshakes_per_source: 3"), "x.yaml:7: origin.max_handshakes_per_source: must be from 1 to max_handshakes (2), got 3"},
		"handshake timeout":                             {origin("  insecure: true", "  handshake_timeout: 0s"), "x.yaml:6: origin.handshake_timeout: must be greater than 0"},

		"peer without credentials":           {edge(), "x.yaml:6: edge.peers[0]: no credentials for the origin: add auth (the shared key the origin holds), tls with cert_file and key_file (mutual TLS), or insecure: true"},
		"peer shared key":                    {edge("      auth: {key_file: " + testKeyFile + "}"), ""},
		"peer mutual TLS":                    {edge("      tls: {cert_file: " + pem + ", key_file: " + pem + ", ca_file: " + pem + "}"), ""},
		"peer TLS without a client cert":     {edge("      tls: {ca_file: " + pem + "}"), "x.yaml:6: edge.peers[0]: no credentials"},
		"peer TLS with a key":                {edge("      tls: {ca_file: "+pem+"}", "      auth: {key: '"+testKey+"'}"), ""},
		"peer insecure":                      {edge("      insecure: true"), ""},
		"peer insecure with TLS":             {edge("      insecure: true", "      tls: {ca_file: "+pem+"}"), "x.yaml:8: edge.peers[0].insecure: cannot be combined with auth or tls"},
		"peer key of the wrong kind of text": {edge("      auth: {key: 'not a key!'}"), "x.yaml:8: edge.peers[0].auth.key: key:1: not a base64 or hex key"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("x.yaml", tc.yaml)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestMarshalHidesInlineKeys(t *testing.T) {
	c, err := Parse("x.yaml", doc(
		"node: gw",
		"origin:",
		"  listen: ':7070'",
		"  auth: {key: '"+testKey+"'}",
		"  upstreams: [{name: bill, url: 'http://b'}]",
	))
	require.NoError(t, err)
	out, err := c.Marshal()
	require.NoError(t, err)
	require.Contains(t, string(out), "key: (secret)")
	require.False(t, strings.Contains(string(out), testKey[:12]), "config check must never print a key:\n%s", out)
}
