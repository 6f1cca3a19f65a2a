package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/soapgw/soapgw/internal/config"
)

// testKeyFile is the committed test key (public: never deployed). env_test.go points
// ${SOAPGW_KEY_FILE} at it, so the configurations under deploy/ load in tests; what a
// deployment reads is the variable's default (deployedCredentialFiles).
const testKeyFile = "../testdata/example-tunnel.key"

// requireAuthenticated: the tunnel of cfg is authenticated as a deployment's must be.
// An origin authenticates edges with a shared key (auth) or client certificates
// (tls.ca_file); every edge peer proves itself with a shared key or a client certificate;
// nothing says insecure: true.
func requireAuthenticated(t *testing.T, where string, cfg *config.Config) {
	t.Helper()
	if o := cfg.Origin; o != nil {
		require.False(t, o.Insecure, "%s: origin.insecure: true", where)
		require.True(t, o.Auth != nil || (o.TLS != nil && o.TLS.CAFile != ""),
			"%s: the origin authenticates edges with neither auth nor tls.ca_file", where)
	}
	if cfg.Edge != nil {
		for _, p := range cfg.Edge.Peers {
			require.False(t, p.Insecure, "%s: peer %s: insecure: true", where, p.Name)
			require.True(t, p.Auth != nil || (p.TLS != nil && p.TLS.CertFile != ""),
				"%s: peer %s proves itself with neither auth nor a client certificate", where, p.Name)
		}
	}
	require.True(t, cfg.Origin != nil || cfg.Edge != nil, "%s: neither role", where)
}

// credentialFields are the paths, in a soapgw configuration, of the files holding
// tunnel credentials; "*" is every element of a list.
var credentialFields = [][]string{
	{"origin", "auth", "key_file"},
	{"origin", "tls", "cert_file"}, {"origin", "tls", "key_file"}, {"origin", "tls", "ca_file"},
	{"edge", "peers", "*", "auth", "key_file"},
	{"edge", "peers", "*", "tls", "cert_file"}, {"edge", "peers", "*", "tls", "key_file"}, {"edge", "peers", "*", "tls", "ca_file"},
}

// envRef is ${VAR} or ${VAR:-default} in a soapgw configuration value.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// deployedCredentialFiles returns the credential files a soapgw configuration reads
// where it is deployed: the values of credentialFields with every ${VAR:-default}
// replaced by its default, since a deployment sets none of these variables (the tests
// do, to read testKeyFile). A reference without a default fails: the deployment would
// not start.
func deployedCredentialFiles(t *testing.T, where, raw string) []string {
	t.Helper()
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal([]byte(raw), &doc), where)
	require.NotEmpty(t, doc.Content, where)
	var files []string
	var walk func(n *yaml.Node, field []string)
	walk = func(n *yaml.Node, field []string) {
		if len(field) == 0 {
			require.Equal(t, yaml.ScalarNode, n.Kind, "%s: line %d", where, n.Line)
			v := envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
				m := envRef.FindStringSubmatch(ref)
				require.NotEmpty(t, m[2], "%s: line %d: %s has no default: the deployment sets no variable", where, n.Line, ref)
				return m[3]
			})
			files = append(files, v)
			return
		}
		switch {
		case field[0] == "*" && n.Kind == yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, field[1:])
			}
		case n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == field[0] {
					walk(n.Content[i+1], field[1:])
				}
			}
		}
	}
	for _, f := range credentialFields {
		walk(doc.Content[0], f)
	}
	return files
}

// TestDeployedConfigsAreAuthenticated: every soapgw configuration under deploy/
// authenticates its tunnel (insecure: true appears only in comments), and reads its key
// file through ${SOAPGW_KEY_FILE:-...}, so that the tests give it the test key while a
// deployment reads its own.
func TestDeployedConfigsAreAuthenticated(t *testing.T) {
	n := 0
	require.NoError(t, filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(p) != ".yaml" && filepath.Ext(p) != ".yml") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil || !isSoapgwConfig(data) {
			return err
		}
		n++
		cfg, err := config.Load(p)
		require.NoError(t, err, p)
		requireAuthenticated(t, p, cfg)
		var keyFiles []string
		if cfg.Origin != nil && cfg.Origin.Auth != nil {
			keyFiles = append(keyFiles, cfg.Origin.Auth.KeyFile)
		}
		if cfg.Edge != nil {
			for _, peer := range cfg.Edge.Peers {
				if peer.Auth != nil {
					keyFiles = append(keyFiles, peer.Auth.KeyFile)
				}
			}
		}
		for _, kf := range keyFiles {
			if kf != "" {
				require.Equal(t, testKeyFile, kf, "%s: key_file must be ${SOAPGW_KEY_FILE:-<where the deployment mounts it>}", p)
			}
		}
		for i, line := range strings.Split(string(data), "\n") {
			if regexp.MustCompile(`insecure:\s*true`).MatchString(line) {
				require.True(t, strings.HasPrefix(strings.TrimSpace(line), "#"), "%s:%d: %q", p, i+1, line)
			}
		}
		return nil
	}))
	require.NotZero(t, n)
}

// TestDeployedCredentialFiles checks deployedCredentialFiles itself, on an origin and
// an edge, so that the compose and Kubernetes checks built on it mean something.
func TestDeployedCredentialFiles(t *testing.T) {
	raw := `
origin:
  auth: {key_file: "${SOAPGW_KEY_FILE:-/run/k/tunnel.key}"}
  tls: {cert_file: /tls/o.pem, key_file: /tls/o-key.pem, ca_file: "${CA:-/tls/ca.pem}"}
edge:
  peers:
    - name: a
      auth: {key_file: /k/a.key}
    - name: b
      auth: {key: "${SOAPGW_TUNNEL_KEY}"}
      tls: {ca_file: /tls/ca.pem}
`
	require.ElementsMatch(t, []string{"/run/k/tunnel.key", "/tls/o.pem", "/tls/o-key.pem", "/tls/ca.pem", "/k/a.key", "/tls/ca.pem"},
		deployedCredentialFiles(t, "test", raw))
}
