package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/testutil"
)

// Gateway Faults as real SOAP stacks read them (limits.fault_status). The helpers carry
// the "gf" prefix.

// gfRequireStacks fails (under CI) or skips the test when the Debian interpreter lacks
// zeep or suds.
func gfRequireStacks(t *testing.T) {
	t.Helper()
	out, err := exec.Command(zpPython, "-c", "import zeep, suds").CombinedOutput()
	if err != nil {
		lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
		err = fmt.Errorf("%s cannot import zeep and suds: %w: %s", zpPython, err, lines[len(lines)-1])
	}
	testutil.Needs(t, "zeep and suds", err, "make test-deps (python3-zeep python3-suds)")
}

// gfResult is what soapstack/faultclient.py reports for one call.
type gfResult struct {
	Call         string `json:"call"`
	Outcome      string `json:"outcome"` // fault, http_error, transport_error, result, error
	Exception    string `json:"exception"`
	Code         string `json:"code"`
	Message      string `json:"message"`
	Status       int    `json:"status"`
	SoapgwStatus string `json:"soapgw_status"`
	SoapgwError  string `json:"soapgw_error"`
}

// gfCalls runs soapstack/faultclient.py once for every call (STACK:VERSION:URL).
func gfCalls(t *testing.T, calls []string) []gfResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{filepath.Join("soapstack", "faultclient.py"), "--timeout", "20"}
	for _, c := range calls {
		args = append(args, "--call", c)
	}
	cmd := exec.CommandContext(ctx, zpPython, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "faultclient.py failed\nstderr:\n%s\nstdout:\n%s", stderr.String(), stdout.String())
	var out []gfResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "faultclient.py output:\n%s", stdout.String())
	require.Len(t, out, len(calls))
	return out
}

// gfEdgeYAML is an edge with two peers: dc1, the origin whose tunnel listens at tunnel,
// and dead, an address where nothing listens. Routes: /down/ → dc1 (its upstream is
// down), /dead/ → dead; nothing else matches.
func gfEdgeYAML(admin, listen, tunnel, deadAddr, limits string) string {
	return fmt.Sprintf(`node: e2e-edge
admin:
  listen: %s
edge:
  listeners:
    - name: soap
      listen: %s
  peers:
    - name: dc1
      address: %s
      auth: {key_file: %s}
    - name: dead
      address: %s
      dial_timeout: 1s
      auth: {key_file: %s}
  routes:
    - path_prefix: /down/
      peer: dc1
      upstream: svc
    - path_prefix: /dead/
      peer: dead
      upstream: svc
%s`, admin, listen, tunnel, tunnelKeyFile, deadAddr, tunnelKeyFile, limits)
}

// TestGatewayFaultsSOAPStacks: real SOAP clients (zeep over SOAP 1.1 and 1.2, suds over
// SOAP 1.1) call through a real edge whose origin is down (origin_unreachable), whose
// origin cannot reach its upstream (upstream_unreachable), or that has no route for the
// call (no_route, the client's fault).
//
// With the default limits.fault_status (soap) every one of them raises its stack's Fault
// exception carrying the cause: the status is 500, or 400 for a SOAP 1.2 env:Sender
// Fault, and X-Soapgw-Status holds the HTTP-semantic status. After a SIGHUP to
// fault_status: http the same calls get 503, 502 and 404: zeep still parses the Fault
// (it reads a Fault on any status), while suds, which reads one only on 500, reports a
// bare HTTP error: the case the soap default exists for.
func TestGatewayFaultsSOAPStacks(t *testing.T) {
	gfRequireStacks(t)
	t.Parallel()
	closed := freePort(t) // the upstream: nothing listens
	a := newPairAddrs(t)
	startGateway(t, a.OriginAdmin, originYAML(a, "http://"+closed, ""))

	path, dead := filepath.Join(t.TempDir(), "edge.yaml"), freePort(t)
	write := func(limits string) { // atomically, as config management tools do
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(gfEdgeYAML(a.EdgeAdmin, a.Edge, a.Tunnel, dead, limits)), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	}
	write("")
	// Not ready while peer "dead" has no tunnel: wait for /healthz, then for dc1's tunnel.
	edge := &gateway{proc: startProc(t, binary, "run", "--config", path, "--log-level", "debug"), admin: a.EdgeAdmin}
	require.Eventually(t, func() bool {
		code, _ := httpGet("http://" + a.EdgeAdmin + "/healthz")
		return code == 200 && metricSum(t, a.EdgeAdmin, "soapgw_tunnel_sessions", "peer=dc1") >= 1
	}, 15*time.Second, 20*time.Millisecond, "edge up with a tunnel to dc1")

	type target struct {
		path, cause   string
		status        int  // HTTP-semantic
		client        bool // the client's fault: soap:Client / env:Sender
		reasonContain string
	}
	targets := []target{
		{"/dead/", "origin_unreachable", 503, false, `origin "dead" unreachable`},
		{"/down/", "upstream_unreachable", 502, false, `upstream "svc"`},
		{"/nowhere/", "no_route", 404, true, "no route"},
	}
	stacks := []struct{ stack, version string }{{"zeep", "11"}, {"zeep", "12"}, {"suds", "11"}}
	var calls []string
	for _, tg := range targets {
		for _, s := range stacks {
			calls = append(calls, s.stack+":"+s.version+":http://"+a.Edge+tg.path)
		}
	}

	check := func(mode string) {
		t.Helper()
		results := gfCalls(t, calls)
		i := 0
		for _, tg := range targets {
			for _, s := range stacks {
				r := results[i]
				i++
				what := fmt.Sprintf("fault_status %s, %s: %+v", mode, r.Call, r)
				v12 := s.version == "12"
				require.Equal(t, frFaultLine(mode, tg.status, v12), r.Status, what)
				require.Equal(t, strconv.Itoa(tg.status), r.SoapgwStatus, what)
				require.Equal(t, tg.cause, r.SoapgwError, what)
				if s.stack == "suds" && mode == "http" {
					// suds reads a Fault on 500 only: any other status is a bare error.
					require.Equal(t, "http_error", r.Outcome, what)
					require.Contains(t, r.Message, strconv.Itoa(tg.status), what)
					continue
				}
				require.Equal(t, "fault", r.Outcome, "the stack must raise its Fault exception, not a transport error: %s", what)
				require.Equal(t, map[string]string{"zeep": "Fault", "suds": "WebFault"}[s.stack], r.Exception, what)
				code := map[bool]string{false: "soap:Server", true: "env:Receiver"}[v12]
				if tg.client {
					code = map[bool]string{false: "soap:Client", true: "env:Sender"}[v12]
				}
				require.Equal(t, code, r.Code, what)
				require.True(t, strings.HasPrefix(r.Message, "soapgw: "), what)
				require.Contains(t, r.Message, tg.reasonContain, "the faultstring names the cause: %s", what)
			}
		}
	}
	check("soap")

	// Reloaded live on SIGHUP: the next calls get the HTTP-semantic statuses.
	reloads := func() float64 {
		return metricSum(t, a.EdgeAdmin, "soapgw_reloads_total", "trigger=sighup", "result=ok")
	}
	before := reloads()
	write("limits:\n  fault_status: http\n")
	require.NoError(t, edge.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return reloads() > before }, 10*time.Second, 20*time.Millisecond)
	check("http")

	// The metrics count by HTTP-semantic status and fault code, the same in both modes:
	// each target was called 3 times per mode.
	for _, tg := range targets {
		up := "svc"
		if tg.cause == "no_route" {
			up = "none"
		}
		require.Equal(t, 6.0, metricSum(t, a.EdgeAdmin, "soapgw_exchanges_total", "role=edge", "upstream="+up, "code="+strconv.Itoa(tg.status), "outcome=gateway_error"), tg.cause)
		require.Equal(t, 6.0, metricSum(t, a.EdgeAdmin, "soapgw_gateway_errors_total", "role=edge", "cause="+tg.cause), tg.cause)
	}
	require.Zero(t, metricSum(t, a.EdgeAdmin, "soapgw_exchanges_total", "code=500"), "no exchange is counted under the status line")
	require.Zero(t, metricSum(t, a.EdgeAdmin, "soapgw_exchanges_total", "code=400"))
	require.Equal(t, 8.0, metricSum(t, a.EdgeAdmin, "soapgw_soap_faults_total", "source=gateway", "code=Server"), "zeep and suds over SOAP 1.1, 2 targets, 2 modes")
	require.Equal(t, 4.0, metricSum(t, a.EdgeAdmin, "soapgw_soap_faults_total", "source=gateway", "code=Receiver"))
	require.Equal(t, 4.0, metricSum(t, a.EdgeAdmin, "soapgw_soap_faults_total", "source=gateway", "code=Client"))
	require.Equal(t, 2.0, metricSum(t, a.EdgeAdmin, "soapgw_soap_faults_total", "source=gateway", "code=Sender"))
}
