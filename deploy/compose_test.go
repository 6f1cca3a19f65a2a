package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/soapgw/soapgw/internal/config"
)

// composeFile is the part of the Compose specification deploy/docker-compose.yml uses;
// decoding is strict, so a misspelt key fails instead of being ignored.
type composeFile struct {
	Name     string                     `yaml:"name"`
	XSoapgw  yaml.Node                  `yaml:"x-soapgw"`
	Services map[string]*composeService `yaml:"services"`
	Volumes  map[string]struct{}        `yaml:"volumes"` // named volumes, default options only
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string            `yaml:"context"`
		Dockerfile string            `yaml:"dockerfile"`
		Args       map[string]string `yaml:"args"`
	} `yaml:"build"`
	Command         []string          `yaml:"command"`
	Environment     map[string]string `yaml:"environment"`
	Volumes         []string          `yaml:"volumes"`
	Ports           []string          `yaml:"ports"`
	Expose          []string          `yaml:"expose"`
	DependsOn       composeDeps       `yaml:"depends_on"`
	Restart         string            `yaml:"restart"`
	ReadOnly        bool              `yaml:"read_only"`
	CapDrop         []string          `yaml:"cap_drop"`
	SecurityOpt     []string          `yaml:"security_opt"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
}

// composeDeps is depends_on in either of its forms, a list of services or a map of
// service to {condition: ...}: each dependency with its condition (service_started for
// the list form).
type composeDeps map[string]string

func (d *composeDeps) UnmarshalYAML(n *yaml.Node) error {
	conds := composeDeps{}
	switch n.Kind {
	case yaml.SequenceNode:
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, s := range names {
			conds[s] = "service_started"
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := decodeNodeStrict(n, &m); err != nil {
			return err
		}
		for s, c := range m {
			if c.Condition != "service_started" && c.Condition != "service_healthy" && c.Condition != "service_completed_successfully" {
				return fmt.Errorf("line %d: depends_on %s: unknown condition %q", n.Line, s, c.Condition)
			}
			conds[s] = c.Condition
		}
	default:
		return fmt.Errorf("line %d: depends_on: want a list or a map", n.Line)
	}
	*d = conds
	return nil
}

// decodeNodeStrict decodes a YAML node as decodeYAMLStrict decodes a document (yaml.v3's
// Node.Decode does not check field names).
func decodeNodeStrict(n *yaml.Node, v any) error {
	data, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	return decodeYAMLStrict(data, v)
}

func decodeYAMLStrict(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	return dec.Decode(v)
}

func decodeYAMLFile(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, decodeYAMLStrict(data, v), file)
}

// composeMount is one bind mount: a file or directory of the repository in a container.
type composeMount struct {
	src, dst string // src relative to deploy/
}

// namedMount is a named volume mounted in a container.
type namedMount struct {
	volume, dst string
	readOnly    bool
}

// namedMounts returns the service's named-volume mounts (VOLUME:/dst[:ro]).
func (s *composeService) namedMounts(t *testing.T, name string, volumes map[string]struct{}) []namedMount {
	t.Helper()
	var ms []namedMount
	for _, v := range s.Volumes {
		if strings.HasPrefix(v, "./") {
			continue
		}
		f := strings.Split(v, ":")
		require.Contains(t, []int{2, 3}, len(f), "service %s: volume %q: want NAME:/dst[:ro]", name, v)
		require.Contains(t, volumes, f[0], "service %s: volume %q: no top-level volume %s", name, v, f[0])
		require.True(t, path.IsAbs(f[1]), "service %s: volume %q", name, v)
		ms = append(ms, namedMount{volume: f[0], dst: f[1], readOnly: len(f) == 3 && f[2] == "ro"})
	}
	return ms
}

func (s *composeService) mounts(t *testing.T, name string) []composeMount {
	t.Helper()
	var ms []composeMount
	for _, v := range s.Volumes {
		if !strings.HasPrefix(v, "./") {
			continue // a named volume: namedMounts
		}
		f := strings.Split(v, ":")
		require.Len(t, f, 3, "service %s: volume %q: want ./src:/dst:ro", name, v)
		require.Equal(t, "ro", f[2], "service %s: volume %q must be read-only", name, v)
		require.True(t, strings.HasPrefix(f[0], "./"), "service %s: volume %q: a path relative to deploy/", name, v)
		require.True(t, path.IsAbs(f[1]), "service %s: volume %q", name, v)
		mustExist(t, filepath.FromSlash(f[0]), fmt.Sprintf("service %s: volume source", name))
		ms = append(ms, composeMount{src: path.Clean(f[0]), dst: f[1]})
	}
	return ms
}

// hostFile maps a container path of a service to the repository file mounted there.
func hostFile(ms []composeMount, dst string) (string, bool) {
	for _, m := range ms {
		if m.dst == dst {
			return m.src, true
		}
		if rel, ok := strings.CutPrefix(dst, m.dst+"/"); ok {
			return path.Join(m.src, rel), true
		}
	}
	return "", false
}

// containerPorts returns the container side of the published ports and the exposed
// ports of a service.
func (s *composeService) containerPorts(t *testing.T, name string, hostPorts map[string]string) map[int]bool {
	t.Helper()
	ps := map[int]bool{}
	for _, p := range s.Ports {
		f := strings.Split(p, ":")
		require.Len(t, f, 3, "service %s: port %q: want 127.0.0.1:HOST:CONTAINER", name, p)
		require.Equal(t, "127.0.0.1", f[0], "service %s: port %q: publish on loopback only", name, p)
		if prev, dup := hostPorts[f[1]]; dup {
			t.Fatalf("service %s: host port %s already published by %s", name, f[1], prev)
		}
		hostPorts[f[1]] = name
		n, err := strconv.Atoi(f[2])
		require.NoError(t, err, "service %s: port %q", name, p)
		ps[n] = true
	}
	for _, p := range s.Expose {
		if _, udp := strings.CutSuffix(p, "/udp"); udp {
			continue // the UDP tunnel beside the TCP one; ports here are TCP listeners
		}
		n, err := strconv.Atoi(p)
		require.NoError(t, err, "service %s: expose %q", name, p)
		ps[n] = true
	}
	return ps
}

// promConfig is the part of Prometheus' configuration compose/prometheus.yml uses.
type promConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string          `yaml:"targets"`
			Labels  map[string]string `yaml:"labels"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

type grafanaDatasources struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Name      string         `yaml:"name"`
		UID       string         `yaml:"uid"`
		Type      string         `yaml:"type"`
		Access    string         `yaml:"access"`
		URL       string         `yaml:"url"`
		IsDefault bool           `yaml:"isDefault"`
		Editable  bool           `yaml:"editable"`
		JSONData  map[string]any `yaml:"jsonData"`
	} `yaml:"datasources"`
}

type grafanaDashboards struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		Name                  string `yaml:"name"`
		Folder                string `yaml:"folder"`
		Type                  string `yaml:"type"`
		DisableDeletion       bool   `yaml:"disableDeletion"`
		AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
		UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
		Options               struct {
			Path                      string `yaml:"path"`
			FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// TestDockerCompose checks deploy/docker-compose.yml statically: the files it mounts
// and builds from exist, every soapgw configuration it uses is valid, the addresses the
// services use to reach each other (peer, upstream, client URL, scrape targets,
// datasource) name existing services on ports they listen on, those ports are published
// or exposed, and dependencies exist and have no cycle. When a Compose implementation
// is installed, `docker compose config` checks the file too.
func TestDockerCompose(t *testing.T) {
	var cf composeFile
	decodeYAMLFile(t, "docker-compose.yml", &cf)
	require.Equal(t, "soapgw-demo", cf.Name)
	require.ElementsMatch(t, []string{"keygen", "soap-server", "origin", "edge", "load", "prometheus", "grafana"}, keys(cf.Services))

	hostPorts := map[string]string{}
	mounts := map[string][]composeMount{}
	listens := map[string]map[int]bool{} // service -> ports its process listens on
	cfgs := map[string]*config.Config{}
	cfgFiles := map[string]string{} // gateway service -> its configuration file, relative to deploy/
	used := map[string]bool{}       // files under compose/ that something uses
	for name, s := range cf.Services {
		require.NotEmpty(t, s.Image, "service %s: image", name)
		for dep := range s.DependsOn {
			require.Contains(t, cf.Services, dep, "service %s depends on an unknown service", name)
		}
		mounts[name] = s.mounts(t, name)
		for _, m := range mounts[name] {
			used[m.src] = true
		}
		published := s.containerPorts(t, name, hostPorts)
		listens[name] = map[int]bool{}

		if s.Build == nil {
			require.NotEqual(t, "soapgw:dev", s.Image, "service %s", name)
			continue
		}
		// A soapgw service: the image of deploy/Dockerfile, hardened.
		require.Equal(t, "soapgw:dev", s.Image, "service %s", name)
		require.Equal(t, "..", s.Build.Context, "service %s: build context is the repository root", name)
		require.Equal(t, "deploy/Dockerfile", s.Build.Dockerfile, "service %s", name)
		mustExist(t, filepath.Join(s.Build.Context, s.Build.Dockerfile), "service "+name+": Dockerfile")
		require.True(t, s.ReadOnly, "service %s: read_only", name)
		require.Equal(t, []string{"ALL"}, s.CapDrop, "service %s: cap_drop", name)
		require.Contains(t, s.SecurityOpt, "no-new-privileges:true", "service %s", name)
		require.NotEmpty(t, s.Command, "service %s: command", name)

		switch s.Command[0] {
		case "run":
			p, ok := flagValue(s.Command, "config")
			require.True(t, ok, "service %s: run --config", name)
			src, ok := hostFile(mounts[name], p)
			require.True(t, ok, "service %s: --config %s is not mounted", name, p)
			cfg := loadConfig(t, filepath.FromSlash(src))
			cfgs[name] = cfg
			cfgFiles[name] = src
			grace, err := time.ParseDuration(s.StopGracePeriod)
			require.NoError(t, err, "service %s: stop_grace_period", name)
			require.Greater(t, grace, cfg.DrainTimeout, "service %s: stop_grace_period must exceed drain_timeout", name)
			for what, p := range listenPorts(t, cfg) {
				listens[name][p] = true
				require.True(t, published[p], "service %s: %s port %d of %s is neither published nor exposed", name, what, p, src)
			}
			if cfg.Origin != nil && cfg.Origin.UDPAddress() != "" {
				// The UDP tunnel listener (origin.udp_listen, by default the tunnel's own
				// address) must be reachable over UDP too.
				udp := fmt.Sprintf("%d/udp", port(t, cfg.Origin.UDPAddress()))
				require.Contains(t, s.Expose, udp, "service %s: expose the UDP tunnel port of %s", name, src)
			}
		case "example-server":
			l, ok := flagValue(s.Command, "listen")
			require.True(t, ok, "service %s: --listen", name)
			listens[name][port(t, l)] = true
		case "example-load":
			// Checked below, against the edge.
		case "keygen":
			// Checked below, against the gateways' key files.
		default:
			t.Fatalf("service %s: unexpected soapgw command %q", name, s.Command[0])
		}
		for p := range published {
			require.True(t, listens[name][p], "service %s publishes or exposes port %d, on which nothing listens", name, p)
		}
	}
	requireAcyclic(t, cf.Services)
	checkComposeKey(t, &cf, cfgs, cfgFiles)

	// reaches checks that host:port names a service listening on that port.
	reaches := func(from, what, host string, p int) {
		t.Helper()
		_, ok := cf.Services[host]
		require.True(t, ok, "service %s: %s: no service %q", from, what, host)
		require.True(t, listens[host][p], "service %s: %s: service %s does not listen on %d", from, what, host, p)
		require.True(t, dependsOn(cf.Services, from, host), "service %s: %s: should depend on %s", from, what, host)
	}
	for name, cfg := range cfgs {
		if cfg.Edge != nil {
			for _, p := range cfg.Edge.Peers {
				h, ps, err := net.SplitHostPort(p.Address)
				require.NoError(t, err)
				pn, _ := strconv.Atoi(ps)
				reaches(name, "peer "+p.Name, h, pn)
				require.NotNil(t, cfgs[h].Origin, "service %s: peer %s is not an origin", name, p.Name)
			}
		}
		if cfg.Origin != nil {
			for _, u := range cfg.Origin.Upstreams {
				h, ps, err := net.SplitHostPort(u.HostPort())
				require.NoError(t, err)
				pn, _ := strconv.Atoi(ps)
				reaches(name, "upstream "+u.Name, h, pn)
			}
		}
	}
	// The client calls the edge on one of its listeners, on a path the edge routes.
	load := cf.Services["load"]
	lu, ok := flagValue(load.Command, "url")
	require.True(t, ok, "service load: --url")
	u, err := url.Parse(lu)
	require.NoError(t, err)
	pn, _ := strconv.Atoi(u.Port())
	reaches("load", "--url", u.Hostname(), pn)
	require.NotNil(t, cfgs[u.Hostname()].Edge, "service load: --url %s is not an edge", lu)

	// Prometheus scrapes every soapgw gateway's admin listener and loads the alerts.
	prom := cf.Services["prometheus"]
	var cfgFlag string
	for _, a := range prom.Command {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			cfgFlag = v
		}
	}
	promFile, ok := hostFile(mounts["prometheus"], cfgFlag)
	require.True(t, ok, "prometheus --config.file %q is not mounted", cfgFlag)
	var pc promConfig
	decodeYAMLFile(t, filepath.FromSlash(promFile), &pc)
	for _, rf := range pc.RuleFiles {
		src, ok := hostFile(mounts["prometheus"], rf)
		require.True(t, ok, "prometheus rule_files %s is not mounted", rf)
		var rules struct {
			Groups []map[string]any `yaml:"groups"`
		}
		data, err := os.ReadFile(filepath.FromSlash(src))
		require.NoError(t, err, "rule file %s (deploy/prometheus is another engineer's; it must exist)", src)
		require.NoError(t, yaml.Unmarshal(data, &rules), src)
		require.NotEmpty(t, rules.Groups, "%s: no rule groups", src)
	}
	scraped := map[string]bool{}
	for _, sc := range pc.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				h, ps, err := net.SplitHostPort(target)
				require.NoError(t, err)
				pn, _ := strconv.Atoi(ps)
				if h == "localhost" {
					require.Equal(t, 9090, pn, "prometheus scrapes itself on 9090")
					continue
				}
				reaches("prometheus", "scrape target "+target, h, pn)
				require.True(t, strings.HasPrefix(sc.JobName, "soapgw"), "job %s: the alert rules select job=~\"soapgw.*\"", sc.JobName)
				require.NotNil(t, cfgs[h], "scrape target %s is not a gateway", target)
				require.Equal(t, listenPorts(t, cfgs[h])["admin"], pn, "scrape target %s: not the admin port", target)
				require.Contains(t, []string{"", "/metrics"}, sc.MetricsPath)
				require.NotContains(t, st.Labels, "role", "soapgw metrics carry their own role label")
				scraped[h] = true
			}
		}
	}
	require.ElementsMatch(t, keys(cfgs), keys(scraped), "every gateway is scraped")
	runPromtool(t, promFile, mounts["prometheus"], pc.RuleFiles)
	listens["prometheus"][9090] = true
	require.True(t, slices.Contains(prom.Ports, "127.0.0.1:9090:9090"))

	// Grafana: the datasource is the prometheus service, the provider's path holds the
	// mounted dashboard.
	graf := cf.Services["grafana"]
	prov, ok := hostFile(mounts["grafana"], "/etc/grafana/provisioning")
	require.True(t, ok, "grafana provisioning is not mounted")
	var ds grafanaDatasources
	decodeYAMLFile(t, filepath.FromSlash(path.Join(prov, "datasources/prometheus.yml")), &ds)
	require.Len(t, ds.Datasources, 1)
	du, err := url.Parse(ds.Datasources[0].URL)
	require.NoError(t, err)
	pn, _ = strconv.Atoi(du.Port())
	reaches("grafana", "datasource", du.Hostname(), pn)
	var db grafanaDashboards
	decodeYAMLFile(t, filepath.FromSlash(path.Join(prov, "dashboards/soapgw.yml")), &db)
	require.Len(t, db.Providers, 1)
	dash, ok := hostFile(mounts["grafana"], db.Providers[0].Options.Path+"/soapgw.json")
	require.True(t, ok, "no dashboard mounted in the provider's path %s", db.Providers[0].Options.Path)
	home, ok := hostFile(mounts["grafana"], graf.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
	require.True(t, ok, "the home dashboard is not mounted")
	require.Equal(t, dash, home)
	data, err := os.ReadFile(filepath.FromSlash(dash))
	require.NoError(t, err, "dashboard %s (deploy/grafana is another engineer's; it must exist)", dash)
	require.True(t, json.Valid(data), "%s is not JSON", dash)

	// Every file under compose/ is used by the compose project or the Dockerfile.
	used["compose/image-default.yaml"] = true // COPY in deploy/Dockerfile (TestDockerfile)
	require.NoError(t, filepath.WalkDir("compose", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		p = filepath.ToSlash(p)
		ok := false
		for u := range used {
			ok = ok || p == u || strings.HasPrefix(p, u+"/")
		}
		require.True(t, ok, "%s is used by nothing", p)
		return nil
	}))

	runComposeConfig(t)
}

// runPromtool runs `promtool check config` on the compose Prometheus configuration,
// with its rule files pointed at the repository files the compose project mounts there,
// when promtool is installed (Debian: prometheus). It checks the rules too.
func runPromtool(t *testing.T, promFile string, ms []composeMount, ruleFiles []string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: the Prometheus configuration is checked by the test only")
		return
	}
	data, err := os.ReadFile(filepath.FromSlash(promFile))
	require.NoError(t, err)
	text := string(data)
	for _, rf := range ruleFiles {
		src, _ := hostFile(ms, rf)
		abs, err := filepath.Abs(filepath.FromSlash(src))
		require.NoError(t, err)
		text = strings.ReplaceAll(text, rf, abs)
	}
	tmp := filepath.Join(t.TempDir(), "prometheus.yml")
	require.NoError(t, os.WriteFile(tmp, []byte(text), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "check", "config", tmp).CombinedOutput()
	require.NoError(t, err, "promtool check config %s: %s", promFile, out)
}

// runComposeConfig runs `docker compose config` (or docker-compose) when one is
// installed; it needs no container engine.
func runComposeConfig(t *testing.T) {
	var argv []string
	if docker, err := exec.LookPath("docker"); err == nil && exec.Command(docker, "compose", "version").Run() == nil {
		argv = []string{docker, "compose"}
	} else if dc, err := exec.LookPath("docker-compose"); err == nil {
		argv = []string{dc}
	} else {
		t.Log("no docker compose or docker-compose installed: `compose config` not run")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], "-f", "docker-compose.yml", "config", "--quiet")...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", strings.Join(cmd.Args, " "), out)
}

func dependsOn(svcs map[string]*composeService, from, to string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(s string) bool {
		if seen[s] {
			return false
		}
		seen[s] = true
		for d := range svcs[s].DependsOn {
			if d == to || walk(d) {
				return true
			}
		}
		return false
	}
	return walk(from)
}

func requireAcyclic(t *testing.T, svcs map[string]*composeService) {
	t.Helper()
	for name := range svcs {
		require.False(t, dependsOn(svcs, name, name), "service %s depends on itself", name)
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// checkComposeKey: the tunnel is authenticated as a deployment's must be, and the key
// needs no manual step. The one-shot service keygen writes it into a named volume on the
// first up and keeps it afterwards; it runs as the image's non-root user, so the
// volume's mount point is a directory the image gives that user (Docker copies its owner
// into a new volume). Every gateway reads its key from that volume, mounted read-only,
// and starts only after keygen succeeded.
func checkComposeKey(t *testing.T, cf *composeFile, cfgs map[string]*config.Config, cfgFiles map[string]string) {
	t.Helper()
	kg := cf.Services["keygen"]
	require.NotNil(t, kg, "service keygen")
	require.Equal(t, "keygen", kg.Command[0], "service keygen")
	out, ok := flagValue(kg.Command, "out")
	require.True(t, ok, "keygen --out")
	require.Contains(t, kg.Command, "--keep-existing", "keygen must keep the key of an earlier up")
	require.Equal(t, "no", kg.Restart, "keygen is a one-shot")
	var keyVol string
	for _, m := range kg.namedMounts(t, "keygen", cf.Volumes) {
		if path.Dir(out) == m.dst {
			require.False(t, m.readOnly, "keygen writes the key")
			keyVol = m.volume
			owned, user := imageOwnedDirs(t)
			require.Equal(t, user, owned[m.dst], "keygen writes into volume %s at %s: the image must give that directory to its user %s", m.volume, m.dst, user)
		}
	}
	require.NotEmpty(t, keyVol, "keygen --out %s is not at the top of a named volume", out)

	require.NotEmpty(t, cfgs)
	for name, cfg := range cfgs {
		s := cf.Services[name]
		requireAuthenticated(t, "service "+name, cfg)
		raw, err := os.ReadFile(filepath.FromSlash(cfgFiles[name]))
		require.NoError(t, err)
		files := deployedCredentialFiles(t, cfgFiles[name], string(raw))
		require.Equal(t, []string{out}, slices.Compact(files), "service %s reads the key keygen writes, and no other credential file", name)
		mounted := false
		for _, m := range s.namedMounts(t, name, cf.Volumes) {
			if m.volume == keyVol {
				require.Equal(t, path.Dir(out), m.dst, "service %s mounts the key volume elsewhere than keygen", name)
				require.True(t, m.readOnly, "service %s: the key volume is read-only", name)
				mounted = true
			}
		}
		require.True(t, mounted, "service %s does not mount the key volume %s", name, keyVol)
		require.Equal(t, "service_completed_successfully", s.DependsOn["keygen"], "service %s starts after keygen", name)
	}
	for name, s := range cf.Services {
		if _, gw := cfgs[name]; !gw && name != "keygen" {
			for _, m := range s.namedMounts(t, name, cf.Volumes) {
				require.NotEqual(t, keyVol, m.volume, "service %s is no gateway: it has no use for the key", name)
			}
		}
	}
}
