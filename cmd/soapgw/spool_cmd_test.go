package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/ledger"
	"github.com/soapgw/soapgw/internal/spool"
)

// oneWayBody is the SOAP body of a one-way call carrying n.
func oneWayBody(n int) string {
	return `<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><Record xmlns="urn:example:audit"><n>` +
		strconv.Itoa(n) + `</n></Record></soap:Body></soap:Envelope>`
}

// spoolRequest builds a spooled message as the edge does: the tunnel request head with
// the message id as exchange id, then the body.
func spoolRequest(body string) func(id string) []byte {
	return func(id string) []byte {
		h := envelope.Request{
			ExchangeID: id, Upstream: "audit", Method: "POST", Target: "/audit/Record", ProtoMinor: 1,
			ContentLength: int64(len(body)),
			Header: httpwire.Header{
				{Name: "Host", Value: "audit.example"},
				{Name: "Content-Type", Value: "text/xml; charset=utf-8"},
				{Name: "SOAPAction", Value: `"urn:example:audit#Record"`},
				{Name: "Content-Length", Value: strconv.Itoa(len(body))},
			},
		}
		return append(h.Append(nil), body...)
	}
}

const refusedAnswer = "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/xml; charset=utf-8\r\nContent-Length: 42\r\n\r\n" +
	`<soap:Fault>invalid audit record</soap:Fault>`

// newTestSpool makes a spool with three messages (seq 1, 2, 3), seq 2 killed to a dead
// letter as the forwarder does when the server answers a Fault; the file is closed.
func newTestSpool(t *testing.T) (path string, ids []string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "edge-spool.db")
	sp, err := spool.Open(path, spool.Limits{})
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		m, err := sp.Put("dc1", "audit", spoolRequest(oneWayBody(i)))
		require.NoError(t, err)
		require.Equal(t, uint64(i), m.Seq)
		ids = append(ids, m.ID)
	}
	require.NoError(t, sp.Kill(2, "server answered 500 Internal Server Error (SOAP Fault soap:Client)", []byte(refusedAnswer)))
	require.NoError(t, sp.Close())
	return path, ids
}

// openSpool opens the spool the test made, to check what a command did.
func openSpool(t *testing.T, path string) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(path, spool.Limits{})
	require.NoError(t, err)
	return sp
}

func TestSpoolCommandInspects(t *testing.T) {
	path, ids := newTestSpool(t)

	code, out, stderr := runCLI(t, "spool", "stats", "--file", path)
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `(?m)^pending messages +2$`, out)
	require.Regexp(t, `(?m)^dead letters +1$`, out)
	require.Regexp(t, `(?m)^oldest +\d{4}-\d\d-\d\dT.*Z \(\d+s ago\)$`, out)

	code, out, stderr = runCLI(t, "spool", "stats", "--file", path, "--json")
	require.Equal(t, exitOK, code, stderr)
	var st spoolStatsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, 2, st.Messages)
	require.Equal(t, 1, st.DeadLetters)
	require.NotNil(t, st.Oldest)
	require.Positive(t, st.Bytes)
	require.True(t, strings.HasPrefix(ids[0], envelope.OneWayPrefix+st.SpoolID+"-"), "%s vs %s", ids[0], st.SpoolID)

	code, out, stderr = runCLI(t, "spool", "list", "--file", path)
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, `^SEQ +ID +PEER +UPSTREAM +ACCEPTED +SIZE +ACTION$`, lines[0])
	require.Regexp(t, `^1 +`+ids[0]+` +dc1 +audit +\S+Z +\d+ +urn:example:audit#Record$`, lines[1])
	require.Regexp(t, `^3 +`+ids[2]+` `, lines[2])
	require.NotContains(t, out, ids[1], "a dead letter is not pending")

	code, out, stderr = runCLI(t, "spool", "list", "--file", path, "--limit", "1", "--json")
	require.Equal(t, exitOK, code, stderr)
	var msgs []messageJSON
	require.NoError(t, json.Unmarshal([]byte(out), &msgs), out)
	require.Len(t, msgs, 1)
	require.Equal(t, messageJSON{Seq: 1, ID: ids[0], Peer: "dc1", Upstream: "audit", Accepted: msgs[0].Accepted, Size: msgs[0].Size,
		Method: "POST", Target: "/audit/Record", Action: "urn:example:audit#Record"}, msgs[0])
	require.Contains(t, stderr, "1 of 2 pending messages shown")

	code, out, stderr = runCLI(t, "spool", "dead", "--file", path)
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `(?m)^2 +`+ids[1]+` +\S+Z +server answered 500 Internal Server Error \(SOAP Fault soap:Client\)$`, out)

	code, out, stderr = runCLI(t, "spool", "dead", "--file", path, "--show", "2")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `(?m)^id +`+ids[1]+`$`, out)
	require.Contains(t, out, "POST /audit/Record HTTP/1.1\r\nHost: audit.example\r\n")
	require.Contains(t, out, oneWayBody(2), "the request's body")
	require.Contains(t, out, refusedAnswer, "the server's answer")

	code, out, stderr = runCLI(t, "spool", "dead", "--file", path, "--show", "2", "--json")
	require.Equal(t, exitOK, code, stderr)
	var show showJSON
	require.NoError(t, json.Unmarshal([]byte(out), &show), out)
	require.Equal(t, oneWayBody(2), *show.Body.Text)
	require.Equal(t, refusedAnswer, *show.Answer.Text)
	require.Contains(t, show.Header, [2]string{"SOAPAction", `"urn:example:audit#Record"`})

	code, _, stderr = runCLI(t, "spool", "dead", "--file", path, "--show", "3")
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr, "no dead letter with seq 3")

	// Nothing above changed the file.
	sp := openSpool(t, path)
	st2 := sp.Stats()
	require.NoError(t, sp.Close())
	require.Equal(t, 2, st2.Messages)
	require.Equal(t, 1, st2.Dead)
}

func TestSpoolCommandRequeuesPurgesExports(t *testing.T) {
	path, ids := newTestSpool(t)

	code, out, stderr := runCLI(t, "spool", "requeue", "--file", path, "2")
	require.Equal(t, exitOK, code, stderr)
	sp := openSpool(t, path)
	st := sp.Stats()
	require.Equal(t, 3, st.Messages, "the dead letter is pending again")
	require.Zero(t, st.Dead)
	m, err := sp.Get(4)
	require.NoError(t, err, "requeued under a new seq")
	require.Contains(t, out, "dead letter 2 ("+ids[1]+") requeued as 4 ("+m.ID+")")
	req, body, err := splitMessage(m.Data)
	require.NoError(t, err)
	require.Equal(t, m.ID, req.ExchangeID, "the message travels with its new id")
	require.Equal(t, oneWayBody(2), string(body))

	// Two dead letters, then purge one by seq and the other with --all.
	require.NoError(t, sp.Kill(1, "delivery_in_doubt: …", nil))
	require.NoError(t, sp.Kill(3, "server answered 400 Bad Request", nil))
	require.NoError(t, sp.Close())
	code, out, stderr = runCLI(t, "spool", "purge", "--file", path, "1", "99")
	require.Equal(t, exitFailure, code, "seq 99 is no dead letter")
	require.Contains(t, out, "dead letter 1 purged")
	require.Contains(t, stderr, "no dead letter with seq 99")
	code, out, stderr = runCLI(t, "spool", "purge", "--file", path, "--all", "--json")
	require.Equal(t, exitOK, code, stderr)
	require.JSONEq(t, `{"purged": [3]}`, out)
	sp = openSpool(t, path)
	st = sp.Stats()
	require.NoError(t, sp.Close())
	require.Equal(t, 1, st.Messages)
	require.Zero(t, st.Dead)

	code, _, stderr = runCLI(t, "spool", "purge", "--file", path)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "SEQs or --all")

	dir := filepath.Join(t.TempDir(), "out")
	code, out, stderr = runCLI(t, "spool", "export", "--file", path, "--dir", dir)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "wrote 1 pending messages")
	data, err := os.ReadFile(filepath.Join(dir, "4.http"))
	require.NoError(t, err)
	body2 := oneWayBody(2)
	require.Equal(t, "POST /audit/Record HTTP/1.1\r\nHost: audit.example\r\nContent-Type: text/xml; charset=utf-8\r\n"+
		"SOAPAction: \"urn:example:audit#Record\"\r\nContent-Length: "+strconv.Itoa(len(body2))+"\r\n\r\n"+body2, string(data))
	var index []exportedJSON
	data, err = os.ReadFile(filepath.Join(dir, "messages.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &index))
	require.Len(t, index, 1)
	require.Equal(t, "4.http", index[0].File)
	require.Equal(t, uint64(4), index[0].Seq)
	code, _, stderr = runCLI(t, "spool", "export", "--file", path, "--dir", dir)
	require.Equal(t, exitFailure, code, "an export never overwrites")
	require.Contains(t, stderr, "exists")

	// Exported, the last pending message can be dropped.
	code, out, stderr = runCLI(t, "spool", "drop", "--file", path, "4", "5")
	require.Equal(t, exitFailure, code, "seq 5 is not pending")
	require.Contains(t, out, "pending message 4 dropped")
	require.Contains(t, stderr, "no pending message with seq 5")
	sp = openSpool(t, path)
	st = sp.Stats()
	require.NoError(t, sp.Close())
	require.Zero(t, st.Messages)
}

func TestSpoolCommandFileErrors(t *testing.T) {
	path, _ := newTestSpool(t)

	code, _, stderr := runCLI(t, "spool", "stats")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "--file FILE or --config FILE is required")

	missing := filepath.Join(t.TempDir(), "nope.db")
	code, _, stderr = runCLI(t, "spool", "stats", "--file", missing)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "does not exist")
	_, err := os.Stat(missing)
	require.ErrorIs(t, err, os.ErrNotExist, "a missing spool is not created")

	code, _, stderr = runCLI(t, "spool", "requeue", "--file", path, "x")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `"x" is not a message seq`)

	// A running edge holds the file: the command says so instead of waiting.
	sp := openSpool(t, path)
	code, _, stderr = runCLI(t, "spool", "stats", "--file", path)
	require.NoError(t, sp.Close())
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr, "locked by a running edge")
	require.Contains(t, stderr, "soapgw_oneway_")
	require.Contains(t, stderr, "stop the edge")

	// --config reads edge.one_way.spool, ${VAR}s expanded.
	cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(`node: t
edge:
  listeners: [{name: soap, listen: "127.0.0.1:0"}]
  peers: [{name: dc1, address: "127.0.0.1:9", insecure: true}]
  routes: [{peer: dc1, upstream: audit}]
  one_way:
    spool: ${TEST_SPOOL}
    operations: [{action: "urn:example:audit#Record"}]
`), 0o600))
	t.Setenv("TEST_SPOOL", path)
	code, out, stderr := runCLI(t, "spool", "stats", "--config", cfgPath)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, path)
	require.Regexp(t, `(?m)^pending messages +2$`, out)

	code, _, stderr = runCLI(t, "spool", "ledger", "--config", cfgPath)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "configures no origin.one_way.ledger")
}

func TestSpoolLedgerCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "origin-ledger.db")
	l, err := ledger.Open(path, 0)
	require.NoError(t, err)
	for _, id := range []string{"ow.a-1", "ow.a-2", "ow.a-3", "ow.a-4"} {
		rec, err := l.Begin(id, false)
		require.NoError(t, err)
		require.Equal(t, ledger.Absent, rec.State)
	}
	for _, id := range []string{"ow.a-1", "ow.a-2", "ow.a-3"} {
		require.NoError(t, l.MarkSent(id))
	}
	require.NoError(t, l.Done("ow.a-1", 202))
	require.NoError(t, l.Done("ow.a-3", 500))
	l.Abandon("ow.a-2") // the whole request went to the server, no answer came back
	// ow.a-4 was claimed only: the origin died before the server had it whole, and a
	// claim is not written (package ledger), so nothing of it is on disk.
	require.NoError(t, l.Close())

	code, out, stderr := runCLI(t, "spool", "ledger", "--file", path)
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `(?m)^ids +3$`, out)
	require.Regexp(t, `(?m)^done +2 +\(`, out)
	require.Regexp(t, `(?m)^in doubt +1 +\(`, out)
	require.Regexp(t, `(?m)^sending +0 +\(`, out)

	code, out, stderr = runCLI(t, "spool", "ledger", "in-doubt", "--file", path)
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `(?m)^ow\.a-2 +\S+Z$`, out)
	require.NotContains(t, out, "ow.a-1")
	require.NotContains(t, out, "ow.a-4", "never sent whole: not in doubt")

	code, out, stderr = runCLI(t, "spool", "ledger", "--file", path, "in-doubt", "--json")
	require.Equal(t, exitOK, code, stderr)
	var ids []inDoubtJSON
	require.NoError(t, json.Unmarshal([]byte(out), &ids), out)
	require.Len(t, ids, 1)
	require.Equal(t, "ow.a-2", ids[0].ID)

	code, out, stderr = runCLI(t, "spool", "ledger", "get", "--file", path, "ow.a-1", "ow.a-2", "ow.a-4", "ow.b-9")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `(?m)^ow\.a-1 +done +\S+Z +202$`, out)
	require.Regexp(t, `(?m)^ow\.a-2 +in_doubt +\S+Z +-$`, out)
	require.Regexp(t, `(?m)^ow\.a-4 +absent +- +-$`, out)
	require.Regexp(t, `(?m)^ow\.b-9 +absent +- +-$`, out)

	// The command read the ledger without changing it: the id is still refused as in doubt.
	l, err = ledger.Open(path, 0)
	require.NoError(t, err)
	rec, err := l.Begin("ow.a-2", false)
	require.NoError(t, err)
	require.Equal(t, ledger.InDoubt, rec.State)
	code, _, stderr = runCLI(t, "spool", "ledger", "--file", path)
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr, "locked by a running origin")
	require.NoError(t, l.Close())
}
