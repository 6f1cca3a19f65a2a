package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReloadRoutesAndUpstreams: SIGHUP applies new routes at the edge and new or changed
// upstreams at the origin while byte-checked calls run, with 0 failed calls; a file that
// does not validate, or that changes what needs a restart, is refused with its file:line
// and the running configuration keeps serving.
func TestReloadRoutesAndUpstreams(t *testing.T) {
	echo := func(tag string) func(r *recordedRequest) []byte {
		return func(r *recordedRequest) []byte {
			return soapResponse(200, "OK", [][2]string{{"Content-Type", "text/xml"}}, []byte("<"+tag+">"+string(r.Body)+"</"+tag+">"))
		}
	}
	a, b := startRecordingServer(t, echo("a")), startRecordingServer(t, echo("b"))
	addrs := newPairAddrs(t)
	dir := t.TempDir()
	originPath, edgePath := filepath.Join(dir, "origin.yaml"), filepath.Join(dir, "edge.yaml")
	write := func(path, yml string) { // atomically, as config management tools do
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(yml), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	}
	write(originPath, originYAML(addrs, a.URL(), ""))
	write(edgePath, edgeYAML(addrs, ""))
	origin := &gateway{proc: startProc(t, binary, "run", "--config", originPath, "--log-level", "debug"), admin: addrs.OriginAdmin}
	origin.waitReady(t, 10*time.Second)
	edge := &gateway{proc: startProc(t, binary, "run", "--config", edgePath, "--log-level", "debug"), admin: addrs.EdgeAdmin}
	edge.waitReady(t, 10*time.Second)

	// call makes one exchange on a new connection and returns the upstream's tag.
	call := func(path, body string) (string, error) {
		req := "POST " + path + " HTTP/1.0\r\nHost: x\r\nContent-Type: text/xml\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		resp := string(rawExchange(t, addrs.Edge, []byte(req), 10*time.Second))
		for _, tag := range []string{"a", "b"} {
			if strings.HasPrefix(resp, "HTTP/1.0 200 OK\r\n") && strings.HasSuffix(resp, "\r\n\r\n<"+tag+">"+body+"</"+tag+">") {
				return tag, nil
			}
		}
		return "", fmt.Errorf("call %s: %q", path, resp)
	}

	// Load: 4 clients calling /svc/ until stopped (bounded: at most 20 s).
	var stop atomic.Bool
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(20 * time.Second)
			for i := 0; !stop.Load() && time.Now().Before(deadline); i++ {
				if _, err := call("/svc/", fmt.Sprintf("<load c=%q i=%q/>", strconv.Itoa(c), strconv.Itoa(i))); err != nil {
					failed.Add(1)
					t.Log(err)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	reloaded := func(g *gateway, result string) float64 {
		return metricSum(t, g.admin, "soapgw_reloads_total", "trigger=sighup", "result="+result)
	}
	hup := func(g *gateway, result string) {
		t.Helper()
		before := reloaded(g, result)
		require.NoError(t, g.cmd.Process.Signal(syscall.SIGHUP))
		require.Eventually(t, func() bool { return reloaded(g, result) > before }, 10*time.Second, 20*time.Millisecond)
	}

	// 1. The origin gains upstream "v2" (server b); the edge gains a route /v2/ to it.
	write(originPath, originYAML(addrs, a.URL(), fmt.Sprintf("    - name: v2\n      url: %s\n", b.URL())))
	hup(origin, "ok")
	write(edgePath, edgeYAMLRoutes(addrs, "    - path_prefix: /v2/\n      peer: dc1\n      upstream: v2\n", ""))
	hup(edge, "ok")
	tag, err := call("/v2/x", "<v2/>")
	require.NoError(t, err)
	require.Equal(t, "b", tag, "the new route reaches the new upstream")

	// 2. The origin's "svc" moves to server b: calls keep succeeding, now answered by b.
	write(originPath, originYAML(addrs, b.URL(), fmt.Sprintf("    - name: v2\n      url: %s\n", b.URL())))
	hup(origin, "ok")
	tag, err = call("/svc/moved", "<moved/>")
	require.NoError(t, err)
	require.Equal(t, "b", tag, "the changed upstream is used for new exchanges")

	// 3. Refused: a file that does not parse, and one that changes max_concurrent_exchanges.
	write(edgePath, edgeYAML(addrs, "limits:\n  exchange_timout: 5s\n"))
	hup(edge, "error")
	require.Eventually(t, func() bool {
		return strings.Contains(edge.out.String(), "SIGHUP: configuration refused") && strings.Contains(edge.out.String(), "edge.yaml:")
	}, 5*time.Second, 20*time.Millisecond, "the refusal names file:line")
	write(edgePath, edgeYAML(addrs, "limits:\n  max_concurrent_exchanges: 7\n"))
	hup(edge, "error")
	require.Contains(t, edge.out.String(), "needs a restart; nothing was reloaded")
	tag, err = call("/v2/still", "<still/>")
	require.NoError(t, err, "the running routes stay after a refused reload")
	require.Equal(t, "b", tag)

	// 4. A change that needs a restart is accepted for the rest and named.
	write(edgePath, strings.Replace(edgeYAMLRoutes(addrs, "    - path_prefix: /v2/\n      peer: dc1\n      upstream: v2\n", ""), "connections: 2", "connections: 3", 1))
	hup(edge, "ok")
	require.Contains(t, edge.out.String(), "these changes need a restart")

	// Let the load run on a while with the new configuration.
	after := ok.Load()
	require.Eventually(t, func() bool { return ok.Load() > after+200 || failed.Load() > 0 }, 15*time.Second, 10*time.Millisecond)
	stop.Store(true)
	wg.Wait()
	require.Zero(t, failed.Load(), "calls failed during reloads")
	require.Positive(t, ok.Load())
	t.Logf("%d byte-checked calls during 4 reloads and 2 refused ones, 0 failed", ok.Load())
}
