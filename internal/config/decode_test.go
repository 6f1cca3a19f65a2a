package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// doc joins lines into a YAML document, so that a case's line numbers can
// be read off its position in the list.
func doc(lines ...string) []byte {
	return []byte(strings.Join(lines, "\n") + "\n")
}

// errorStrings returns the messages of the *Error values in err, in order,
// and checks that err holds nothing else.
func errorStrings(t *testing.T, err error) []string {
	t.Helper()
	require.Error(t, err)
	var out []string
	for _, e := range flattenStrict(t, err) {
		out = append(out, e.Error())
	}
	return out
}

func flattenStrict(t *testing.T, err error) []*Error {
	t.Helper()
	if multi, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*Error
		for _, inner := range multi.Unwrap() {
			out = append(out, flattenStrict(t, inner)...)
		}
		return out
	}
	e, ok := err.(*Error)
	require.Truef(t, ok, "error %v is a %T, want *Error", err, err)
	return []*Error{e}
}

// edgeDoc is a valid edge configuration; line numbers are in comments.
var edgeDoc = []string{
	"node: gw",              // 1
	"edge:",                 // 2
	"  listeners:",          // 3
	"    - name: main",      // 4
	`      listen: ":8080"`, // 5
	"  peers:",              // 6
	"    - name: dc1",       // 7
	"      address: dc1:70", // 8
	"      insecure: true",  // 9: a peer needs credentials; the credential tests use auth
	"  routes:",             // 10
	"    - peer: dc1",       // 11
	"      upstream: bill",  // 12
}

// with returns base with line n (1-based) replaced by repl, which may hold
// several lines or none.
func with(base []string, n int, repl ...string) []string {
	out := append([]string{}, base[:n-1]...)
	out = append(out, repl...)
	return append(out, base[n:]...)
}

func TestParseDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml []byte
		want []string
	}{
		{
			name: "unknown field with suggestion",
			yaml: doc(with(edgeDoc, 8, "      adress: dc1:70")...),
			want: []string{`x.yaml:8: edge.peers[0].adress: unknown field (did you mean "address"?)`},
		},
		{
			name: "unknown field, case only",
			yaml: doc(with(edgeDoc, 8, "      Address: dc1:70")...),
			want: []string{`x.yaml:8: edge.peers[0].Address: unknown field (did you mean "address"?)`},
		},
		{
			name: "unknown top-level field",
			yaml: doc(with(edgeDoc, 2, "edges:")...),
			want: []string{`x.yaml:2: edges: unknown field (did you mean "edge"?)`},
		},
		{
			name: "unknown field, nothing close",
			yaml: doc(with(edgeDoc, 5, `      listen: ":8080"`, "      certificate: true")...),
			want: []string{`x.yaml:6: edge.listeners[0].certificate: unknown field (known fields: name, listen, tls)`},
		},
		{
			name: "integer expected",
			yaml: doc(with(edgeDoc, 8, "      address: dc1:70", "      connections: two")...),
			want: []string{`x.yaml:9: edge.peers[0].connections: expected an integer, got "two"`},
		},
		{
			name: "integer overflow",
			yaml: doc(with(edgeDoc, 8, "      address: dc1:70", "      connections: 99999999999999999999")...),
			want: []string{`x.yaml:9: edge.peers[0].connections: expected an integer, got "99999999999999999999"`},
		},
		{
			name: "quoted integer is a string",
			yaml: doc(with(edgeDoc, 8, "      address: dc1:70", `      connections: "4"`)...),
			want: []string{`x.yaml:9: edge.peers[0].connections: expected an integer, got "4"`},
		},
		{
			name: "list expected",
			yaml: doc("node: gw", "edge:", "  listeners:", "    name: main", `    listen: ":8080"`),
			want: []string{`x.yaml:4: edge.listeners: expected a list, got a mapping`},
		},
		{
			name: "mapping expected",
			yaml: doc("node: gw", "edge: yes"),
			want: []string{`x.yaml:2: edge: expected a mapping, got "yes"`},
		},
		{
			name: "string expected",
			yaml: doc(with(edgeDoc, 1, "node: [a, b]")...),
			want: []string{`x.yaml:1: node: expected a string, got a list`},
		},
		{
			name: "bool expected",
			yaml: doc(append(edgeDoc, "admin:", "  pprof: maybe")...),
			want: []string{`x.yaml:14: admin.pprof: expected true or false, got "maybe"`},
		},
		{
			name: "duration without unit",
			yaml: doc(append(edgeDoc, "drain_timeout: 5")...),
			want: []string{`x.yaml:13: drain_timeout: duration "5" has no unit: write e.g. "5s" or "5ms"`},
		},
		{
			name: "invalid duration",
			yaml: doc(append(edgeDoc, "drain_timeout: soon")...),
			want: []string{`x.yaml:13: drain_timeout: invalid duration "soon": want e.g. "500ms", "5s" or "1m30s"`},
		},
		{
			name: "negative duration",
			yaml: doc(append(edgeDoc, "limits:", "  idle_timeout: -5s")...),
			want: []string{`x.yaml:14: limits.idle_timeout: must not be negative, got -5s`},
		},
		{
			name: "invalid size",
			yaml: doc(append(edgeDoc, "limits:", "  max_request_bytes: 12XB")...),
			want: []string{`x.yaml:14: limits.max_request_bytes: invalid size "12XB": unknown unit "XB" (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)`},
		},
		{
			name: "negative size",
			yaml: doc(append(edgeDoc, "limits:", "  max_request_bytes: -1")...),
			want: []string{`x.yaml:14: limits.max_request_bytes: must not be negative, got -1`},
		},
		{
			name: "size as a list",
			yaml: doc(append(edgeDoc, "limits:", "  max_request_bytes: [1]")...),
			want: []string{`x.yaml:14: limits.max_request_bytes: expected a size such as "64KiB", got a list`},
		},
		{
			name: "duplicate key",
			yaml: doc(with(edgeDoc, 8, "      address: dc1:70", "      address: dc1:71")...),
			want: []string{`x.yaml:9: edge.peers[0].address: duplicate key (first set on line 8)`},
		},
		{
			name: "duplicate section",
			yaml: doc(append(edgeDoc, "edge:", "  peers: []")...),
			want: []string{`x.yaml:13: edge: duplicate key (first set on line 2)`},
		},
		{
			name: "non-scalar key",
			yaml: doc(append(edgeDoc, "? [a]", ": b")...),
			want: []string{`x.yaml:13: expected a field name, got a list`},
		},
		{
			name: "unset environment variable",
			yaml: doc(with(edgeDoc, 8, "      address: ${SOAPGW_TEST_UNSET}")...),
			want: []string{`x.yaml:8: edge.peers[0].address: environment variable SOAPGW_TEST_UNSET is not set (use ${SOAPGW_TEST_UNSET:-default} to give a default)`},
		},
		{
			name: "bad merge",
			yaml: doc(with(edgeDoc, 8, "      address: dc1:70", "      <<: 5")...),
			want: []string{`x.yaml:9: edge.peers[0]: merge (<<) expects a mapping or a list of mappings, got "5"`},
		},
		{
			name: "several errors sorted by line",
			yaml: doc(append(with(edgeDoc, 8, "      address: dc1:70", "      codek: zstd"), "drain_timeout: 5", "bogus: 1")...),
			want: []string{
				`x.yaml:9: edge.peers[0].codek: unknown field (did you mean "codec"?)`,
				`x.yaml:14: drain_timeout: duration "5" has no unit: write e.g. "5s" or "5ms"`,
				`x.yaml:15: bogus: unknown field (known fields: node, admin, edge, origin, limits, codecs, drain_timeout)`,
			},
		},
		{
			name: "syntax error",
			yaml: doc("node: gw", "edge:", "  listeners: [a", "  peers: []"),
			// yaml.v3 reports parser errors one line before the construct
			// they are about (here the unclosed "[" on line 3); its error is
			// untyped, so the line is passed on as given.
			want: []string{`x.yaml:2: invalid YAML: did not find expected ',' or ']'`},
		},
		{
			name: "scanner error",
			yaml: doc("node: gw", "edge:", "  listeners: a: b"),
			want: []string{`x.yaml:3: invalid YAML: mapping values are not allowed in this context`},
		},
		{
			name: "tab indentation",
			yaml: doc("node: gw", "edge:", "\tpeers: []"),
			want: []string{`x.yaml:3: invalid YAML: found character that cannot start any token`},
		},
		{
			name: "two documents",
			yaml: doc(append(append([]string{}, edgeDoc...), "---", "node: other")...),
			want: []string{`x.yaml:14: more than one YAML document; put the whole configuration in one`},
		},
		{
			name: "empty file",
			yaml: []byte(""),
			want: []string{`x.yaml: configuration is empty`},
		},
		{
			name: "comments only",
			yaml: doc("# nothing", "# here"),
			want: []string{`x.yaml: configuration is empty`},
		},
		{
			name: "explicit empty document",
			yaml: doc("---", "# nothing"),
			want: []string{`x.yaml: configuration is empty`},
		},
		{
			name: "root is a list",
			yaml: doc("- node: gw"),
			want: []string{`x.yaml:1: expected a mapping, got a list`},
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

func TestParseReportsOnlyDecodeErrorsWhenDecodingFails(t *testing.T) {
	// The typo leaves address empty; "missing required field" would only
	// echo the unknown-field error.
	_, err := Parse("x.yaml", doc(with(edgeDoc, 8, "      adress: dc1:70")...))
	require.Len(t, errorStrings(t, err), 1)
}

func TestParseEnvExpansion(t *testing.T) {
	t.Setenv("SOAPGW_TEST_CONNS", "8")
	t.Setenv("SOAPGW_TEST_ADDR", "dc1.example:7070")
	t.Setenv("SOAPGW_TEST_EMPTY", "")
	t.Setenv("SOAPGW_TEST_TRICKY", "x\nedge: {}")

	c, err := Parse("x.yaml", doc(
		"node: ${SOAPGW_TEST_UNSET:-from-default}",
		"edge:",
		"  listeners:",
		"    - name: main",
		`      listen: "${SOAPGW_TEST_UNSET:-127.0.0.1}:8080"`,
		"  peers:",
		"    - name: dc1",
		"      address: ${SOAPGW_TEST_ADDR}",
		"      connections: ${SOAPGW_TEST_CONNS}",
		"      dial_timeout: ${SOAPGW_TEST_UNSET:-2s}",
		"      insecure: true",
		"  routes:",
		"    - peer: dc1",
		"      upstream: bill",
		"limits:",
		"  max_concurrent_exchanges: ${SOAPGW_TEST_EMPTY}",
		"  max_request_bytes: ${SOAPGW_TEST_UNSET:-1MiB}",
	))
	require.NoError(t, err)
	require.Equal(t, "from-default", c.Node)
	require.Equal(t, "127.0.0.1:8080", c.Edge.Listeners[0].Listen)
	require.Equal(t, "dc1.example:7070", c.Edge.Peers[0].Address)
	require.Equal(t, 8, c.Edge.Peers[0].Connections)
	require.Equal(t, 2*time.Second, c.Edge.Peers[0].DialTimeout)
	require.Equal(t, 1*MiB, c.Limits.MaxRequestBytes)
	// An empty value in a non-string field keeps the default.
	require.Equal(t, 4096, c.Limits.MaxConcurrentExchanges)

	// "$$" is an escaped dollar, which the name check then rejects; the
	// error is on the line of the value.
	_, err = Parse("x.yaml", doc(with(edgeDoc, 12, "      upstream: a$$b")...))
	require.Equal(t, []string{`x.yaml:12: edge.routes[0].upstream: invalid upstream name "a$b": use only letters, digits, '.', '_' and '-'`}, errorStrings(t, err))

	// A value cannot inject YAML structure: it stays one string.
	_, err = Parse("x.yaml", doc(with(edgeDoc, 1, "node: ${SOAPGW_TEST_TRICKY}")...))
	require.Equal(t, []string{`x.yaml:1: node: "x\nedge: {}" contains spaces or non-printable characters`}, errorStrings(t, err))

	// A quoted reference stays a string even when the value is a number.
	_, err = Parse("x.yaml", doc(with(edgeDoc, 8, "      address: dc1:70", `      connections: "${SOAPGW_TEST_CONNS}"`)...))
	require.Equal(t, []string{`x.yaml:9: edge.peers[0].connections: expected an integer, got "8"`}, errorStrings(t, err))
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse("x.yaml", doc(
		"edge:",
		"  listeners: [{name: main, listen: ':8080'}]",
		"  peers: [{name: dc1, address: 'dc1:7070', auth: {key_file: "+testKeyFile+"}}]",
		"  routes: [{peer: dc1, upstream: bill}]",
		"origin:",
		"  listen: ':7070'",
		"  auth: {key: '"+testKey+"'}",
		"  upstreams:",
		"    - {name: new, url: 'http://new'}",
		"    - {name: old, url: 'http://old', http_version: 1.0}",
	))
	require.NoError(t, err)

	host, err := os.Hostname()
	require.NoError(t, err)
	no := false
	want := &Config{
		Node: host,
		Edge: &EdgeConfig{
			Listeners: []Listener{{Name: "main", Listen: ":8080"}},
			Peers: []Peer{{
				Name: "dc1", Address: "dc1:7070", Transport: "tcp", Connections: 2, Codec: "auto",
				DialTimeout: 5 * time.Second, KeepaliveInterval: 15 * time.Second, KeepaliveTimeout: 10 * time.Second, RTOMin: 20 * time.Millisecond,
				Auth: &Auth{KeyFile: testKeyFile},
			}},
			Routes: []Route{{PathPrefix: "/", Peer: "dc1", Upstream: "bill"}},
		},
		Origin: &OriginConfig{
			Listen: ":7070",
			Upstreams: []Upstream{
				{
					Name: "new", URL: "http://new", HTTPVersion: "1.1", Chunked: &no, HostHeader: "preserve",
					ConnectTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second, PoolSize: 64,
				},
				{
					Name: "old", URL: "http://old", HTTPVersion: "1.0", Chunked: &no, HostHeader: "preserve",
					ConnectTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second, PoolSize: 64,
				},
			},
			MaxConnections:         256,
			Codec:                  "auto",
			RTOMin:                 20 * time.Millisecond,
			Auth:                   &Auth{Key: testKey},
			HandshakeTimeout:       5 * time.Second,
			MaxHandshakes:          256,
			MaxHandshakesPerSource: 16,
			ResumeWindow:           30 * time.Second,
			ResumeMaxBytes:         64 << 20,
		},
		Limits: Limits{
			MaxRequestBytes: 32 << 20, MaxResponseBytes: 64 << 20, MaxHeaderBytes: 64 << 10,
			ExchangeTimeout: 10 * time.Minute, ExchangeMaxDuration: 24 * time.Hour, MaxConcurrentExchanges: 4096, IdleTimeout: 90 * time.Second,
			MaxClientConnections: 10000, FaultStatus: "soap",
		},
		Codecs: CodecConfig{
			GzipLevel: 6, ZstdLevel: 3, ZstdDictionary: "builtin", TokenDictionary: 1 << 20,
			MaxCodedMessage: 1 << 20, Retention: 8 << 20,
		},
		DrainTimeout: 15 * time.Second,
	}
	require.Equal(t, want, c)

	d := Default()
	require.Equal(t, want.Limits, d.Limits)
	require.Equal(t, want.DrainTimeout, d.DrainTimeout)
	require.Equal(t, host, d.Node)
	require.Nil(t, d.Edge)
	require.Nil(t, d.Origin)
}

func TestParseExplicitValuesOverrideDefaults(t *testing.T) {
	c, err := Parse("x.yaml", doc(append(edgeDoc,
		"node:", // null keeps the default
		"drain_timeout: 0s",
		"admin: {listen: '127.0.0.1:9100', pprof: true}",
		"limits: {max_header_bytes: 1048576, exchange_timeout: 1m30s, fault_status: http}",
	)[1:]...))
	require.NoError(t, err)
	require.Equal(t, Default().Node, c.Node)
	require.Equal(t, time.Duration(0), c.DrainTimeout)
	require.Equal(t, AdminConfig{Listen: "127.0.0.1:9100", Pprof: true}, c.Admin)
	require.Equal(t, MiB, c.Limits.MaxHeaderBytes)
	require.Equal(t, 90*time.Second, c.Limits.ExchangeTimeout)
	require.Equal(t, 32*MiB, c.Limits.MaxRequestBytes)
	require.Equal(t, FaultStatusHTTP, c.Limits.FaultStatus)
}

func TestParseAnchorsAndMergeKeys(t *testing.T) {
	c, err := Parse("x.yaml", doc(
		"node: gw",
		"edge:",
		"  listeners: [{name: main, listen: ':8080'}]",
		"  peers:",
		"    - &dc",
		"      name: dc1",
		"      address: dc1:7070",
		"      insecure: true",
		"      dial_timeout: 7s",
		"      connections: 4",
		"    - <<: *dc",
		"      name: dc2",
		"      connections: 8",
		"  routes: [{peer: dc2, upstream: bill}]",
	))
	require.NoError(t, err)
	p := c.Edge.Peers[1]
	require.Equal(t, "dc2", p.Name)
	require.Equal(t, "dc1:7070", p.Address)
	require.Equal(t, 7*time.Second, p.DialTimeout)
	require.Equal(t, 8, p.Connections)
}

func TestParseMergeList(t *testing.T) {
	c, err := Parse("x.yaml", doc(
		"node: gw",
		"edge:",
		"  listeners: [{name: main, listen: ':8080'}]",
		"  peers:",
		"    - &a {name: dc1, address: 'dc1:70', dial_timeout: 7s, insecure: true}",
		"    - &b {name: dc2, address: 'dc2:70', dial_timeout: 3s, connections: 3, insecure: true}",
		"    - <<: [*a, *b]",
		"      name: dc3",
		"  routes: [{peer: dc1, upstream: bill}]",
	))
	require.NoError(t, err)
	// The earlier mapping in the list wins, and explicit keys win over both.
	p := c.Edge.Peers[2]
	require.Equal(t, "dc3", p.Name)
	require.Equal(t, "dc1:70", p.Address)
	require.Equal(t, 7*time.Second, p.DialTimeout)
	require.Equal(t, 3, p.Connections)

	// A problem in a mapping merged twice is reported once.
	_, err = Parse("x.yaml", doc(
		"node: gw",
		"edge:",
		"  listeners: [{name: main, listen: ':8080'}]",
		"  peers:",
		"    - &a {name: dc1, address: 'dc1:70', codec: zstd, codec: gzip}",
		"    - <<: [*a, *a, 3]",
		"      name: dc2",
		"  routes: [{peer: dc1, upstream: bill}]",
	))
	require.Equal(t, []string{
		"x.yaml:5: edge.peers[0].codec: duplicate key (first set on line 5)",
		"x.yaml:5: edge.peers[1].codec: duplicate key (first set on line 5)",
		`x.yaml:6: edge.peers[1]: merge (<<) expects a mapping or a list of mappings, got "3"`,
	}, errorStrings(t, err))
}

func TestParseMergeExpansionIsBounded(t *testing.T) {
	// Each level merges the previous one ten times: 10^8 expansions
	// unbounded.
	lines := []string{"node: gw", "edge:", "  listeners:", "    - &m0 {name: a}"}
	for i := 1; i <= 8; i++ {
		refs := strings.Repeat(fmt.Sprintf("*m%d, ", i-1), 10)
		lines = append(lines, fmt.Sprintf("    - &m%d {<<: [%s]}", i, strings.TrimSuffix(refs, ", ")))
	}
	_, err := Parse("x.yaml", doc(lines...))
	msgs := errorStrings(t, err)
	require.Len(t, msgs, 1)
	require.Regexp(t, `^x.yaml:\d+: edge.listeners\[\d+\]: more than 10000 merges`, msgs[0])
}

func TestParseNullSectionIsPresent(t *testing.T) {
	// "edge:" with nothing under it enables the role, so its missing
	// fields are reported instead of the role being silently dropped.
	_, err := Parse("x.yaml", doc("node: gw", "edge:"))
	require.Equal(t, []string{
		"x.yaml:2: edge.listeners: at least one listener is required",
		"x.yaml:2: edge.peers: at least one peer is required",
		"x.yaml:2: edge.routes: at least one route is required",
	}, errorStrings(t, err))
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "soapgw.yaml")
	require.NoError(t, os.WriteFile(path, doc(with(edgeDoc, 8, "      address: dc1")...), 0o600))
	_, err := Load(path)
	require.Equal(t, []string{path + `:8: edge.peers[0].address: missing port in address "dc1"`}, errorStrings(t, err))

	var cerr *Error
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, Error{File: path, Line: 8, Path: "edge.peers[0].address", Msg: `missing port in address "dc1"`}, *cerr)

	_, err = Load(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.False(t, errors.As(err, &cerr))
}

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		err  Error
		want string
	}{
		{Error{File: "a.yaml", Line: 3, Path: "edge", Msg: "bad"}, "a.yaml:3: edge: bad"},
		{Error{File: "a.yaml", Line: 3, Msg: "bad"}, "a.yaml:3: bad"},
		{Error{File: "a.yaml", Path: "edge", Msg: "bad"}, "a.yaml: edge: bad"},
		{Error{Path: "edge", Msg: "bad"}, "edge: bad"},
		{Error{Msg: "bad"}, "bad"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			require.Equal(t, tt.want, tt.err.Error())
		})
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"abc", "", 3},
		{"", "abc", 3},
		{"adress", "address", 1},
		{"kitten", "sitting", 3},
		{"codec", "codec", 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, editDistance(tt.a, tt.b), "%q %q", tt.a, tt.b)
	}
}

// testKey is a valid tunnel key (the committed test key); testKeyFile holds it.
const (
	testKey     = "nKixSKzhh4RsndIJql94OdeHY7xbBsz6ke/Wy85ks/M="
	testKeyFile = "../../testdata/example-tunnel.key"
)
