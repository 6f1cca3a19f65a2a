// Package deploy holds no code, only the deployment files (Dockerfile, docker-compose.yml
// and its configurations, the Kubernetes manifests, the example configurations) and these
// tests, which check them statically and quickly: no container engine or cluster is
// needed. Each file family has its own test file: kubernetes_test.go, compose_test.go; the
// soapgw configurations and the Dockerfile are checked here.
package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/soapgw/soapgw/internal/config"
)

// repoRoot is the repository root, seen from this package's directory (go test runs
// tests in it).
const repoRoot = ".."

// soapgwKeys are the top-level keys of a soapgw configuration.
var soapgwKeys = []string{"node", "admin", "edge", "origin", "limits", "codecs", "drain_timeout"}

// isSoapgwConfig reports whether data looks like a soapgw configuration: a mapping with
// only soapgw's top-level keys, one of them a role.
func isSoapgwConfig(data []byte) bool {
	var top map[string]any
	if yaml.Unmarshal(data, &top) != nil || top == nil {
		return false
	}
	for k := range top {
		if !slices.Contains(soapgwKeys, k) {
			return false
		}
	}
	_, edge := top["edge"]
	_, origin := top["origin"]
	return edge || origin
}

// TestSoapgwConfigs loads every soapgw configuration under deploy/ exactly as
// `soapgw run` and `soapgw config check` do; the ConfigMap payloads of the Kubernetes
// base are files under kubernetes/config/, and are also checked as rendered by
// kustomize in kubernetes_test.go.
func TestSoapgwConfigs(t *testing.T) {
	var found []string
	require.NoError(t, filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !isSoapgwConfig(data) {
			return nil
		}
		found = append(found, filepath.ToSlash(path))
		t.Run(filepath.ToSlash(path), func(t *testing.T) {
			_, err := config.Load(path)
			require.NoError(t, err)
		})
		return nil
	}))
	for _, want := range []string{
		"compose/edge.yaml", "compose/origin.yaml", "compose/image-default.yaml",
		"kubernetes/config/edge.yaml", "kubernetes/config/origin.yaml",
		"examples/edge.yaml", "examples/origin.yaml", "examples/both.yaml",
	} {
		require.Contains(t, found, want, "not recognised as a soapgw configuration")
	}
}

// loadConfig loads a soapgw configuration that must be valid.
func loadConfig(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path)
	require.NoError(t, err)
	return cfg
}

// parseConfig parses a soapgw configuration held elsewhere (a ConfigMap).
func parseConfig(t *testing.T, name, data string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(name, []byte(data))
	require.NoError(t, err)
	return cfg
}

// port returns the port of a host:port address as a number.
func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err, addr)
	n, err := strconv.Atoi(p)
	require.NoError(t, err, addr)
	return n
}

// listenPorts returns the ports a soapgw process listens on, by what they are for.
func listenPorts(t *testing.T, cfg *config.Config) map[string]int {
	t.Helper()
	ports := map[string]int{}
	if cfg.Admin.Listen != "" {
		ports["admin"] = port(t, cfg.Admin.Listen)
	}
	if cfg.Edge != nil {
		for _, l := range cfg.Edge.Listeners {
			ports["edge listener "+l.Name] = port(t, l.Listen)
		}
	}
	if cfg.Origin != nil {
		ports["origin"] = port(t, cfg.Origin.Listen)
	}
	return ports
}

// flagValue returns the value of --name in args ("--name v" or "--name=v").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// dockerInstruction is one instruction of a Dockerfile, continuation lines joined.
type dockerInstruction struct {
	line int
	cmd  string // upper case
	args string
}

func parseDockerfile(t *testing.T, path string) (directives map[string]string, ins []dockerInstruction) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	directives = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	var cur strings.Builder
	start, n, header := 0, 0, true
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			// Parser directives are comments of the form "# key=value" before anything else.
			if m := regexp.MustCompile(`^#\s*([a-z]+)=(\S+)$`).FindStringSubmatch(line); header && m != nil {
				directives[m[1]] = m[2]
			} else {
				header = false
			}
			continue
		}
		header = false
		if line == "" {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		ins = append(ins, dockerInstruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	require.NoError(t, sc.Err())
	require.Zero(t, cur.Len(), "%s: ends in a continuation line", path)
	return directives, ins
}

// jsonArgs decodes the exec form ["a", "b"] of ENTRYPOINT and CMD.
func jsonArgs(t *testing.T, in dockerInstruction) []string {
	t.Helper()
	var v []string
	require.NoError(t, json.Unmarshal([]byte(in.args), &v), "line %d: %s must use the exec (JSON) form", in.line, in.cmd)
	return v
}

// TestDockerfile checks deploy/Dockerfile: a Go build stage that makes a static,
// trimmed binary stamped with the version, a distroless non-root runtime stage, the
// paths it copies from the repository, and that the default configuration it bakes in
// is valid and matches EXPOSE, ENTRYPOINT and CMD.
func TestDockerfile(t *testing.T) {
	directives, ins := parseDockerfile(t, "Dockerfile")
	require.Equal(t, "docker/dockerfile:1", directives["syntax"], "BuildKit syntax directive (RUN --mount needs it)")

	args := map[string]string{}
	type stage struct {
		name, base string
		ins        []dockerInstruction
	}
	var stages []*stage
	for _, in := range ins {
		switch in.cmd {
		case "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			if len(stages) == 0 {
				args[k] = v
			}
		case "FROM":
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--platform=") })
			s := &stage{base: os.Expand(f[0], func(k string) string { return args[k] })}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
		}
	}
	require.Len(t, stages, 2, "a build stage and a runtime stage")
	build, runtime := stages[0], stages[1]
	require.Equal(t, "build", build.name)
	require.Regexp(t, `^golang:1\.26(\.\d+)?(-\S+)?$`, build.base)
	require.Equal(t, "gcr.io/distroless/static-debian12:nonroot", runtime.base)

	// The build stage: static, trimmed, stamped; the sources it copies exist.
	var env, goBuild string
	for _, in := range build.ins {
		switch in.cmd {
		case "ENV":
			env += " " + in.args
		case "COPY":
			f := strings.Fields(in.args)
			for _, src := range f[:len(f)-1] {
				_, err := os.Stat(filepath.Join(repoRoot, src))
				require.NoError(t, err, "line %d: COPY source", in.line)
			}
		case "RUN":
			if strings.Contains(in.args, "go build") {
				goBuild = in.args
			}
		}
	}
	require.Contains(t, env, "CGO_ENABLED=0")
	require.Contains(t, goBuild, "-trimpath")
	ldflags := regexp.MustCompile(`-ldflags "([^"]*)"`).FindStringSubmatch(goBuild)
	require.NotNil(t, ldflags, "go build -ldflags")
	require.Contains(t, ldflags[1], "-s -w")
	require.Contains(t, ldflags[1], "-X main.version=${VERSION}")
	version, err := os.ReadFile(filepath.Join(repoRoot, "cmd/soapgw/version.go"))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^var version = "dev"$`, string(version), "-X main.version needs this variable")
	out := regexp.MustCompile(`-o (\S+) (\S+)`).FindStringSubmatch(goBuild)
	require.NotNil(t, out, "go build -o BINARY PACKAGE")
	require.Equal(t, "./cmd/soapgw", out[2])

	// The runtime stage.
	copied := map[string]string{} // destination -> source (in the repository, or stage:path)
	var user, entrypoint, cmd []string
	var expose []int
	var exposeUDP []string
	for _, in := range runtime.ins {
		switch in.cmd {
		case "COPY":
			f := strings.Fields(in.args)
			if from, ok := strings.CutPrefix(f[0], "--from="); ok {
				require.Equal(t, build.name, from, "line %d", in.line)
				if len(f) == 4 && strings.HasPrefix(f[1], "--chown=") {
					// A directory for the runtime user (imageOwnedDirs): compose's key
					// volume is mounted there.
					copied[f[3]] = from + ":" + f[2]
					continue
				}
				require.Equal(t, out[1], f[1], "line %d: copies the binary go build wrote", in.line)
				copied[f[2]] = from + ":" + f[1]
				continue
			}
			require.Len(t, f, 2, "line %d", in.line)
			_, err := os.Stat(filepath.Join(repoRoot, f[0]))
			require.NoError(t, err, "line %d: COPY source", in.line)
			copied[f[1]] = f[0]
		case "USER":
			user = strings.Split(in.args, ":")
		case "ENTRYPOINT":
			entrypoint = jsonArgs(t, in)
		case "CMD":
			cmd = jsonArgs(t, in)
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				if port, ok := strings.CutSuffix(p, "/udp"); ok {
					exposeUDP = append(exposeUDP, port)
					continue
				}
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				require.NoError(t, err, "line %d: EXPOSE %s", in.line, p)
				expose = append(expose, n)
			}
		case "HEALTHCHECK":
			t.Fatalf("line %d: HEALTHCHECK cannot work in a distroless image (no shell, no curl)", in.line)
		case "RUN":
			t.Fatalf("line %d: RUN in the runtime stage: distroless has no shell", in.line)
		}
	}
	require.Equal(t, []string{"65532", "65532"}, user, "USER: distroless's nonroot, numeric for runAsNonRoot")
	owned, owner := imageOwnedDirs(t)
	for dir, o := range owned {
		require.Equal(t, owner, o, "%s belongs to the image's user", dir)
	}
	require.Equal(t, []string{"/soapgw"}, entrypoint)
	require.Contains(t, copied, "/soapgw")
	require.Equal(t, []string{"run", "--config", "/etc/soapgw/soapgw.yaml"}, cmd)
	src, ok := copied["/etc/soapgw/soapgw.yaml"]
	require.True(t, ok, "the image must hold a configuration at the path CMD gives")
	def := loadConfig(t, filepath.Join(repoRoot, src))
	for what, p := range listenPorts(t, def) {
		if what == "origin" && strings.HasPrefix(def.Origin.Listen, "127.0.0.1:") {
			continue // the default configuration's own loopback tunnel
		}
		require.Contains(t, expose, p, "EXPOSE the default configuration's %s port", what)
	}
	require.ElementsMatch(t, []int{8080, 7070, 9100}, expose)
	require.Equal(t, []string{"7070"}, exposeUDP, "the UDP tunnel listens on the tunnel port too (origin.udp_listen)")
}

// imageOwnedDirs returns the directories deploy/Dockerfile's runtime stage copies in with
// --chown (empty directories made in the build stage, since distroless has no shell to
// mkdir), each with its owner, and the image's USER.
func imageOwnedDirs(t *testing.T) (owned map[string]string, user string) {
	t.Helper()
	_, ins := parseDockerfile(t, "Dockerfile")
	owned = map[string]string{}
	made := map[string]bool{} // mkdir -p in the build stage
	runtime := false
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			runtime = strings.Contains(in.args, "distroless")
		case "RUN":
			if f := strings.Fields(in.args); !runtime && len(f) >= 3 && f[0] == "mkdir" && f[1] == "-p" {
				for _, d := range f[2:] {
					made[d] = true
				}
			}
		case "COPY":
			f := strings.Fields(in.args)
			if !runtime || len(f) != 4 || !strings.HasPrefix(f[0], "--from=") {
				continue
			}
			if o, ok := strings.CutPrefix(f[1], "--chown="); ok {
				require.True(t, made[f[2]], "line %d: %s is no directory the build stage made", in.line, f[2])
				owned[f[3]] = o
			}
		case "USER":
			user = in.args
		}
	}
	return owned, user
}

// TestStrictDecodingRejectsUnknownFields makes sure the strict decoders the other tests
// rely on do fail on a misspelt key, so a passing test means something.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	var k kustomization
	require.ErrorContains(t, decodeStrict([]byte("resources: [a.yaml]\nresorces: [b.yaml]\n"), &k), "resorces")
	objs := newK8sObjects()
	err := objs.add("inline.yaml", []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicaz: 2\n"))
	require.ErrorContains(t, err, "replicaz")
	err = objs.add("inline.yaml", []byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{port: 1, targetPorts: 2}]\n"))
	require.ErrorContains(t, err, "targetPorts")
	var c composeFile
	require.ErrorContains(t, decodeYAMLStrict([]byte("services:\n  a:\n    image: x\n    dependson: [b]\n"), &c), "dependson")
}

// mustExist fails unless the repository path exists.
func mustExist(t *testing.T, path, why string) {
	t.Helper()
	_, err := os.Stat(path)
	require.NoError(t, err, "%s: %s", why, fmt.Sprint(path))
}
