package bench

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
	"time"
)

//go:embed nginx/*.conf.tmpl
var nginxTemplates embed.FS

var nginxTmpl = template.Must(template.New("").Option("missingkey=error").ParseFS(nginxTemplates, "nginx/*.conf.tmpl"))

// NginxParams fill the nginx configuration templates (nginx/edge.conf.tmpl and
// nginx/origin.conf.tmpl).
type NginxParams struct {
	Dir           string // prefix: pid, logs and temp files live here
	User          string // "user" directive; empty: none (needed when running as root)
	Workers       int
	Listen        string // host:port this nginx listens on
	Upstream      string // host:port it proxies to
	Keepalive     int    // idle upstream connections kept per worker
	GzipMinLength int    // origin only
	GzipLevel     int    // origin only
}

// NginxConfig renders the edge or origin nginx configuration.
func NginxConfig(role string, p NginxParams) ([]byte, error) {
	if role != "edge" && role != "origin" {
		return nil, fmt.Errorf("nginx role %q: want edge or origin", role)
	}
	var b bytes.Buffer
	if err := nginxTmpl.ExecuteTemplate(&b, role+".conf.tmpl", p); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// nginxFallbacks are where nginx lives when it is not on PATH.
var nginxFallbacks = []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"}

// NginxPath finds Debian's nginx: on PATH, else /usr/sbin/nginx (not on a normal
// user's PATH). It returns "" when nginx is not installed.
func NginxPath() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	for _, p := range nginxFallbacks {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// NginxVersion returns "nginx/1.22.1" or "".
func NginxVersion(path string) string {
	out, err := exec.Command(path, "-v").CombinedOutput()
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(out))
	return strings.TrimPrefix(s, "nginx version: ")
}

// nginxPair is what a user would deploy today: nginx beside the client (HTTP/1.0 in,
// persistent HTTP/1.1 and gzip upstream) and nginx beside the server (gzip).
type nginxPair struct{}

func (nginxPair) Name() string { return "nginx-pair" }
func (nginxPair) Describe() string {
	return "Debian nginx beside the client (HTTP/1.0 in, keep-alive HTTP/1.1 upstream, Accept-Encoding: gzip, gunzip) and beside the server (gzip on for SOAP types)"
}

func (nginxPair) Start(ctx context.Context, env *Env) (_ *Started, err error) {
	bin := NginxPath()
	if bin == "" {
		return nil, skipf("nginx not installed")
	}
	st := &Started{Notes: []string{NginxVersion(bin)}}
	defer func() {
		if err != nil {
			st.Stop()
		}
	}()
	ports, err := freePorts(env.Server, env.Client)
	if err != nil {
		return nil, err
	}
	originPort, edgePort := ports[0], ports[1]
	user := ""
	if os.Geteuid() == 0 {
		// As root the workers would run as "nobody" and could not use the temp dirs.
		user = "root"
	}
	origin := NginxParams{
		Workers: 1, User: user,
		Listen:    hostPort(env.Server.Addr(), originPort),
		Upstream:  env.Upstream.String(),
		Keepalive: 64, GzipMinLength: 64, GzipLevel: 6,
	}
	edge := NginxParams{
		Workers: 1, User: user,
		Listen:    hostPort(env.Client.Addr(), edgePort),
		Upstream:  origin.Listen,
		Keepalive: 64,
	}
	for _, r := range []struct {
		role string
		site Site
		p    NginxParams
	}{{"origin", env.Server, origin}, {"edge", env.Client, edge}} {
		dir := filepath.Join(env.Dir, "nginx-"+r.role)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		r.p.Dir = dir
		conf, err := NginxConfig(r.role, r.p)
		if err != nil {
			return nil, err
		}
		confPath := filepath.Join(dir, r.role+".conf")
		if err := os.WriteFile(confPath, conf, 0o644); err != nil {
			return nil, err
		}
		cmd := r.site.Command(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", confPath, "-g", "daemon off;")
		p, err := startProc("nginx-"+r.role, r.site.Name(), cmd, filepath.Join(dir, "stderr.log"))
		if err != nil {
			return nil, err
		}
		st.Procs = append(st.Procs, p)
		if err := waitListening(ctx, r.site, r.p.Listen, 10*time.Second, p); err != nil {
			tail, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return nil, fmt.Errorf("nginx %s: %w %s", r.role, err, strings.TrimSpace(string(tail)))
		}
	}
	st.Target = Target{Site: env.Client, Addr: edge.Listen, Host: edge.Listen}
	st.Endpoints = map[string]string{"edge": edge.Listen, "origin": origin.Listen}
	return st, nil
}
