package bench

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseHWM(t *testing.T) {
	n, err := parseHWM([]byte("Name:\tx\nVmPeak:\t  100 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1 kB\n"))
	require.NoError(t, err)
	require.EqualValues(t, 2048*1024, n)
	_, err = parseHWM([]byte("Name:\tx\n"))
	require.Error(t, err)
}

func TestProcTreeUsageAndStop(t *testing.T) {
	// A shell with a child, like an nginx master with its worker.
	cmd := exec.Command("sh", "-c", "sleep 30 & i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; wait")
	p, err := startProc("tree", "client", cmd, filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	t.Cleanup(func() { p.Stop(time.Second) })
	require.Eventually(t, func() bool { return len(processTree(p.PID())) >= 2 }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		u, err := p.Sample()
		return err == nil && u.Processes >= 2 && u.PeakRSS > 0 && u.CPUSeconds > 0
	}, 10*time.Second, 20*time.Millisecond)
	_ = p.ResetPeak() // may be refused without privileges; must not fail
	done, _ := p.Exited()
	require.False(t, done)

	tree := processTree(p.PID())
	start := time.Now()
	p.Stop(2 * time.Second)
	require.Less(t, time.Since(start), 5*time.Second)
	done, _ = p.Exited()
	require.True(t, done)
	for _, pid := range tree {
		require.Eventually(t, func() bool {
			f, err := statFields(pid)
			return err != nil || f[0] == "Z" // gone, or dead and not yet reaped by init
		}, 5*time.Second, 10*time.Millisecond, "process %d of the group outlived Stop", pid)
	}
}

func TestProcLogTail(t *testing.T) {
	p, err := startProc("echo", "server", exec.Command("sh", "-c", "echo first; echo second"), filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { d, _ := p.Exited(); return d }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, "first\nsecond", p.LogTail(100))
	require.Equal(t, "second", p.LogTail(8))
}
