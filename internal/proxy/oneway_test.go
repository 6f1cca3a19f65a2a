package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/ledger"
	"github.com/soapgw/soapgw/internal/spool"
)

// notifyRequest is a SOAP 1.1 one-way call (SOAPAction urn:Notify) carrying n.
func notifyRequest(n int) string {
	body := `<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><Notify xmlns="urn:x"><n>` +
		strconv.Itoa(n) + `</n></Notify></soap:Body></soap:Envelope>`
	return "POST /svc HTTP/1.1\r\nHost: svc.example\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:Notify\"\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

func accepted202() respondFunc {
	return func(int, upstreamReq) ([]byte, bool) {
		return []byte("HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"), false
	}
}

type oneWayEnv struct {
	*testEnv
	up     *fakeUpstream
	spool  *spool.Spool
	ledger *ledger.Ledger
}

func newOneWayEnv(t *testing.T, respond respondFunc, adjust func(*OneWayConfig, *envConfig)) *oneWayEnv {
	t.Helper()
	dir := t.TempDir()
	sp, err := spool.Open(filepath.Join(dir, "spool.db"), spool.Limits{})
	require.NoError(t, err)
	led, err := ledger.Open(filepath.Join(dir, "ledger.db"), 0)
	require.NoError(t, err)
	up := newUpstream(t, respond)
	ow := &OneWayConfig{Spool: sp, Operations: []OneWayOperation{{Action: "urn:Notify"}}, RetryMax: 200 * time.Millisecond}
	cfg := envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr(), PoolSize: 4}}, OneWay: ow, Ledger: led}
	if adjust != nil {
		adjust(ow, &cfg)
	}
	// The caller defers closeStores: it stops the edge before the files close.
	return &oneWayEnv{testEnv: newEnv(t, cfg), up: up, spool: sp, ledger: led}
}

// waitFor polls cond until it holds or the test deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 2*testDeadline, 5*time.Millisecond, what)
}

func TestOneWayAcknowledgesAtOnceAndDeliversOnce(t *testing.T) {
	release := make(chan struct{})
	env := newOneWayEnv(t, func(n int, r upstreamReq) ([]byte, bool) {
		<-release // the server is slow: the clients must not wait for it
		return accepted202()(n, r)
	}, nil)
	defer closeStores(t, env)
	c := env.dial()
	const n = 20
	ids := map[string]bool{}
	for i := range n {
		c.send(notifyRequest(i))
		resp, body := c.read("POST")
		require.Equal(t, 202, resp.StatusCode)
		require.Empty(t, body)
		id := resp.Header.Get("X-Soapgw-Message-Id")
		require.True(t, envelope.IsOneWay(id), id)
		ids[id] = true
	}
	require.Len(t, ids, n)
	require.Equal(t, n, env.spool.Stats().Messages, "acknowledged before the server answered any")
	close(release)
	waitFor(t, "every message delivered", func() bool { return env.spool.Stats().Messages == 0 })
	// Each delivered message's delay, from its acceptance to the server's answer, is
	// observed once.
	var delay dto.Metric
	require.NoError(t, env.edge.m.oneWay.delay.Write(&delay))
	require.EqualValues(t, n, delay.GetHistogram().GetSampleCount())
	require.Positive(t, delay.GetHistogram().GetSampleSum())
	got := env.up.requests()
	require.Len(t, got, n)
	seen := map[string]int{}
	for _, r := range got {
		seen[string(r.raw)]++
	}
	for i := range n {
		require.Equal(t, 1, seen[notifyRequest(i)], "message %d: the server got the client's bytes once", i)
	}
}

// splitRaw splits a raw request into head and body.
func splitRaw(raw string) (head, body string, ok bool) {
	for i := 0; i+3 < len(raw); i++ {
		if raw[i:i+4] == "\r\n\r\n" {
			return raw[:i+4], raw[i+4:], true
		}
	}
	return raw, "", false
}

func closeStores(t *testing.T, env *oneWayEnv) {
	t.Helper()
	sctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	require.NoError(t, env.edge.Shutdown(sctx))
	require.NoError(t, env.spool.Close())
	require.NoError(t, env.ledger.Close())
}

func TestOneWayOtherOperationsStaySynchronous(t *testing.T) {
	env := newOneWayEnv(t, okResponse("<r>sync</r>"), nil)
	defer closeStores(t, env)
	c := env.dial()
	raw := soapRequest(1, "/svc", "", "<add/>")
	c.send(raw)
	resp, body := c.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "<r>sync</r>", string(body))
	got := env.up.requests()
	require.Len(t, got, 1)
	require.Equal(t, raw, string(got[0].raw), "bytes at the server")
	require.Zero(t, env.spool.Stats().Messages)
}

// TestOneWayOriginRunsAnIDOnce sends one message id twice straight to the origin, as an
// edge does when the answer to its first attempt was lost: the server gets it once.
func TestOneWayOriginRunsAnIDOnce(t *testing.T) {
	env := newOneWayEnv(t, accepted202(), nil)
	defer closeStores(t, env)
	msg := oneWayMessage(t, "ow.test-1")
	resp, gwErr := env.sendRaw(t, msg)
	require.Nil(t, gwErr)
	require.Equal(t, 202, resp.Status)
	_, gwErr = env.sendRaw(t, msg)
	require.NotNil(t, gwErr)
	require.Equal(t, causeAlreadyDelivered, gwErr.Cause)
	require.Len(t, env.up.requests(), 1)
	rec, err := env.ledger.Get("ow.test-1")
	require.NoError(t, err)
	require.Equal(t, ledger.Done, rec.State)
	require.Equal(t, 202, rec.Status)
}

// TestOneWayInDoubtIsNotSentAgain: an id the ledger holds as "sent" from an earlier
// process (it died after the server got the whole request, before the answer) is
// refused, and the edge keeps the message as a dead letter; an id only "sending" (the
// server never got it whole) is delivered.
func TestOneWayInDoubtIsNotSentAgain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sent      bool
		delivered bool
	}{
		{"sent whole", true, false},
		{"not sent whole", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testOneWayAfterCrash(t, tc.sent, tc.delivered) })
	}
}

func testOneWayAfterCrash(t *testing.T, sent, delivered bool) {
	dir := t.TempDir()
	sp, err := spool.Open(filepath.Join(dir, "spool.db"), spool.Limits{})
	require.NoError(t, err)
	// The message the edge will deliver is seq 1 of this spool: claim its id in a ledger
	// that then "crashes" (closes without an answer).
	id := spool.MessageID(sp.ID(), 1)
	lpath := filepath.Join(dir, "ledger.db")
	led, err := ledger.Open(lpath, 0)
	require.NoError(t, err)
	rec, err := led.Begin(id, false)
	require.NoError(t, err)
	require.Equal(t, ledger.Absent, rec.State)
	if sent {
		require.NoError(t, led.MarkSent(id))
	}
	require.NoError(t, led.Close())
	led, err = ledger.Open(lpath, 0)
	require.NoError(t, err)

	up := newUpstream(t, accepted202())
	ow := &OneWayConfig{Spool: sp, Operations: []OneWayOperation{{Operation: "Notify"}}}
	env := &oneWayEnv{testEnv: newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}, OneWay: ow, Ledger: led}), up: up, spool: sp, ledger: led}
	defer closeStores(t, env)
	c := env.dial()
	c.send(notifyRequest(1))
	resp, _ := c.read("POST")
	require.Equal(t, 202, resp.StatusCode)
	if delivered {
		waitFor(t, "delivered", func() bool { return sp.Stats().Messages == 0 })
		require.Len(t, up.requests(), 1)
		require.Zero(t, sp.Stats().Dead)
		return
	}
	waitFor(t, "dead letter", func() bool { return sp.Stats().Dead == 1 })
	require.Empty(t, up.requests(), "an in-doubt message went to the server again")
	var dead []spool.Dead
	require.NoError(t, sp.DeadLetters(func(d spool.Dead) bool { dead = append(dead, d); return true }))
	require.Len(t, dead, 1)
	require.Contains(t, dead[0].Reason, causeDeliveryInDoubt)
}

func TestOneWayServerFaultBecomesDeadLetter(t *testing.T) {
	fault := `<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><soap:Fault><faultcode>soap:Client</faultcode><faultstring>bad event</faultstring></soap:Fault></soap:Body></soap:Envelope>`
	env := newOneWayEnv(t, func(int, upstreamReq) ([]byte, bool) {
		return []byte("HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/xml\r\nContent-Length: " + strconv.Itoa(len(fault)) + "\r\n\r\n" + fault), false
	}, nil)
	defer closeStores(t, env)
	c := env.dial()
	c.send(notifyRequest(7))
	resp, _ := c.read("POST")
	require.Equal(t, 202, resp.StatusCode)
	waitFor(t, "dead letter", func() bool { return env.spool.Stats().Dead == 1 })
	require.Len(t, env.up.requests(), 1, "a refused message is not sent again")
	var dead []spool.Dead
	require.NoError(t, env.spool.DeadLetters(func(d spool.Dead) bool { dead = append(dead, d); return true }))
	require.Contains(t, dead[0].Reason, "500")
	require.Contains(t, dead[0].Reason, "Client")
	require.Contains(t, string(dead[0].Answer), "bad event")
}

func TestOneWayServerBusyIsRetried(t *testing.T) {
	env := newOneWayEnv(t, func(n int, r upstreamReq) ([]byte, bool) {
		if n < 2 {
			return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"), false
		}
		return accepted202()(n, r)
	}, nil)
	defer closeStores(t, env)
	c := env.dial()
	c.send(notifyRequest(1))
	resp, _ := c.read("POST")
	require.Equal(t, 202, resp.StatusCode)
	waitFor(t, "delivered", func() bool { return env.spool.Stats().Messages == 0 })
	require.Len(t, env.up.requests(), 3)
	require.Zero(t, env.spool.Stats().Dead)
}

func TestOneWaySpoolFullGetsFault(t *testing.T) {
	dir := t.TempDir()
	sp, err := spool.Open(filepath.Join(dir, "spool.db"), spool.Limits{MaxMessages: 2})
	require.NoError(t, err)
	led, err := ledger.Open(filepath.Join(dir, "ledger.db"), 0)
	require.NoError(t, err)
	ow := &OneWayConfig{Spool: sp, Operations: []OneWayOperation{{Action: "urn:Notify"}}}
	// The origin is unreachable: the messages stay in the spool.
	env := &oneWayEnv{testEnv: newEnv(t, envConfig{
		Upstreams: []Upstream{{Name: "up", Address: "127.0.0.1:1"}}, OneWay: ow, Ledger: led,
		Opener: func(Opener) Opener {
			return OpenerFunc(func(context.Context) (Stream, error) { return nil, fmt.Errorf("link down") })
		},
	}), spool: sp, ledger: led}
	defer closeStores(t, env)
	c := env.dial()
	for i := range 2 {
		c.send(notifyRequest(i))
		resp, _ := c.read("POST")
		require.Equal(t, 202, resp.StatusCode)
	}
	c.send(notifyRequest(3))
	f := c.readFault()
	require.Equal(t, causeSpoolFull, f.cause)
	require.Equal(t, "503", f.resp.Header.Get("X-Soapgw-Status"))
	require.Equal(t, 2, sp.Stats().Messages, "what was acknowledged is kept")
}

// oneWayMessage is a tunnel request message for a one-way delivery with id.
func oneWayMessage(t *testing.T, id string) []byte {
	_, body, _ := splitRaw(notifyRequest(1))
	h := envelope.Request{ExchangeID: id, Upstream: "up", Method: "POST", Target: "/svc", ProtoMinor: 1,
		ContentLength: int64(len(body)), Header: httpwire.Header{{Name: "Host", Value: "svc.example"}, {Name: "SOAPAction", Value: `"urn:Notify"`}}}
	return append(h.Append(nil), body...)
}

// sendRaw sends a tunnel request message on a new stream and reads the answer's head.
func (e *oneWayEnv) sendRaw(t *testing.T, msg []byte) (*envelope.Response, *envelope.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	st, err := e.cs.OpenStream(ctx)
	require.NoError(t, err)
	defer st.Close()
	_, err = st.Write(msg)
	require.NoError(t, err)
	require.NoError(t, st.CloseWrite())
	br := bufio.NewReader(st)
	head, err := readHead(br, 1<<16)
	require.NoError(t, err)
	resp, gwErr, err := envelope.ParseResponse(head)
	require.NoError(t, err)
	require.NoError(t, drainBody(br))
	return resp, gwErr
}

// TestOneWayOrderedKeepsOrderAcrossRetries: with Ordered, the server gets the messages of
// an upstream in the order the edge accepted them, even when one is refused with 503 and
// tried again (the others wait behind it).
func TestOneWayOrderedKeepsOrderAcrossRetries(t *testing.T) {
	var refused atomic.Bool
	env := newOneWayEnv(t, func(n int, r upstreamReq) ([]byte, bool) {
		if bytes.Contains(r.body, []byte("<n>3</n>")) && refused.CompareAndSwap(false, true) {
			return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"), false
		}
		return accepted202()(n, r)
	}, func(ow *OneWayConfig, _ *envConfig) { ow.Ordered, ow.Deliveries = true, 8 })
	defer closeStores(t, env)
	c := env.dial()
	const n = 10
	for i := range n {
		c.send(notifyRequest(i))
		resp, _ := c.read("POST")
		require.Equal(t, 202, resp.StatusCode)
	}
	waitFor(t, "delivered", func() bool { return env.spool.Stats().Messages == 0 })
	got := env.up.requests()
	require.Len(t, got, n+1, "every message once, message 3 twice (refused, then taken)")
	var order []string
	for _, r := range got {
		order = append(order, string(r.raw))
	}
	want := []string{}
	for i := range n {
		want = append(want, notifyRequest(i))
		if i == 3 {
			want = append(want, notifyRequest(i))
		}
	}
	require.Equal(t, want, order)
}

// TestOneWayOriginBoundsServerConcurrency: the edge keeps many deliveries in flight; the
// server gets at most OneWayConcurrency of them at once.
func TestOneWayOriginBoundsServerConcurrency(t *testing.T) {
	var running, peak atomic.Int32
	gate := make(chan struct{})
	env := newOneWayEnv(t, func(n int, r upstreamReq) ([]byte, bool) {
		now := running.Add(1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		<-gate
		running.Add(-1)
		return accepted202()(n, r)
	}, func(ow *OneWayConfig, c *envConfig) { ow.Deliveries, c.OneWayConcurrency = 32, 3 })
	defer closeStores(t, env)
	c := env.dial()
	const n = 12
	for i := range n {
		c.send(notifyRequest(i))
		resp, _ := c.read("POST")
		require.Equal(t, 202, resp.StatusCode)
	}
	waitFor(t, "three at the server", func() bool { return running.Load() == 3 })
	close(gate)
	waitFor(t, "delivered", func() bool { return env.spool.Stats().Messages == 0 })
	require.Len(t, env.up.requests(), n)
	require.Equal(t, int32(3), peak.Load(), "never more than the origin's bound at once")
}
