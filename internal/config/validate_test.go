package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// originDoc is a valid origin configuration; line numbers are in comments.
var originDoc = []string{
	"node: gw",                    // 1
	"origin:",                     // 2
	`  listen: ":7070"`,           // 3
	"  insecure: true",            // 4: an origin needs credentials; the credential tests use auth
	"  upstreams:",                // 5
	"    - name: bill",            // 6
	"      url: http://bill:8080", // 7
}

func TestParseValidationErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml []byte
		want []string
	}{
		// Top level.
		{
			name: "no role",
			yaml: doc("node: gw", "drain_timeout: 1s"),
			want: []string{"x.yaml:1: no role configured: add an edge section, an origin section, or both"},
		},
		{
			name: "empty node",
			yaml: doc(with(edgeDoc, 1, `node: ""`)...),
			want: []string{"x.yaml:1: node: must not be empty"},
		},
		{
			name: "node with space",
			yaml: doc(with(edgeDoc, 1, `node: "gw 1"`)...),
			want: []string{`x.yaml:1: node: "gw 1" contains spaces or non-printable characters`},
		},
		{
			name: "admin listen",
			yaml: doc(append(edgeDoc, "admin:", "  listen: localhost")...),
			want: []string{`x.yaml:14: admin.listen: missing port in address "localhost"`},
		},
		{
			name: "listen collision",
			yaml: doc(append(edgeDoc, "admin:", `  listen: ":8080"`)...),
			want: []string{`x.yaml:14: admin.listen: address ":8080" is already used by edge.listeners[0].listen`},
		},
		{
			name: "listen collision between edge listeners",
			yaml: doc(with(edgeDoc, 5, `      listen: ":8080"`, "    - name: side", `      listen: ":8080"`)...),
			want: []string{`x.yaml:7: edge.listeners[1].listen: address ":8080" is already used by edge.listeners[0].listen`},
		},
		{
			name: "negative drain timeout from a quoted string",
			yaml: doc(append(edgeDoc, `drain_timeout: "-1s"`)...),
			want: []string{`x.yaml:13: drain_timeout: must not be negative, got -1s`},
		},
		// Limits.
		{
			name: "zero sizes and timeouts",
			yaml: doc(append(edgeDoc,
				"limits:",                       // 12
				"  max_request_bytes: 0",        // 13
				"  max_response_bytes: 0B",      // 14
				"  max_header_bytes: 0KiB",      // 15
				"  exchange_timeout: 0s",        // 16
				"  max_concurrent_exchanges: 0", // 17
				"  idle_timeout: 0s",            // 18
			)...),
			want: []string{
				"x.yaml:14: limits.max_request_bytes: must be greater than 0, got 0",
				"x.yaml:15: limits.max_response_bytes: must be greater than 0, got 0",
				"x.yaml:16: limits.max_header_bytes: must be greater than 0, got 0",
				"x.yaml:17: limits.exchange_timeout: must be greater than 0",
				"x.yaml:18: limits.max_concurrent_exchanges: must be at least 1, got 0",
				"x.yaml:19: limits.idle_timeout: must be greater than 0",
			},
		},
		{
			name: "exchange_max_duration below exchange_timeout",
			yaml: doc(append(edgeDoc,
				"limits:",                     // 12
				"  exchange_timeout: 10m",     // 13
				"  exchange_max_duration: 5m", // 14
			)...),
			want: []string{"x.yaml:15: limits.exchange_max_duration: must be at least limits.exchange_timeout (10m0s), got 5m0s"},
		},
		{
			name: "unknown fault status",
			yaml: doc(append(edgeDoc,
				"limits:",              // 12
				"  fault_status: HTTP", // 13
			)...),
			want: []string{`x.yaml:14: limits.fault_status: unknown fault status "HTTP" (allowed: soap, http)`},
		},
		{
			name: "empty fault status",
			yaml: doc(append(edgeDoc,
				"limits:",            // 12
				`  fault_status: ""`, // 13
			)...),
			want: []string{`x.yaml:14: limits.fault_status: unknown fault status "" (allowed: soap, http)`},
		},
		// Edge listeners.
		{
			name: "missing listener fields point at the list item",
			yaml: doc(with(with(edgeDoc, 5), 4, "    - {}")...),
			want: []string{
				"x.yaml:4: edge.listeners[0].name: missing required field",
				"x.yaml:4: edge.listeners[0].listen: missing required field",
			},
		},
		{
			name: "duplicate listener",
			yaml: doc(with(edgeDoc, 5, `      listen: ":8080"`, "    - name: main", `      listen: ":8081"`)...),
			want: []string{`x.yaml:6: edge.listeners[1].name: duplicate name "main" (also used by edge.listeners[0])`},
		},
		{
			name: "listener port out of range",
			yaml: doc(with(edgeDoc, 5, `      listen: ":70000"`)...),
			want: []string{`x.yaml:5: edge.listeners[0].listen: port "70000" must be a number from 1 to 65535`},
		},
		{
			name: "peer port zero",
			yaml: doc(with(edgeDoc, 8, `      address: "dc1.example:0"`)...),
			want: []string{`x.yaml:8: edge.peers[0].address: port "0" must be a number from 1 to 65535`},
		},
		{
			name: "listener named port",
			yaml: doc(with(edgeDoc, 5, `      listen: ":http"`)...),
			want: []string{`x.yaml:5: edge.listeners[0].listen: port "http" must be a number from 1 to 65535`},
		},
		{
			name: "listener name syntax",
			yaml: doc(with(edgeDoc, 4, "    - name: main/1")...),
			want: []string{`x.yaml:4: edge.listeners[0].name: invalid name "main/1": use only letters, digits, '.', '_' and '-'`},
		},
		{
			name: "no listeners",
			yaml: doc(with(with(with(edgeDoc, 5), 4), 3, "  listeners: []")...),
			want: []string{"x.yaml:3: edge.listeners: at least one listener is required"},
		},
		// Edge peers.
		{
			name: "missing port",
			yaml: doc(with(edgeDoc, 8, "      address: dc1")...),
			want: []string{`x.yaml:8: edge.peers[0].address: missing port in address "dc1"`},
		},
		{
			name: "too many colons",
			yaml: doc(with(edgeDoc, 8, "      address: ::1:70")...),
			want: []string{`x.yaml:8: edge.peers[0].address: too many colons in address "::1:70"`},
		},
		{
			name: "peer needs a host",
			yaml: doc(with(edgeDoc, 8, `      address: ":70"`)...),
			want: []string{`x.yaml:8: edge.peers[0].address: missing host in address ":70"`},
		},
		{
			name: "missing peer address points at the list item",
			yaml: doc(with(edgeDoc, 8)...),
			want: []string{"x.yaml:7: edge.peers[0].address: missing required field"},
		},
		{
			name: "duplicate peer",
			yaml: doc(with(edgeDoc, 8, "      address: dc1:70", "      insecure: true", "    - name: dc1", "      address: dc2:70")...),
			want: []string{`x.yaml:10: edge.peers[1].name: duplicate name "dc1" (also used by edge.peers[0])`},
		},
		{
			name: "codec settings out of range",
			yaml: doc(append(with(edgeDoc, 8, "      address: dc1:70", "      codec: zstd"),
				"    - {peer: dc1, upstream: y, path_prefix: /y, codec: brotli}", // 13
				"codecs:",                     // 14
				"  gzip_level: 0",             // 15
				"  zstd_level: 23",            // 16
				"  zstd_dictionary: mine",     // 17
				"  token_dictionary: 1KiB",    // 18
				"  max_coded_message: 128MiB", // 19
				"  retention: 1MiB",           // 20
			)...),
			want: []string{
				`x.yaml:14: edge.routes[1].codec: unknown codec "brotli" (allowed: identity, gzip, zstd, zstd-stream, token, auto)`,
				"x.yaml:16: codecs.gzip_level: must be from 1 to 9, got 0",
				"x.yaml:17: codecs.zstd_level: must be from 1 to 22, got 23",
				`x.yaml:18: codecs.zstd_dictionary: unknown zstd dictionary "mine" (allowed: builtin, none)`,
				"x.yaml:19: codecs.token_dictionary: must be from 4KiB to 64MiB, got 1024 bytes",
				"x.yaml:20: codecs.max_coded_message: must be from 1KiB to 64MiB, got 134217728 bytes",
				"x.yaml:21: codecs.retention: must be at least codecs.max_coded_message (134217728 bytes), got 1048576",
			},
		},
		{
			name: "fallback only with udp",
			yaml: doc(with(edgeDoc, 8,
				"      address: dc1:70", // 8
				"      fallback: tcp",   // 9
			)...),
			want: []string{"x.yaml:9: edge.peers[0].fallback: only applies to transport: udp"},
		},
		{
			name: "redundancy only with udp",
			yaml: doc(with(edgeDoc, 8,
				"      address: dc1:70", // 8
				"      redundancy: on",  // 9
			)...),
			want: []string{"x.yaml:9: edge.peers[0].redundancy: only applies to transport: udp"},
		},
		{
			name: "unknown redundancy",
			yaml: doc(with(edgeDoc, 8,
				"      address: dc1:70",    // 8
				"      transport: udp",     // 9
				"      redundancy: always", // 10
			)...),
			want: []string{`x.yaml:10: edge.peers[0].redundancy: unknown redundancy "always" (allowed: auto, on, off, true, false)`},
		},
		{
			name: "unknown fallback",
			yaml: doc(with(edgeDoc, 8,
				"      address: dc1:70",   // 8
				"      transport: udp",    // 9
				"      fallback: carrier", // 10
			)...),
			want: []string{`x.yaml:10: edge.peers[0].fallback: unknown fallback "carrier" (allowed: tcp)`},
		},
		{
			name: "peer settings out of range",
			yaml: doc(with(edgeDoc, 8,
				"      address: dc1:70",        // 8
				"      transport: quic",        // 9
				"      connections: 65",        // 10
				"      codec: lz4",             // 11
				"      dial_timeout: 0s",       // 12
				"      keepalive_interval: 0s", // 13
				"      keepalive_timeout: 0s",  // 14
				"      rto_min: 1s",            // 15
			)...),
			want: []string{
				`x.yaml:9: edge.peers[0].transport: unknown transport "quic" (allowed: tcp, udp)`,
				"x.yaml:10: edge.peers[0].connections: must be from 1 to 64, got 65",
				`x.yaml:11: edge.peers[0].codec: unknown codec "lz4" (allowed: identity, gzip, zstd, zstd-stream, token, auto)`,
				"x.yaml:12: edge.peers[0].dial_timeout: must be greater than 0",
				"x.yaml:13: edge.peers[0].keepalive_interval: must be greater than 0",
				"x.yaml:14: edge.peers[0].keepalive_timeout: must be greater than 0",
				"x.yaml:15: edge.peers[0].rto_min: must be at most 200ms (the kernel's own minimum), got 1s",
			},
		},
		{
			name: "zero connections",
			yaml: doc(with(edgeDoc, 8, "      address: dc1:70", "      connections: 0")...),
			want: []string{"x.yaml:9: edge.peers[0].connections: must be from 1 to 64, got 0"},
		},
		{
			name: "max_connections below connections",
			yaml: doc(with(edgeDoc, 8, "      address: dc1:70", "      connections: 4", "      max_connections: 3")...),
			want: []string{"x.yaml:10: edge.peers[0].max_connections: must be from connections (4) to 64, got 3"},
		},
		// Edge routes.
		{
			name: "route names unknown peer and listener",
			yaml: doc(with(edgeDoc, 11, "    - peer: dc2", "      listener: side")...),
			want: []string{
				`x.yaml:11: edge.routes[0].peer: no peer named "dc2" in edge.peers`,
				`x.yaml:12: edge.routes[0].listener: no listener named "side" in edge.listeners`,
			},
		},
		{
			name: "route missing peer and upstream",
			yaml: doc(with(edgeDoc, 11, "    - path_prefix: /a")[:11]...),
			want: []string{
				"x.yaml:11: edge.routes[0].peer: missing required field",
				"x.yaml:11: edge.routes[0].upstream: missing required field",
			},
		},
		{
			name: "route path prefix",
			yaml: doc(append(edgeDoc, "      path_prefix: billing")...),
			want: []string{`x.yaml:13: edge.routes[0].path_prefix: must start with "/", got "billing"`},
		},
		{
			name: "route upstream name",
			yaml: doc(with(edgeDoc, 12, "      upstream: a b")...),
			want: []string{`x.yaml:12: edge.routes[0].upstream: invalid upstream name "a b": use only letters, digits, '.', '_' and '-'`},
		},
		{
			name: "duplicate route",
			yaml: doc(append(edgeDoc, "      host: A.example", "    - peer: dc1", "      upstream: other", "      host: a.example")...),
			want: []string{"x.yaml:14: edge.routes[1]: matches the same requests as edge.routes[0] (same listener, host and path_prefix), so it is never used"},
		},
		{
			name: "route hosts",
			yaml: doc(append(edgeDoc,
				"      host: http://a",                             // 12
				"    - {peer: dc1, upstream: b, host: 'a:b:c'}",    // 13
				"    - {peer: dc1, upstream: b, host: '[::1'}",     // 14
				"    - {peer: dc1, upstream: b, host: 'a:99999'}",  // 15
				"    - {peer: dc1, upstream: b, host: ':80'}",      // 16
				"    - {peer: dc1, upstream: b, host: '[::1]:80'}", // 17: valid
				"    - {peer: dc1, upstream: b, host: '[::1]'}",    // 18: valid
				"    - {peer: dc1, upstream: b, host: 'A.b:8080'}", // 19: valid
			)...),
			want: []string{
				`x.yaml:13: edge.routes[0].host: invalid host "http://a": want a host name, optionally with :port`,
				`x.yaml:14: edge.routes[1].host: invalid host "a:b:c": write IPv6 addresses in brackets, e.g. "[::1]:8080"`,
				`x.yaml:15: edge.routes[2].host: invalid host "[::1": unbalanced brackets`,
				`x.yaml:16: edge.routes[3].host: port "99999" must be a number from 1 to 65535`,
				`x.yaml:17: edge.routes[4].host: invalid host ":80": empty host name`,
			},
		},
		// Origin.
		{
			name: "origin sections",
			yaml: doc("origin:", "  max_connections: 0"),
			want: []string{
				"x.yaml:1: origin.listen: missing required field",
				"x.yaml:1: origin.upstreams: at least one upstream is required",
				"x.yaml:1: origin: no way to authenticate edges: add auth (a shared key: `soapgw keygen`), tls with ca_file (mutual TLS), or insecure: true (plaintext, anyone who reaches  can call every upstream)",
				"x.yaml:2: origin.max_connections: must be at least 1, got 0",
			},
		},
		{
			name: "missing url points at the list item",
			yaml: doc(originDoc[:6]...),
			want: []string{"x.yaml:6: origin.upstreams[0].url: missing required field"},
		},
		{
			name: "duplicate upstream",
			yaml: doc(append(originDoc, "    - name: bill", "      url: http://b")...),
			want: []string{`x.yaml:8: origin.upstreams[1].name: duplicate name "bill" (also used by origin.upstreams[0])`},
		},
		{
			name: "bad urls",
			yaml: doc(append(slices.Clone(originDoc[:5]),
				"    - {name: a, url: 'ftp://a'}",         // 5
				"    - {name: b, url: 'http://b/svc'}",    // 6
				"    - {name: c, url: 'http://u:p@c'}",    // 7
				"    - {name: d, url: 'http://d?x=1'}",    // 8
				"    - {name: e, url: 'http://e#f'}",      // 9
				"    - {name: f, url: 'http://'}",         // 10
				"    - {name: g, url: 'http://g:0'}",      // 11
				"    - {name: h, url: 'bill:8080'}",       // 12
				"    - {name: i, url: 'http://[::1'}",     // 13
				"    - {name: j, url: 'https://j:8443/'}", // 14: valid
				"    - {name: k, url: 'http://k:'}",       // 15
				"    - {name: l, url: 'http:l'}",          // 16
			)...),
			want: []string{
				`x.yaml:6: origin.upstreams[0].url: URL "ftp://a" must start with http:// or https://`,
				`x.yaml:7: origin.upstreams[1].url: URL "http://b/svc" must not have a path: the client's request path is forwarded unchanged`,
				`x.yaml:8: origin.upstreams[2].url: URL "http://u:p@c" must not contain user info`,
				`x.yaml:9: origin.upstreams[3].url: URL "http://d?x=1" must not have a query`,
				`x.yaml:10: origin.upstreams[4].url: URL "http://e#f" must not have a fragment`,
				`x.yaml:11: origin.upstreams[5].url: URL "http://" has no host`,
				`x.yaml:12: origin.upstreams[6].url: port "0" must be a number from 1 to 65535`,
				`x.yaml:13: origin.upstreams[7].url: URL "bill:8080" must start with http:// or https://`,
				`x.yaml:14: origin.upstreams[8].url: invalid URL "http://[::1": missing ']' in host`,
				`x.yaml:16: origin.upstreams[10].url: port "" must be a number from 1 to 65535`,
				`x.yaml:17: origin.upstreams[11].url: URL "http:l" has no host`,
			},
		},
		{
			name: "upstream settings",
			yaml: doc(append(originDoc,
				"      http_version: 2",            // 7
				"      host_header: rewrite",       // 8
				"      connect_timeout: 0s",        // 9
				"      response_timeout: 0s",       // 10: none, valid
				"      idle_timeout: 0s",           // 11
				"      pool_size: -1",              // 12
				"      insecure_skip_verify: true", // 13
			)...),
			want: []string{
				`x.yaml:8: origin.upstreams[0].http_version: unknown http_version "2" (allowed: 1.1, 1.0)`,
				`x.yaml:9: origin.upstreams[0].host_header: unknown host_header "rewrite" (allowed: preserve, upstream)`,
				"x.yaml:10: origin.upstreams[0].connect_timeout: must be greater than 0",
				"x.yaml:12: origin.upstreams[0].idle_timeout: must be greater than 0",
				"x.yaml:13: origin.upstreams[0].pool_size: must not be negative, got -1",
				"x.yaml:14: origin.upstreams[0].insecure_skip_verify: only applies to https URLs",
			},
		},
		{
			name: "chunked with HTTP/1.0",
			yaml: doc(append(originDoc, "      http_version: 1.0", "      chunked: true")...),
			want: []string{`x.yaml:9: origin.upstreams[0].chunked: must be false when http_version is "1.0": HTTP/1.0 has no chunked encoding`},
		},
		{
			name: "origin listen collides with edge listener",
			yaml: doc(append(edgeDoc, "origin:", `  listen: ":8080"`, "  insecure: true", "  upstreams: [{name: bill, url: 'http://b'}]")...),
			want: []string{`x.yaml:14: origin.listen: address ":8080" is already used by edge.listeners[0].listen`},
		},
		{
			name: "errors of both roles sorted by line",
			yaml: doc(append(with(edgeDoc, 8, "      address: dc1"), "origin:", "  listen: bad", "  insecure: true", "  upstreams: [{name: b, url: 'http://b'}]")...),
			want: []string{
				`x.yaml:8: edge.peers[0].address: missing port in address "dc1"`,
				`x.yaml:14: origin.listen: missing port in address "bad"`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("x.yaml", tt.yaml)
			require.Nil(t, c)
			require.Equal(t, tt.want, errorStrings(t, err))
		})
	}
}

func TestParseValidConfigs(t *testing.T) {
	tests := []struct {
		name string
		yaml []byte
	}{
		{"edge", doc(edgeDoc...)},
		{"origin", doc(originDoc...)},
		{"drain timeout zero", doc(append(edgeDoc, "drain_timeout: 0s")...)},
		{"drain timeout bare zero", doc(append(edgeDoc, "drain_timeout: 0")...)},
		{"pool size zero", doc(append(originDoc, "      pool_size: 0")...)},
		{"https insecure", doc(append(slices.Clone(originDoc[:6]), "      url: https://b", "      insecure_skip_verify: true")...)},
		{"ipv6 upstream", doc(append(slices.Clone(originDoc[:6]), "      url: http://[::1]:8080")...)},
		{"http 1.0 explicit chunked false", doc(append(originDoc, "      http_version: '1.0'", "      chunked: false")...)},
		{"routes differing by listener", doc(append(edgeDoc, "      listener: main", "    - {peer: dc1, upstream: x}")...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("x.yaml", tt.yaml)
			require.NoError(t, err)
		})
	}
}

func TestValidateWithoutPositions(t *testing.T) {
	c := Default()
	c.Node = "gw"
	require.EqualError(t, c.Validate(), "no role configured: add an edge section, an origin section, or both")

	c.Origin = &OriginConfig{Listen: ":7070", MaxConnections: 1, Codec: "auto", RTOMin: DefaultRTOMin, Insecure: true,
		HandshakeTimeout: time.Second, MaxHandshakes: 1, MaxHandshakesPerSource: 1, ResumeMaxBytes: 64 << 20, Upstreams: []Upstream{{
			Name: "a", URL: "http://a", HTTPVersion: HTTP10, HostHeader: HostHeaderPreserve,
			ConnectTimeout: time.Second, ResponseTimeout: time.Second, IdleTimeout: time.Second,
		}}}
	require.NoError(t, c.Validate(), "a nil Chunked means the default for the HTTP version")

	c.Origin.Upstreams[0].URL = ""
	c.Limits.MaxConcurrentExchanges = 0
	c.Limits.IdleTimeout = -time.Second
	c.DrainTimeout = -time.Second
	c.Node = ""
	require.Equal(t, []string{
		"node: must not be empty",
		"drain_timeout: must not be negative, got -1s",
		"limits.max_concurrent_exchanges: must be at least 1, got 0",
		"limits.idle_timeout: must not be negative, got -1s",
		"origin.upstreams[0].url: missing required field",
	}, errorStrings(t, c.Validate()))
}

func TestUpstreamMethods(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		u        Upstream
		hostPort string
		urlHost  string
		tls      bool
		chunked  bool
	}{
		{Upstream{URL: "http://a", HTTPVersion: HTTP11}, "a:80", "a", false, false},
		{Upstream{URL: "https://a", HTTPVersion: HTTP11, Chunked: &yes}, "a:443", "a", true, true},
		{Upstream{URL: "https://a:8443/", HTTPVersion: HTTP11, Chunked: &no}, "a:8443", "a:8443", true, false},
		{Upstream{URL: "http://[::1]", HTTPVersion: HTTP10}, "[::1]:80", "[::1]", false, false},
		{Upstream{URL: "http://[::1]:81", HTTPVersion: HTTP10, Chunked: &yes}, "[::1]:81", "[::1]:81", false, true},
		{Upstream{URL: "HTTPS://Svc.Example:444"}, "Svc.Example:444", "Svc.Example:444", true, false},
		{Upstream{URL: "http://[::1"}, "", "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.u.URL, func(t *testing.T) {
			require.Equal(t, tt.hostPort, tt.u.HostPort())
			require.Equal(t, tt.urlHost, tt.u.URLHost())
			require.Equal(t, tt.tls, tt.u.HTTPS())
			require.Equal(t, tt.chunked, tt.u.AcceptsChunked())
		})
	}
}

func TestTLSValidation(t *testing.T) {
	dir := t.TempDir()
	cert := filepath.Join(dir, "c.pem")
	require.NoError(t, os.WriteFile(cert, []byte("x"), 0o600))
	origin := func(tls ...string) []byte {
		return doc(append([]string{
			"node: gw",
			"origin:",
			"  listen: ':7070'",
			"  upstreams: [{name: bill, url: 'http://b'}]",
			"  auth: {key: '" + testKey + "'}",
			"  tls:",
		}, tls...)...)
	}
	_, err := Parse("x.yaml", origin("    cert_file: "+cert, "    key_file: "+cert, "    ca_file: "+cert))
	require.NoError(t, err)

	_, err = Parse("x.yaml", origin("    ca_file: "+cert))
	require.EqualError(t, err, "x.yaml:6: origin.tls.cert_file: required to serve TLS")

	_, err = Parse("x.yaml", origin("    cert_file: "+cert))
	require.EqualError(t, err, "x.yaml:6: origin.tls.key_file: required with cert_file")

	_, err = Parse("x.yaml", origin("    cert_file: "+cert, "    key_file: /nonexistent/k.pem"))
	require.ErrorContains(t, err, `x.yaml:8: origin.tls.key_file: cannot read "/nonexistent/k.pem": no such file or directory`)

	_, err = Parse("x.yaml", origin("    cert_file: "+cert, "    key_file: "+cert, "    server_name: x"))
	require.ErrorContains(t, err, "origin.tls.server_name: only applies where soapgw connects (edge peers, upstreams): it names the server it expects")

	c, err := Parse("x.yaml", doc(
		"node: gw",
		"edge:",
		"  listeners: [{name: main, listen: ':8080'}]",
		"  peers:",
		"    - name: dc1",
		"      address: dc1:7070",
		"      tls: {ca_file: "+cert+", server_name: origin.example}",
		"      auth: {key: '"+testKey+"'}",
		"  routes: [{peer: dc1, upstream: bill}]",
	))
	require.NoError(t, err)
	require.Equal(t, &TLS{CAFile: cert, ServerName: "origin.example"}, c.Edge.Peers[0].TLS)
}

// TestPeerRedundancyModes: unset is auto, true and false (the older boolean form) read as
// on and off, and off is accepted on a TCP peer (nothing to turn off there).
func TestPeerRedundancyModes(t *testing.T) {
	for _, tt := range []struct{ transport, line, want string }{
		{"udp", "", RedundancyAuto},
		{"udp", "auto", RedundancyAuto},
		{"udp", "on", RedundancyOn},
		{"udp", "true", RedundancyOn},
		{"udp", "off", RedundancyOff},
		{"udp", "false", RedundancyOff},
		{"tcp", "off", RedundancyOff},
		{"tcp", "auto", RedundancyAuto},
		{"tcp", "", RedundancyAuto},
	} {
		t.Run(tt.transport+"/"+tt.line, func(t *testing.T) {
			lines := []string{"      address: dc1:70", "      transport: " + tt.transport}
			if tt.line != "" {
				lines = append(lines, "      redundancy: "+tt.line)
			}
			c, err := Parse("x.yaml", doc(with(edgeDoc, 8, lines...)...))
			require.NoError(t, err)
			require.Equal(t, tt.want, c.Edge.Peers[0].RedundancyMode())
		})
	}
}

// TestUpstreamTLSValidation: origin.upstreams[].tls (a private CA, a client certificate,
// the server name) applies to https URLs only, pairs cert_file with key_file, names files
// that cannot be read, and is not combined with insecure_skip_verify, which would ignore it.
func TestUpstreamTLSValidation(t *testing.T) {
	dir := t.TempDir()
	cert := filepath.Join(dir, "c.pem")
	require.NoError(t, os.WriteFile(cert, []byte("x"), 0o600))
	origin := func(url string, lines ...string) []byte {
		return doc(append([]string{
			"node: gw",
			"origin:",
			"  listen: ':7070'",
			"  auth: {key: '" + testKey + "'}",
			"  upstreams:",
			"    - name: bill",
			"      url: " + url,
		}, lines...)...)
	}
	c, err := Parse("x.yaml", origin("https://bill.internal:8443", "      tls: {ca_file: "+cert+", cert_file: "+cert+", key_file: "+cert+", server_name: bill}"))
	require.NoError(t, err)
	require.Equal(t, &TLS{CAFile: cert, CertFile: cert, KeyFile: cert, ServerName: "bill"}, c.Origin.Upstreams[0].TLS)

	for _, tt := range []struct {
		name, url string
		lines     []string
		want      string
	}{
		{"http URL", "http://bill", []string{"      tls: {ca_file: " + cert + "}"}, "x.yaml:8: origin.upstreams[0].tls: only applies to https URLs"},
		{"cert without key", "https://bill", []string{"      tls: {cert_file: " + cert + "}"}, "x.yaml:8: origin.upstreams[0].tls.key_file: required with cert_file"},
		{"missing file", "https://bill", []string{"      tls:", "        ca_file: /nonexistent/ca.pem"}, `x.yaml:9: origin.upstreams[0].tls.ca_file: cannot read "/nonexistent/ca.pem": no such file or directory`},
		{"verifies nothing", "https://bill", []string{"      insecure_skip_verify: true", "      tls: {ca_file: " + cert + "}"}, "x.yaml:8: origin.upstreams[0].insecure_skip_verify: verifies nothing: tls.ca_file and tls.server_name would be ignored"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("x.yaml", origin(tt.url, tt.lines...))
			require.EqualError(t, err, tt.want)
		})
	}
}
