package deploy

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/config"
)

// TestKubernetesTunnelIsAuthenticated: both gateway configurations read the shared key
// from where their pods mount the Secret soapgw-tls, and nothing runs insecure.
func TestKubernetesTunnelIsAuthenticated(t *testing.T) {
	objs, _, _ := loadBase(t, "kubernetes")
	for _, cm := range []string{"soapgw-edge", "soapgw-origin"} {
		data := objs.configMaps[cm].Data["soapgw.yaml"]
		require.Contains(t, data, "${SOAPGW_KEY_FILE:-/etc/soapgw/tls/tunnel.key}", "ConfigMap %s reads the mounted key", cm)
		cfg := parseConfig(t, cm, data)
		if cfg.Origin != nil {
			require.False(t, cfg.Origin.Insecure)
			require.NotNil(t, cfg.Origin.Auth)
		}
		if cfg.Edge != nil {
			for _, p := range cfg.Edge.Peers {
				require.False(t, p.Insecure)
				require.NotNil(t, p.Auth, "peer %s", p.Name)
			}
		}
	}
	gateways := 0
	for name, d := range objs.deployments {
		cs, _ := allContainers(&d.Spec.Template.Spec)
		for _, c := range cs {
			if len(c.Args) == 0 || c.Args[0] != "run" {
				continue // not a gateway
			}
			gateways++
			var mountedAt string
			for _, m := range c.VolumeMounts {
				for _, v := range d.Spec.Template.Spec.Volumes {
					if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "soapgw-tls" {
						mountedAt = m.MountPath
						require.True(t, m.ReadOnly, "%s/%s: the key is mounted read-only", name, c.Name)
					}
				}
			}
			require.Equal(t, "/etc/soapgw/tls", path.Clean(mountedAt), "%s/%s mounts the Secret soapgw-tls where the config reads tunnel.key", name, c.Name)
		}
	}
	require.Equal(t, 2, gateways, "an edge and an origin gateway")
	require.Empty(t, objs.secrets["soapgw-tls"].Data, "no key is ever committed in a manifest")
}

// TestNoDeployedConfigIsInsecure: every soapgw configuration under deploy/ authenticates
// its tunnel; insecure: true appears only in comments.
func TestNoDeployedConfigIsInsecure(t *testing.T) {
	require.NoError(t, filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(p) != ".yaml" && filepath.Ext(p) != ".yml") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil || !isSoapgwConfig(data) {
			return err
		}
		cfg, err := config.Load(p)
		require.NoError(t, err, p)
		if cfg.Origin != nil {
			require.False(t, cfg.Origin.Insecure, "%s: origin", p)
		}
		if cfg.Edge != nil {
			for _, peer := range cfg.Edge.Peers {
				require.False(t, peer.Insecure, "%s: peer %s", p, peer.Name)
			}
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "insecure: true") {
				require.True(t, strings.HasPrefix(strings.TrimSpace(line), "#"), "%s: %q", p, line)
			}
		}
		return nil
	}))
}
