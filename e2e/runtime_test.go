package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// quietSysmon is the GODEBUG setting `soapgw run` re-executes itself with
// (cmd/soapgw/sysmon.go).
const quietSysmon = "schedtrace=2147483647"

// processGODEBUG reads the GODEBUG a running process was started (or re-executed) with.
func processGODEBUG(t *testing.T, pid int) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	require.NoError(t, err)
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			return v, true
		}
	}
	return "", false
}

// A gateway runs with the runtime's system monitor kept out of its deep sleep (a CPU cost
// on every exchange otherwise): `soapgw run` re-executes itself once, same PID, with the
// setting added to GODEBUG, and the pair carries calls as before.
func TestGatewayRunsWithQuietSysmon(t *testing.T) {
	world := frStartWorld(t)
	a, origin, edge := startPair(t, world.URL())
	frNormalCall(t, a.Edge, "/echo/sysmon")
	for _, g := range []*gateway{origin, edge} {
		godebug, ok := processGODEBUG(t, g.cmd.Process.Pid)
		require.True(t, ok, "no GODEBUG in the environment of pid %d", g.cmd.Process.Pid)
		require.Contains(t, strings.Split(godebug, ","), quietSysmon)
		require.Contains(t, g.out.String(), "sysmon=quiet")
		// The runtime's Ps follow the load (internal/procs): between one and the CPUs.
		if runtime.NumCPU() > 1 {
			require.Contains(t, g.out.String(), fmt.Sprintf(`procs="adaptive 1-%d"`, runtime.NumCPU()))
		}
		ps := gomaxprocs(t, g.admin)
		require.True(t, ps >= 1 && ps <= runtime.NumCPU(), "go_sched_gomaxprocs_threads %d", ps)
		// The collector has a headroom (internal/gcheadroom): with a live heap of a few
		// MB, a percentage above the runtime's default.
		require.Contains(t, g.out.String(), `gc="headroom 16 MiB"`)
		require.Greater(t, runtimeGauge(t, g.admin, "go_gc_gogc_percent"), 100)
	}
}

// gomaxprocs reads the runtime's current GOMAXPROCS from a gateway's /metrics.
func gomaxprocs(t *testing.T, admin string) int {
	t.Helper()
	return runtimeGauge(t, admin, "go_sched_gomaxprocs_threads")
}

// runtimeGauge reads a gauge without labels from a gateway's /metrics.
func runtimeGauge(t *testing.T, admin, name string) int {
	t.Helper()
	code, m := httpGet("http://" + admin + "/metrics")
	require.Equal(t, 200, code)
	for _, line := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return int(n)
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// An operator who sets schedtrace in GODEBUG keeps it: no re-execution, and the startup
// log says the runtime's default is in use. GOMAXPROCS and GOGC set by the operator are
// kept too.
func TestGatewayKeepsOperatorsSchedtrace(t *testing.T) {
	world := frStartWorld(t)
	a := newPairAddrs(t)
	path := filepath.Join(t.TempDir(), "origin.yaml")
	require.NoError(t, os.WriteFile(path, []byte(originYAML(a, world.URL(), "")), 0o600))
	p := startProcEnv(t, []string{"GODEBUG=gctrace=0,schedtrace=0", "GOMAXPROCS=2", "GOGC=150"}, binary, "run", "--config", path)
	origin := &gateway{proc: p, admin: a.OriginAdmin}
	origin.waitReady(t, 10*time.Second)
	edge := startGateway(t, a.EdgeAdmin, edgeYAML(a, ""))
	frNormalCall(t, a.Edge, "/echo/sysmon-operator")

	godebug, ok := processGODEBUG(t, p.cmd.Process.Pid)
	require.True(t, ok)
	require.Equal(t, "gctrace=0,schedtrace=0", godebug)
	require.Contains(t, p.out.String(), `sysmon="runtime default (GODEBUG sets schedtrace)"`)
	require.Contains(t, p.out.String(), `procs="GOMAXPROCS=2"`)
	require.Equal(t, 2, gomaxprocs(t, a.OriginAdmin))
	require.Contains(t, p.out.String(), `gc="GOGC=150"`)
	require.Equal(t, 150, runtimeGauge(t, a.OriginAdmin, "go_gc_gogc_percent"))
	require.Contains(t, edge.out.String(), "sysmon=quiet")
}
