package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/soapgw/soapgw/internal/testutil"
)

// The operations files: the Grafana dashboard, the alert rules and the example scrape
// configuration under deploy/, checked against a real Prometheus scraping a live pair.
const (
	dashboardFile = "../deploy/grafana/soapgw.json"
	alertsFile    = "../deploy/prometheus/alerts.yml"
	promExample   = "../deploy/prometheus/prometheus.yml"
	renderScript  = "../scripts/render_dashboard.py"
)

// grafanaDashboard is the part of the dashboard JSON the tests read.
type grafanaDashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Inputs        []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaPanel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource map[string]any `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
		Instant    bool           `json:"instant"`
		Datasource map[string]any `json:"datasource"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) *grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d grafanaDashboard
	require.NoError(t, json.Unmarshal(b, &d))
	return &d
}

// TestGrafanaDashboardShape checks what Grafana needs to import the dashboard and what
// the live test below cannot see: inputs, variables, ids, layout, data source references.
// It needs no external binary.
func TestGrafanaDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	require.Equal(t, "soapgw", d.Title)
	require.NotEmpty(t, d.UID)
	require.GreaterOrEqual(t, d.SchemaVersion, 36)
	require.Len(t, d.Inputs, 1)
	require.Equal(t, "DS_PROMETHEUS", d.Inputs[0].Name)
	require.Equal(t, "prometheus", d.Inputs[0].PluginID)

	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Name {
		case "datasource":
			require.Equal(t, "datasource", v.Type)
		case "instance", "peer":
			require.Equal(t, "query", v.Type, v.Name)
			require.True(t, v.Multi && v.IncludeAll, "%s must be multi-value with All", v.Name)
			require.Contains(t, string(v.Query), "label_values(", v.Name)
		default:
			t.Errorf("unexpected variable %q", v.Name)
		}
	}
	require.True(t, vars["datasource"] && vars["instance"] && vars["peer"], "variables: %v", vars)

	ids := map[int]string{}
	queries := 0
	for _, p := range d.Panels {
		require.NotZero(t, p.ID, p.Title)
		require.Empty(t, ids[p.ID], "panel id %d used by %q and %q", p.ID, ids[p.ID], p.Title)
		ids[p.ID] = p.Title
		require.True(t, p.GridPos.W > 0 && p.GridPos.X+p.GridPos.W <= 24 && p.GridPos.H > 0, "gridPos of %q: %+v", p.Title, p.GridPos)
		if p.Type == "row" {
			require.Empty(t, p.Targets, p.Title)
			continue
		}
		require.NotEmpty(t, p.Title)
		require.Equal(t, "${datasource}", p.Datasource["uid"], "panel %q data source", p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			require.False(t, refs[tg.RefID], "panel %q: refId %s twice", p.Title, tg.RefID)
			refs[tg.RefID] = true
			require.Equal(t, "${datasource}", tg.Datasource["uid"], "panel %q target %s", p.Title, tg.RefID)
			require.Contains(t, tg.Expr, `instance=~"$instance"`, "panel %q target %s must follow the instance variable", p.Title, tg.RefID)
			queries++
		}
	}
	require.GreaterOrEqual(t, queries, 20)
}

// promRule is one alerting rule of alerts.yml.
type promRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlertRules(t *testing.T) []promRule {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Rules []promRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	var rules []promRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// thresholdRE matches an alert expression's comparison with a number ("> 0.05", "== 0").
var thresholdRE = regexp.MustCompile(`\s*(?:==|!=|>=|<=|>|<)\s*(?:bool\s+)?[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?`)

// withoutThreshold turns an alert expression into the query it compares: alerts.yml
// writes every expr as "<query> <comparison> <number>" (its header says so), and the
// query alone must return series when the gateways run, firing or not.
func withoutThreshold(t *testing.T, r promRule) string {
	t.Helper()
	locs := thresholdRE.FindAllStringIndex(r.Expr, -1)
	require.Len(t, locs, 1, "alert %s: expr must hold exactly one comparison with a number:\n%s", r.Alert, r.Expr)
	return r.Expr[:locs[0][0]] + r.Expr[locs[0][1]:]
}

// TestPrometheusDashboardAndAlerts runs an edge/origin pair under a short mixed load,
// scrapes both admin listeners with a real Prometheus configured from
// deploy/prometheus/prometheus.yml (targets replaced, 1 s intervals) with the rules of
// alerts.yml, and then requires that every query of every dashboard panel and variable,
// and every alert expression without its threshold, evaluates without error to at least
// one series with a finite value. promtool checks the rules, the generated config and
// both gateways' /metrics text.
//
// SOAPGW_RENDER_DASHBOARD=out.png also runs scripts/render_dashboard.py (needs Debian's
// python3-matplotlib) against this Prometheus before it stops, with a longer load so the
// graphs have a shape; docs/dashboard.png is made that way.
func TestPrometheusDashboardAndAlerts(t *testing.T) {
	promBin, err1 := exec.LookPath("prometheus")
	promtool, err2 := exec.LookPath("promtool")
	testutil.Needs(t, "prometheus", err1, "make test-deps (Debian's prometheus package)")
	testutil.Needs(t, "promtool", err2, "make test-deps (Debian's prometheus package)")
	renderOut := os.Getenv("SOAPGW_RENDER_DASHBOARD")
	loadFor := 3 * time.Second
	if renderOut != "" {
		loadFor = 40 * time.Second
		renderOut, _ = filepath.Abs(renderOut)
	}
	alertsPath, err := filepath.Abs(alertsFile)
	require.NoError(t, err)

	out, err := exec.Command(promtool, "check", "rules", alertsPath).CombinedOutput()
	require.NoError(t, err, "promtool check rules:\n%s", out)

	// The service: echoes, SOAP Faults with 500 (Server and Client codes), a 503 without
	// a fault, and a 512 KiB answer (larger than a stream window: flow-control stalls).
	// NotifyFail is a one-way operation the server refuses with a Fault: a dead letter.
	big := bytes.Repeat([]byte("<row>0123456789abcdef0123456789abcdef0123456789abcdef01234</row>\n"), 512<<10/64)
	srv := startRecordingServer(t, func(r *recordedRequest) []byte {
		xml := [][2]string{{"Content-Type", "text/xml; charset=utf-8"}}
		action := r.Header("SOAPAction")
		switch {
		case strings.Contains(action, "#Fail"):
			return soapResponse(500, "Internal Server Error", xml, soap11Fault("soap:Server", "database unavailable"))
		case strings.Contains(action, "#Reject"):
			return soapResponse(500, "Internal Server Error", xml, soap11Fault("soap:Client", "invalid order id"))
		case strings.Contains(action, "#Crash"):
			return soapResponse(503, "Service Unavailable", [][2]string{{"Content-Type", "text/plain"}}, []byte("overloaded\n"))
		case strings.Contains(action, "#GetReport"):
			return soapResponse(200, "OK", xml, big)
		case strings.Contains(action, "#NotifyFail"):
			return soapResponse(500, "Internal Server Error", xml, soap11Fault("soap:Client", "unknown event type"))
		}
		return soapResponse(200, "OK", xml, append(append([]byte("<ok>"), r.Body...), "</ok>"...))
	})

	// The pair: routes /svc/ to the service and /dead/ to an upstream nobody listens on
	// (origin gateway errors); any other path has no route (an edge gateway error). Short
	// keepalives so the tunnel RTT histogram fills within the test. Notify and NotifyFail
	// are one-way operations (edge.one_way, origin.one_way).
	a := newPairAddrs(t)
	deadURL := "http://" + freePort(t)
	stores := t.TempDir()
	startGateway(t, a.OriginAdmin, originYAML(a, srv.URL(), fmt.Sprintf("    - name: dead\n      url: %s\n      connect_timeout: 1s\n  one_way:\n    ledger: %s\n",
		deadURL, filepath.Join(stores, "ledger.db"))))
	// An HTTPS listener beside: a client that speaks plain HTTP to it fails its TLS
	// handshake (SoapgwEdgeClientTLSFailures).
	ca := newTestCA(t, stores, "clients-ca")
	httpsCert, httpsKey := ca.issue(t, stores, "soap.internal", true)
	httpsAddr := freePort(t)
	startGateway(t, a.EdgeAdmin, fmt.Sprintf(`node: e2e-edge
admin:
  listen: %[1]s
edge:
  listeners:
    - name: soap
      listen: %[2]s
    - name: secure
      listen: %[6]s
      tls: {cert_file: %[7]s, key_file: %[8]s}
  peers:
    - name: dc1
      address: %[3]s
      connections: 2
      keepalive_interval: 250ms
      auth: {key_file: %[4]s}
    - name: dc2
      address: %[3]s
      transport: udp
      fallback: tcp
      redundancy: true
      keepalive_interval: 250ms
      auth: {key_file: %[4]s}
    - name: dc3
      address: %[3]s
      transport: udp
      auth: {key_file: %[4]s}
  routes:
    - path_prefix: /svc/
      peer: dc1
      upstream: svc
    - path_prefix: /dead/
      peer: dc1
      upstream: dead
    - path_prefix: /udp/
      peer: dc2
      upstream: svc
    - path_prefix: /udp3/
      peer: dc3
      upstream: svc
  one_way:
    spool: %[5]s
    operations:
      - action: "urn:demo#Notify"
      - action: "urn:demo#NotifyFail"
`, a.EdgeAdmin, a.Edge, a.Tunnel, tunnelKeyFile, filepath.Join(stores, "spool.db"), httpsAddr, httpsCert, httpsKey))

	// Prometheus, configured from the example with this pair's admin listeners.
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgPath, promConfigFromExample(t, alertsPath, a.EdgeAdmin, a.OriginAdmin), 0o600))
	out, err = exec.Command(promtool, "check", "config", cfgPath).CombinedOutput()
	require.NoError(t, err, "promtool check config:\n%s", out)
	promAddr := freePort(t)
	prom := startProc(t, promBin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	api := &promAPI{t: t, base: "http://" + promAddr}
	api.waitTargets(map[string]string{"soapgw-edge": a.EdgeAdmin, "soapgw-origin": a.OriginAdmin}, 15*time.Second)

	// Bounded load: mixed operations, faults, gateway errors, new connections per call
	// (HTTP/1.0 style) and keep-alive clients.
	loadStart := time.Now()
	plain, err := frExchange(httpsAddr, frSoapRequest("soap.internal", "/svc/x", false, "<x/>"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "bad_request", plain.Get("X-Soapgw-Error"), "plain HTTP to the HTTPS listener")
	sent, failed := runMixedLoad(t, a.Edge, loadFor)
	t.Logf("load: %d exchanges in %s (%d transport errors)", sent, loadFor, failed)
	require.Zero(t, failed, "requests failed at the transport level")
	require.Greater(t, sent, int64(50))
	// Let two more scrapes and rule evaluations see the end of the load.
	time.Sleep(2500 * time.Millisecond)
	at := time.Now()

	for _, g := range []struct{ name, addr string }{{"edge", a.EdgeAdmin}, {"origin", a.OriginAdmin}} {
		code, body := httpGet("http://" + g.addr + "/metrics")
		require.Equal(t, 200, code, g.name)
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool check metrics (%s):\n%s", g.name, out)
		require.Empty(t, strings.TrimSpace(string(out)), "promtool check metrics (%s) found problems", g.name)
	}

	// Every panel query. Grafana's variables: $instance and $peer are "All" (a regex
	// matching every value), $__rate_interval is 10 s (10 scrapes), $__range the last minute.
	vars := strings.NewReplacer(
		"${instance}", ".*", "$instance", ".*", "${peer}", ".*", "$peer", ".*",
		"$__rate_interval", "10s", "$__interval", "2s", "$__range", "1m",
	)
	d := loadDashboard(t)
	panels := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			api.requireSeries(fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), vars.Replace(tg.Expr), at)
			panels++
		}
	}
	// Variable queries: label_values(selector, label) lists the label's values.
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*(\w+)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		require.NoError(t, json.Unmarshal(v.Query, &q), v.Name)
		m := labelValues.FindStringSubmatch(q.Query)
		require.NotNil(t, m, "variable %s: %q", v.Name, q.Query)
		api.requireSeries("variable "+v.Name, vars.Replace(fmt.Sprintf("group by (%s) (%s)", m[2], m[1])), at)
	}

	// Every alert expression without its threshold, and the rules' state as Prometheus
	// evaluated them: none failed to evaluate, the pair is healthy (no tunnel down, no
	// checksum error) and the errors this load made are noticed.
	rules := loadAlertRules(t)
	require.NotEmpty(t, rules)
	for _, r := range rules {
		require.NotEmpty(t, r.Labels["severity"], r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		require.NotEmpty(t, r.Annotations["description"], r.Alert)
		api.requireSeries("alert "+r.Alert, withoutThreshold(t, r), at)
	}
	states := api.ruleStates()
	for _, r := range rules {
		require.Contains(t, states, r.Alert, "rule not loaded by Prometheus")
	}
	for _, name := range []string{"SoapgwDown", "SoapgwTunnelDown", "SoapgwTunnelChecksumErrors", "SoapgwTunnelFlapping", "SoapgwEdgeLatencyHigh",
		"SoapgwUDPTunnelDown", "SoapgwUDPFallbackActive", "SoapgwUDPCodecNacks"} {
		require.Equal(t, "inactive", states[name], name)
	}
	for _, name := range []string{"SoapgwOneWayMessageOld", "SoapgwOneWayRejected"} {
		require.Equal(t, "inactive", states[name], name)
	}
	for _, name := range []string{"SoapgwOriginUpstreamErrors", "SoapgwGatewayErrorRatio", "SoapgwOneWayDeadLetters"} {
		require.Contains(t, []string{"pending", "firing"}, states[name], name)
	}
	t.Logf("%d panel queries, %d variables and %d alert expressions returned data", panels, len(d.Templating.List)-1, len(rules))

	if renderOut != "" {
		cmd := exec.Command("/usr/bin/python3", renderScript, "--prometheus", api.base, "--dashboard", dashboardFile,
			"--out", renderOut, "--start", strconv.FormatInt(loadStart.Add(-5*time.Second).Unix(), 10),
			"--end", strconv.FormatInt(at.Unix(), 10), "--scrape-interval", "1s")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "render_dashboard.py:\n%s", out)
		t.Logf("render_dashboard.py: %s", out)
	}

	// Stop Prometheus by its PID (cleanup would kill it too).
	if !prom.signal(syscall.SIGTERM, 5*time.Second) {
		prom.kill()
	}
}

// promConfigFromExample is deploy/prometheus/prometheus.yml with the edge and origin
// targets replaced by these admin listeners, 1 s intervals and alerts.yml by absolute path.
func promConfigFromExample(t *testing.T, alertsPath, edgeAdmin, originAdmin string) []byte {
	t.Helper()
	b, err := os.ReadFile(promExample)
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal(b, &cfg))
	cfg["global"] = map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
	cfg["rule_files"] = []string{alertsPath}
	delete(cfg, "alerting") // no Alertmanager here
	replaced := map[string]bool{}
	for _, sc := range cfg["scrape_configs"].([]any) {
		for _, st := range sc.(map[string]any)["static_configs"].([]any) {
			st := st.(map[string]any)
			labels, _ := st["labels"].(map[string]any)
			switch role, _ := labels["__soapgw_role"].(string); role {
			case "edge":
				st["targets"] = []string{edgeAdmin}
			case "origin":
				st["targets"] = []string{originAdmin}
			default:
				t.Fatalf("static_config without __soapgw_role edge|origin in %s: %v", promExample, st)
			}
			replaced[labels["__soapgw_role"].(string)] = true
		}
	}
	require.True(t, replaced["edge"] && replaced["origin"], "%s must have an edge and an origin target", promExample)
	out, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	return out
}

// soap11Fault is a SOAP 1.1 envelope with a Fault.
func soap11Fault(code, msg string) []byte {
	return []byte(`<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><soap:Fault><faultcode>` +
		code + `</faultcode><faultstring>` + msg + `</faultstring></soap:Fault></soap:Body></soap:Envelope>`)
}

// runMixedLoad sends SOAP calls to the edge from 6 clients for d (each client starts a
// little later than the one before, so the rate ramps up): half open a connection per
// call like legacy HTTP/1.0 stacks, half keep theirs alive. Operations are mixed by
// SOAPAction; some calls fault at the server, some go to a dead upstream, one has no
// route, some are one-way (Notify, and NotifyFail, which the server refuses). Returns the
// exchanges completed and transport-level failures.
func runMixedLoad(t *testing.T, edgeAddr string, d time.Duration) (sent, failed int64) {
	t.Helper()
	const clients = 6
	deadline := time.Now().Add(d)
	var nSent, nFailed atomic.Int64
	call := func(c *http.Client, path, action string, i int) {
		body := fmt.Sprintf(`<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><m:%s xmlns:m="urn:demo"><m:id>%d</m:id></m:%s></soap:Body></soap:Envelope>`, action, i, action)
		req, err := http.NewRequest("POST", "http://"+edgeAddr+path, strings.NewReader(body))
		if err != nil {
			nFailed.Add(1)
			return
		}
		req.Header.Set("Content-Type", "text/xml; charset=utf-8")
		req.Header.Set("SOAPAction", `"urn:demo#`+action+`"`)
		resp, err := c.Do(req)
		if err != nil {
			t.Logf("%s %s: %v", path, action, err)
			nFailed.Add(1)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		nSent.Add(1)
	}
	var wg sync.WaitGroup
	for k := range clients {
		tr := &http.Transport{DisableKeepAlives: k%2 == 0, MaxIdleConnsPerHost: 1}
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		if k == 0 {
			call(c, "/nowhere", "Lookup", 0) // no route: an edge gateway error
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tr.CloseIdleConnections()
			time.Sleep(time.Duration(k) * d / (3 * clients))
			ops := []string{"GetQuote", "ListOrders", "AddEntry", "GetCustomer"}
			for i := k; time.Now().Before(deadline); i++ {
				switch {
				case i%10 == 0:
					call(c, "/dead/Orders", "ListOrders", i) // upstream unreachable
				case i%40 == 7:
					call(c, "/svc/Reports", "GetReport", i)
				case i%17 == 3:
					call(c, "/svc/Orders", "Fail", i)
				case i%23 == 5:
					call(c, "/svc/Orders", "Reject", i)
				case i%29 == 11:
					call(c, "/svc/Orders", "Crash", i)
				case i%31 == 6:
					call(c, "/svc/Events", "NotifyFail", i) // one-way: a dead letter
				case i%13 == 4:
					call(c, "/svc/Events", "Notify", i) // one-way: acknowledged from the spool
				case i%5 == 1:
					call(c, "/udp/Orders", ops[i%len(ops)], i) // UDP tunnel (fallback tcp, redundancy)
				case i%7 == 2:
					call(c, "/udp3/Orders", ops[i%len(ops)], i) // UDP tunnel
				default:
					call(c, "/svc/Orders", ops[(i*7+k)%len(ops)], i)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return nSent.Load(), nFailed.Load()
}

// promAPI is a client of Prometheus' HTTP API.
type promAPI struct {
	t    *testing.T
	base string
}

func (p *promAPI) get(path string, q url.Values, into any) {
	p.t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(p.base + path + "?" + q.Encode())
	require.NoError(p.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(p.t, err)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	require.NoError(p.t, json.Unmarshal(b, &env), "%s: %s", path, b)
	require.Equal(p.t, "success", env.Status, "%s?%s: %s", path, q.Encode(), env.Error)
	require.NoError(p.t, json.Unmarshal(env.Data, into), "%s: %s", path, b)
}

// waitTargets waits until Prometheus scraped each job's target successfully.
func (p *promAPI) waitTargets(want map[string]string, within time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		var data struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		}
		if code, _ := httpGet(p.base + "/-/ready"); code == 200 {
			p.get("/api/v1/targets", url.Values{"state": {"active"}}, &data)
			up := 0
			last = ""
			for _, tg := range data.ActiveTargets {
				if want[tg.Labels["job"]] == tg.Labels["instance"] && tg.Health == "up" {
					up++
				}
				last += fmt.Sprintf("%v %s %s; ", tg.Labels, tg.Health, tg.LastError)
			}
			if up == len(want) && len(data.ActiveTargets) == len(want) {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.t.Fatalf("Prometheus targets not up within %s: %s", within, last)
}

// requireSeries evaluates expr at time at and fails the test unless it returns at least
// one series (or a scalar) with a finite value.
func (p *promAPI) requireSeries(what, expr string, at time.Time) {
	p.t.Helper()
	if strings.Contains(expr, "$") {
		p.t.Errorf("%s: unresolved variable in %q", what, expr)
		return
	}
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	p.get("/api/v1/query", url.Values{"query": {expr}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}}, &data)
	var values []string
	switch data.ResultType {
	case "vector":
		var v []struct {
			Value [2]any `json:"value"`
		}
		require.NoError(p.t, json.Unmarshal(data.Result, &v))
		for _, s := range v {
			values = append(values, fmt.Sprint(s.Value[1]))
		}
	case "scalar":
		var s [2]any
		require.NoError(p.t, json.Unmarshal(data.Result, &s))
		values = append(values, fmt.Sprint(s[1]))
	default:
		p.t.Errorf("%s: result type %s, want an instant vector:\n%s", what, data.ResultType, expr)
		return
	}
	for _, v := range values {
		if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return
		}
	}
	p.t.Errorf("%s: no series with a finite value (got %v):\n%s", what, values, expr)
}

// ruleStates returns each alerting rule's state (inactive, pending, firing); a rule whose
// evaluation failed fails the test.
func (p *promAPI) ruleStates() map[string]string {
	p.t.Helper()
	var data struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				State     string `json:"state"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
				Type      string `json:"type"`
			} `json:"rules"`
		} `json:"groups"`
	}
	p.get("/api/v1/rules", url.Values{"type": {"alert"}}, &data)
	states := map[string]string{}
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			if r.Health != "ok" {
				p.t.Errorf("rule %s: health %q: %s", r.Name, r.Health, r.LastError)
			}
			states[r.Name] = r.State
		}
	}
	return states
}
