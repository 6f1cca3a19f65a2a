package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// One-way messaging with real SOAP stacks: a zeep client calls spyne's one-way operation
// notify (a WSDL operation with an input only) through an edge that marks it one-way.
// See soapstack/README.md.

// owzStartServer starts soapstack/server.py recording every notify(text) it receives in
// record, and returns its port once it printed READY.
func owzStartServer(t *testing.T, record string) string {
	t.Helper()
	p := startProc(t, zpPython, filepath.Join("soapstack", "server.py"),
		"--host", "127.0.0.1", "--port", "0", "--quiet", "--record", record)
	owzPoll(t, 15*time.Second, func() bool {
		select {
		case <-p.done:
			t.Fatalf("server.py exited before READY: %v\n%s", p.err, p.out.String())
		default:
		}
		return zpReady.MatchString(p.out.String())
	}, func() string { return "server.py not READY:\n" + p.out.String() })
	return zpReady.FindStringSubmatch(p.out.String())[1]
}

// owzPoll checks cond every 20 ms, in the test's goroutine, until it holds; after within
// the test fails with what().
func owzPoll(t *testing.T, within time.Duration, cond func() bool, what func() string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("after %s: %s", within, what())
		}
	}
}

// owzReport is what soapstack/onewayclient.py prints.
type owzReport struct {
	NotifyOutputInWSDL bool `json:"notify_output_in_wsdl"`
	Notify             []struct {
		Text      string  `json:"text"`
		Result    *string `json:"result"`
		Status    int     `json:"status"`
		BodyLen   int     `json:"body_len"`
		MessageID *string `json:"message_id"`
	} `json:"notify"`
	Echo struct {
		Text   string `json:"text"`
		Result string `json:"result"`
		Status int    `json:"status"`
	} `json:"echo"`
}

// owzRecorded reads the server's record: one JSON string a line.
func owzRecorded(t *testing.T, record string) []string {
	t.Helper()
	b, err := os.ReadFile(record)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var got []string
	for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var s string
		require.NoError(t, json.Unmarshal(line, &s), "record line %q", line)
		got = append(got, s)
	}
	return got
}

// TestOneWayZeepSpyne: zeep calls spyne's one-way operation notify 50 times, each with
// a distinct text, through a pair whose edge marks notify one-way (by the operation, the
// first element in the Body). zeep takes each of the edge's 202s with an empty body as
// success (None); spyne receives every text exactly once, as sent. A request-response
// operation (echo) through the same pair stays synchronous and returns spyne's answer.
//
// The edge learns which operation is one-way either from its configuration (operation:
// notify) or from spyne's own WSDL, saved to a file (wsdl: FILE).
func TestOneWayZeepSpyne(t *testing.T) {
	zpRequireStack(t)
	for _, how := range []string{"operation", "wsdl"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			oneWayZeepSpyne(t, how)
		})
	}
}

func oneWayZeepSpyne(t *testing.T, how string) {
	const calls = 50
	dir := t.TempDir()
	record := filepath.Join(dir, "notify.jsonl")
	serverURL := "http://127.0.0.1:" + owzStartServer(t, record)
	operations := "      - operation: notify\n"
	if how == "wsdl" {
		resp, err := http.Get(serverURL + "/?wsdl")
		require.NoError(t, err)
		wsdlDoc, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		file := filepath.Join(dir, "service.wsdl")
		require.NoError(t, os.WriteFile(file, wsdlDoc, 0o600))
		operations = "      - wsdl: " + file + "\n"
	}

	a := newPairAddrs(t)
	startGateway(t, a.OriginAdmin, originYAML(a, serverURL,
		fmt.Sprintf("  one_way:\n    ledger: %s\n", filepath.Join(dir, "origin-ledger.db"))))
	startGateway(t, a.EdgeAdmin, edgeYAML(a, fmt.Sprintf(`  one_way:
    spool: %s
    retry_max: 1s
    operations:
%s`, filepath.Join(dir, "edge-spool.db"), operations)))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, zpPython, filepath.Join("soapstack", "onewayclient.py"),
		"--wsdl", "http://"+a.Edge+"/?wsdl", "--calls", fmt.Sprint(calls), "--timeout", "20")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "onewayclient.py failed\nstderr:\n%s\nstdout:\n%s", stderr.String(), stdout.String())
	var rep owzReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), "onewayclient.py output:\n%s", stdout.String())

	// The WSDL (fetched through the pair) declares notify one-way, and every call was
	// acknowledged by the edge, not answered by spyne (which says 200 with an envelope):
	// 202, no body, a spool message id; zeep returned None.
	require.False(t, rep.NotifyOutputInWSDL, "spyne's WSDL gives notify an output")
	require.Len(t, rep.Notify, calls)
	sent := make([]string, 0, calls)
	ids := map[string]bool{}
	for i, n := range rep.Notify {
		require.Nil(t, n.Result, "call %d: zeep returned %v, want None", i, n.Result)
		require.Equal(t, 202, n.Status, "call %d", i)
		require.Zero(t, n.BodyLen, "call %d: the acknowledgement has a body", i)
		require.NotNil(t, n.MessageID, "call %d: no X-Soapgw-Message-Id, so not spooled", i)
		require.False(t, ids[*n.MessageID], "call %d: message id %s twice", i, *n.MessageID)
		ids[*n.MessageID] = true
		sent = append(sent, n.Text)
	}

	// echo is synchronous: spyne's real answer, not an acknowledgement.
	require.Equal(t, 200, rep.Echo.Status)
	require.Equal(t, rep.Echo.Text, rep.Echo.Result)
	require.Equal(t, float64(calls), metricSum(t, a.EdgeAdmin, "soapgw_oneway_accepted_total"),
		"the edge spooled something other than the notify calls")

	// Every message delivered (the edge's forwarder says so, and the spool is empty),
	// then spyne's record holds each text exactly once: no loss, no duplicate.
	delivered := func() float64 {
		return metricSum(t, a.EdgeAdmin, "soapgw_oneway_deliveries_total", "result=delivered")
	}
	owzPoll(t, 60*time.Second, func() bool {
		return delivered() >= calls && metricSum(t, a.EdgeAdmin, "soapgw_oneway_spool", "what=messages") == 0
	}, func() string {
		return fmt.Sprintf("the edge did not deliver the %d messages (delivered %.0f)", calls, delivered())
	})
	for _, r := range []string{"duplicate", "refused", "in_doubt"} {
		require.Zero(t, metricSum(t, a.EdgeAdmin, "soapgw_oneway_deliveries_total", "result="+r), "deliveries %s", r)
	}
	require.Zero(t, metricSum(t, a.EdgeAdmin, "soapgw_oneway_spool", "what=dead_letters"))
	require.Equal(t, float64(calls), delivered())
	require.Equal(t, float64(calls), metricSum(t, a.OriginAdmin, "soapgw_origin_oneway_total", "result=delivered"),
		"the origin's ledger did not record each message delivered once")
	got := owzRecorded(t, record)
	sort.Strings(got)
	sort.Strings(sent)
	require.Equal(t, sent, got, "the texts spyne received differ from those zeep sent")
	t.Logf("%d one-way calls: zeep got 202 with no body and returned None for each; spyne received each text once; retries %.0f; echo answered synchronously",
		calls, metricSum(t, a.EdgeAdmin, "soapgw_oneway_deliveries_total", "result=retry"))
}
