package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/testutil"
)

// Real SOAP stacks: a zeep client calls a spyne server directly and through a pair; the
// two canonical JSON outputs must be identical. See soapstack/README.md.

const zpPython = "/usr/bin/python3"

var zpReady = regexp.MustCompile(`(?m)^READY ([0-9]+)$`)

// zpRequireStack skips the test when the Debian interpreter lacks zeep or spyne.
func zpRequireStack(t *testing.T) {
	t.Helper()
	out, err := exec.Command(zpPython, "-c", "import zeep, spyne").CombinedOutput()
	if err != nil {
		lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
		err = fmt.Errorf("%s cannot import zeep and spyne: %w: %s", zpPython, err, lines[len(lines)-1])
	}
	testutil.Needs(t, "zeep and spyne", err, "make test-deps (python3-zeep python3-spyne)")
}

// zpStartServer starts soapstack/server.py and returns its port once it printed READY.
func zpStartServer(t *testing.T) string {
	t.Helper()
	p := startProc(t, zpPython, filepath.Join("soapstack", "server.py"), "--host", "127.0.0.1", "--port", "0", "--quiet")
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if m := zpReady.FindStringSubmatch(p.out.String()); m != nil {
			return m[1]
		}
		select {
		case <-p.done:
			t.Fatalf("server.py exited before READY: %v\n%s", p.err, p.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("server.py not READY within 15s:\n%s", p.out.String())
	return ""
}

// zpRunClient runs soapstack/client.py against wsdlURL and returns its JSON output.
func zpRunClient(t *testing.T, wsdlURL string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, zpPython, filepath.Join("soapstack", "client.py"), "--wsdl", wsdlURL, "--timeout", "20")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "client.py --wsdl %s failed\nstderr:\n%s\nstdout:\n%s", wsdlURL, stderr.String(), stdout.String())
	return stdout.Bytes()
}

// TestZeepThroughPair: zeep's results through the pair equal its results direct against
// spyne: WSDL download, non-ASCII text, a 100 KB string, 1000 calendar entries, a SOAP
// Fault (HTTP 500).
func TestZeepThroughPair(t *testing.T) {
	zpRequireStack(t)
	t.Parallel()
	port := zpStartServer(t)
	serverURL := "http://127.0.0.1:" + port
	a, _, _ := startPair(t, serverURL)
	zpConformance(t, serverURL, a.Edge)
}

// zpConformance runs the zeep client direct against spyne at serverURL and through the
// edge at edgeAddr, checks that the direct run exercised what the conformance sequence
// claims, and that both outputs are identical byte for byte.
func zpConformance(t *testing.T, serverURL, edgeAddr string) {
	t.Helper()
	direct := zpRunClient(t, serverURL+"/?wsdl")
	viaGW := zpRunClient(t, "http://"+edgeAddr+"/?wsdl")

	// The direct run must itself exercise what the test claims, or equal outputs prove
	// nothing.
	var out struct {
		Results map[string]map[string]json.RawMessage `json:"results"`
	}
	require.NoError(t, json.Unmarshal(direct, &out), "direct output:\n%s", direct)
	r := out.Results
	require.JSONEq(t, `{"code": "soap11env:Client.Rejected", "message": "soapgw e2e"}`, string(r["fail"]["fault"]))
	require.JSONEq(t, `"Grüße, 東京, Ελλάδα, emoji 🚀"`, string(r["echo_non_ascii"]["result"]))
	require.Contains(t, string(r["echo_100k"]["result"]), `"equals_input": true`)
	var entries []json.RawMessage
	require.NoError(t, json.Unmarshal(r["calendar_entries"]["result"], &entries))
	require.Len(t, entries, 1000)

	require.Equal(t, string(direct), string(viaGW), "zeep output through the pair differs from the direct output")
}
