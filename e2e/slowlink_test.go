package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/bench"
	"github.com/soapgw/soapgw/internal/testutil"
)

// TestSlowLinkLargeMessages (issue 17): 24 clients calling a document service whose
// responses are ~200 KB of incompressible bytes (base64 of random data), through the
// pair with the identity codec, across the link emulator's 3g profile (1 Mbit/s,
// 150 ms RTT, 1 % loss): 24 answers of 200 KB (4.8 MB, about 40 s of link) queue on the
// tunnel connections, more than the link carries in the 30 s write timeout. Every call must succeed, each
// answer byte for byte (the bench checks every response). The tunnel used to fail such
// calls when one deadline covered its whole send queue. (gprs and 2 MB responses take
// minutes per run: docs/benchmarks.md has the command.)
func TestSlowLinkLargeMessages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	testutil.Needs(t, "the link emulator (root, ip netns, /dev/net/tun)", bench.ProbeEmulator(ctx), "run as root with iproute2 (make test-deps)")
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, binary, "bench", "--profiles", "3g", "--scenarios", "attachment-200k",
		"--concurrency", "24", "--calls", "24", "--configs", "soapgw/identity", "--run-timeout", "3m", "--out", out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	res, err := bench.ReadResults(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	require.Len(t, res.Runs, 1)
	r := res.Runs[0]
	t.Logf("3g attachment-200k, 24 clients: %d/%d ok, %d errors, %d mismatches, p50 %.0f ms, total %.1f s",
		r.OK, r.Planned, r.Errors, r.Mismatches, r.Latency.P50, r.TotalMS/1000)
	require.Equal(t, bench.StatusOK, r.Status, r.Reason)
	require.Equal(t, 24, r.OK)
	require.Zero(t, r.Errors)
	require.Zero(t, r.Mismatches)
}
