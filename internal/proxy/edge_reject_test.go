package proxy

import (
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestEdgeRejectsNonSOAPTargets: what only a forward proxy is sent gets a 4xx Fault at the
// edge, the connection is closed, and no upstream sees a request.
func TestEdgeRejectsNonSOAPTargets(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}})
	const body = "<x/>"
	for name, tc := range map[string]struct {
		raw    string
		status int
		text   string
	}{
		"CONNECT":           {"CONNECT " + up.addr() + " HTTP/1.1\r\nHost: " + up.addr() + "\r\n\r\n", 405, "CONNECT is not served"},
		"absolute-form":     {soapRequest(1, "http://"+up.addr()+"/svc", "", body), 400, "absolute-form request target"},
		"absolute ftp":      {soapRequest(1, "ftp://"+up.addr()+"/svc", "", body), 400, "absolute-form"},
		"authority-form":    {"POST " + up.addr() + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 400, "authority-form request target"},
		"asterisk-form":     {"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 400, "asterisk-form"},
		"HTTP/1.1 no Host":  {"POST /svc HTTP/1.1\r\nContent-Type: text/xml\r\nContent-Length: 4\r\n\r\n" + body, 400, "without a Host field"},
		"SOAP 1.2, no Host": {"POST /svc HTTP/1.1\r\nContent-Type: application/soap+xml\r\nContent-Length: 4\r\n\r\n" + body, 400, "without a Host field"},
	} {
		t.Run(name, func(t *testing.T) {
			c := env.dial()
			c.send(tc.raw)
			f := c.readFault()
			requireGatewayStatus(t, f, tc.status)
			require.Equal(t, causeBadTarget, f.cause)
			require.Contains(t, f.text, tc.text)
			if strings.Contains(tc.raw, "soap+xml") {
				require.Contains(t, f.code, "Sender", "a SOAP 1.2 client gets a SOAP 1.2 fault")
			}
			c.requireClosed()
		})
	}
	// HTTP/1.0 may leave Host out, as it always could.
	c := env.dial()
	c.send("POST /svc HTTP/1.0\r\nContent-Type: text/xml\r\nContent-Length: 4\r\n\r\n" + body)
	resp, _ := c.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, up.requests(), 1, "only the HTTP/1.0 request reached the upstream")
}

func TestEdgeAllowAbsoluteFormRoutesByURI(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	other := newUpstream(t, okResponse("<other/>"))
	env := newEnv(t, envConfig{
		Upstreams:  []Upstream{{Name: "up", Address: up.addr()}, {Name: "other", Address: other.addr()}},
		Routes:     []Route{{Host: "svc.example", PathPrefix: "/a/", Peer: "p", Upstream: "other"}, {Peer: "p", Upstream: "up"}},
		EdgeLimits: Limits{AllowAbsoluteForm: true},
	})
	c := env.dial()
	target := "http://svc.example:8080/a/x?wsdl"
	c.send("GET " + target + " HTTP/1.1\r\nHost: ignored.example\r\n\r\n")
	resp, body := c.read("GET")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "<other/>", string(body), "routed by the URI's host and path, not the Host field")
	reqs := other.requests()
	require.Len(t, reqs, 1)
	require.True(t, strings.HasPrefix(string(reqs[0].raw), "GET "+target+" HTTP/1.1\r\n"), "forwarded as the client sent it: %q", reqs[0].raw)
}

// TestEdgeMalformedChunkedBody: a chunked body that breaks its framing gets a 400 Fault
// (not a silent close), and the upstream never receives a complete request.
func TestEdgeMalformedChunkedBody(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}})
	head := "POST /svc HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\nTransfer-Encoding: chunked\r\n\r\n"
	for name, body := range map[string]string{
		"bad size":         "4\r\n<x/>\r\nzz\r\n",
		"missing CRLF":     "4\r\n<x/>XX0\r\n\r\n",
		"extension junk":   "4;\x01\r\n<x/>\r\n0\r\n\r\n",
		"negative size":    "-4\r\n<x/>\r\n0\r\n\r\n",
		"size beyond 2^62": "4000000000000000\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := env.dial()
			c.send(head + body)
			f := c.readFault()
			requireGatewayStatus(t, f, 400)
			require.Equal(t, causeMalformedBody, f.cause)
			c.requireClosed()
		})
	}
	// Whatever the upstream saw, it never got a complete chunked body: no last chunk.
	for _, r := range up.requests() {
		require.NotContains(t, string(r.raw), "0\r\n\r\n", "an upstream received a malformed body as complete")
	}
}

func TestEdgeMaxClientConnections(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	m := NewMetrics(nil)
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}, EdgeLimits: Limits{MaxClientConnections: 2}, Metrics: m})
	a, b := env.dial(), env.dial()
	for _, c := range []*client{a, b} { // both are served, and stay open
		c.send(soapRequest(1, "/svc", "", "<x/>"))
		resp, _ := c.read("POST")
		require.Equal(t, 200, resp.StatusCode)
	}
	third := env.dial()
	f := third.readFault()
	requireGatewayStatus(t, f, 503)
	require.Equal(t, causeTooManyConns, f.cause)
	require.Contains(t, f.text, "max_client_connections")
	third.requireClosed()
	require.Equal(t, 1.0, testutil.ToFloat64(m.connsRefused))

	// A refused client that sends a request larger than the sockets hold still gets the
	// fault, and its write is not reset: the edge lingers before it closes.
	for range 3 {
		late := env.dial()
		sent := late.sendAsync(soapRequest(1, "/svc", "", strings.Repeat("<x/>", 1<<20)))
		f = late.readFault()
		require.Equal(t, causeTooManyConns, f.cause)
		require.NoError(t, <-sent, "the refused client's write was reset")
		late.requireClosed()
	}

	_ = a.c.Close() // a slot frees when a connection closes
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.clientConns) == 1 }, testDeadline, time.Millisecond)
	c := env.dial()
	c.send(soapRequest(1, "/svc", "", "<x/>"))
	resp, _ := c.read("POST")
	require.Equal(t, 200, resp.StatusCode)
}

// TestEdgeIdleConnectionsHoldNoBuffers measures the heap an idle keep-alive client
// connection holds after an exchange: its 32 KiB of read and write buffers go back to
// the pools while it waits. This bounds memory, not time.
func TestEdgeIdleConnectionsHoldNoBuffers(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 50 connections")
	}
	up := newUpstream(t, okResponse("<ok/>"))
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: up.addr()}}})
	const n = 50 // the fake upstream queues at most 64 requests
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	// Warm the pools and the tunnel, so the baseline holds what every connection shares.
	for range 4 {
		c := env.dial()
		c.send(soapRequest(1, "/svc", "", "<x/>"))
		c.read("POST")
	}
	before := heap()
	conns := make([]net.Conn, 0, n)
	for range n {
		c := env.dial()
		c.send(soapRequest(1, "/svc", "", "<x/>"))
		resp, _ := c.read("POST")
		require.Equal(t, 200, resp.StatusCode)
		conns = append(conns, c.c)
	}
	// The client side of each test connection holds a 4 KiB bufio.Reader in this same
	// process; count it out.
	perConn := (int64(heap()) - int64(before)) / n
	t.Logf("heap per idle keep-alive connection after an exchange, both ends in this process: %d bytes", perConn)
	require.Less(t, perConn, int64(28<<10), "an idle connection holds its 32 KiB of buffers")

	// Connections that have sent nothing yet hold no buffer either; with no upstream
	// involved there can be many, which makes the figure precise.
	const fresh = 400
	before = heap()
	for range fresh {
		c, err := net.Dial("tcp", env.addrs["main"])
		require.NoError(t, err)
		conns = append(conns, c)
	}
	require.Eventually(t, func() bool { return env.edge.m != nil && len(env.edgeConns()) >= n+fresh }, testDeadline, time.Millisecond)
	perFresh := (int64(heap()) - int64(before)) / fresh
	t.Logf("heap per new, idle client connection, both ends in this process: %d bytes", perFresh)
	require.Less(t, perFresh, int64(8<<10), "a connection waiting for its first request holds buffers")
	for _, c := range conns {
		_ = c.Close()
	}
}

// edgeConns is a snapshot of the edge's open client connections.
func (e *testEnv) edgeConns() []*clientConn {
	e.edge.mu.Lock()
	defer e.edge.mu.Unlock()
	out := make([]*clientConn, 0, len(e.edge.conns))
	for c := range e.edge.conns {
		out = append(out, c)
	}
	return out
}
