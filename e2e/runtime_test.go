package e2e

import (
	"os"
	"path/filepath"
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
	}
}

// An operator who sets schedtrace in GODEBUG keeps it: no re-execution, and the startup
// log says the runtime's default is in use.
func TestGatewayKeepsOperatorsSchedtrace(t *testing.T) {
	world := frStartWorld(t)
	a := newPairAddrs(t)
	path := filepath.Join(t.TempDir(), "origin.yaml")
	require.NoError(t, os.WriteFile(path, []byte(originYAML(a, world.URL(), "")), 0o600))
	p := startProcEnv(t, []string{"GODEBUG=gctrace=0,schedtrace=0"}, binary, "run", "--config", path)
	origin := &gateway{proc: p, admin: a.OriginAdmin}
	origin.waitReady(t, 10*time.Second)
	edge := startGateway(t, a.EdgeAdmin, edgeYAML(a, ""))
	frNormalCall(t, a.Edge, "/echo/sysmon-operator")

	godebug, ok := processGODEBUG(t, p.cmd.Process.Pid)
	require.True(t, ok)
	require.Equal(t, "gctrace=0,schedtrace=0", godebug)
	require.Contains(t, p.out.String(), `sysmon="runtime default (GODEBUG sets schedtrace)"`)
	require.Contains(t, edge.out.String(), "sysmon=quiet")
}
