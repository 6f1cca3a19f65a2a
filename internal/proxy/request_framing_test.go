package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Request bodies of unknown length (issue #17, item 6): an upstream gets them with a
// Content-Length unless it is configured to take chunked bodies (Upstream.Chunked), and a
// body over limits.max_request_bytes never reaches it.

// chunkedClientRequest is a chunked request as SOAP stacks send them (CXF and Axis2 send
// chunked by default), and the body it carries.
func chunkedClientRequest(target string, parts ...string) (raw, body string) {
	var b strings.Builder
	b.WriteString("POST " + target + " HTTP/1.1\r\nHost: svc.example\r\nContent-Type: text/xml; charset=utf-8\r\n" +
		"SOAPAction: \"urn:Add\"\r\nTransfer-Encoding: chunked\r\nX-Trace: a1\r\n\r\n")
	for _, p := range parts {
		b.WriteString(strconv.FormatInt(int64(len(p)), 16) + "\r\n" + p + "\r\n")
	}
	b.WriteString("0\r\n\r\n")
	return b.String(), strings.Join(parts, "")
}

// The client's head, byte for byte, with Transfer-Encoding replaced by a Content-Length
// (after the Connection field the origin adds for an HTTP/1.0 upstream), and the exact
// de-chunked body: for an HTTP/1.0 upstream, and for an HTTP/1.1 one with the defaults,
// which may be a stack that reads only Content-Length.
func TestChunkedRequestGetsContentLengthByDefault(t *testing.T) {
	up := newUpstream(t, okResponse("<ok/>"))
	env := newEnv(t, envConfig{
		Upstreams: []Upstream{
			{Name: "v10", Address: up.addr(), HTTP10: true},
			{Name: "v11", Address: up.addr()}, // the defaults
		},
		Routes: []Route{
			{PathPrefix: "/v10", Peer: "p", Upstream: "v10"},
			{PathPrefix: "/v11", Peer: "p", Upstream: "v11"},
		},
	})
	parts := []string{"<soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\">",
		"<soap:Body><Add>" + strings.Repeat("é1", 40000), "</Add></soap:Body></soap:Envelope>"}
	for i, tc := range []struct{ target, version, extra string }{
		{"/v10/calc", "1.0", "Connection: keep-alive\r\n"},
		{"/v11/calc", "1.1", ""},
	} {
		raw, body := chunkedClientRequest(tc.target, parts...)
		cl := env.dial()
		cl.send(raw)
		resp, got := cl.read("POST")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "<ok/>", string(got))
		r := up.requests()[i]
		want := "POST " + tc.target + " HTTP/" + tc.version + "\r\nHost: svc.example\r\nContent-Type: text/xml; charset=utf-8\r\n" +
			"SOAPAction: \"urn:Add\"\r\nX-Trace: a1\r\n" + tc.extra + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
		require.Equal(t, want, string(r.raw[:len(r.raw)-len(r.body)]), tc.target)
		require.Equal(t, body, string(r.body), tc.target)
		require.False(t, r.req.Chunked)
	}
}

// countingUpstream accepts connections and counts them and the bytes they carry; it never
// answers. A request that must not reach the upstream leaves both at zero.
type countingUpstream struct {
	ln    net.Listener
	mu    sync.Mutex
	conns int
	bytes int
	wg    sync.WaitGroup
}

func newCountingUpstream(t *testing.T) *countingUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := &countingUpstream{ln: ln}
	var open []net.Conn
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns++
			open = append(open, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				n, _ := io.Copy(io.Discard, c)
				u.mu.Lock()
				u.bytes += int(n)
				u.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		u.mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

func (u *countingUpstream) counts() (conns, bytes int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conns, u.bytes
}

// A body over the limit is refused with request_too_large before any of it reaches the
// upstream: no connection, no byte. Whichever gateway counts it first refuses it: the
// edge (same limit on both sides, as deployed), or the origin (a lower limit there), for
// a chunked body and for one whose Content-Length says so.
func TestRequestOverLimitNeverReachesUpstream(t *testing.T) {
	const limit = 64 << 10
	for _, tc := range []struct {
		name        string
		edgeLimit   int64
		originLimit int64
		chunked     bool
	}{
		{"chunked, edge refuses", limit, limit, true},
		{"chunked, origin refuses", 4 * limit, limit, true},
		{"content-length, origin refuses", 4 * limit, limit, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newCountingUpstream(t)
			ups := []Upstream{{Name: "up", Address: up.ln.Addr().String()}}
			env := newEnv(t, envConfig{Upstreams: ups, EdgeLimits: Limits{MaxRequestBytes: tc.edgeLimit}})
			require.NoError(t, env.origin.Reconfigure(ups, Limits{ExchangeTimeout: testDeadline, MaxRequestBytes: tc.originLimit}))

			part := strings.Repeat("x", 16<<10)
			n := int(tc.edgeLimit/int64(len(part))) + 1 // over the limit, and within the edge's when the origin refuses
			if tc.originLimit < tc.edgeLimit {
				n = int(tc.originLimit/int64(len(part))) + 1
			}
			raw, _ := chunkedClientRequest("/svc", slicesRepeat(part, n)...)
			if !tc.chunked {
				raw = soapRequest(1, "/svc", "", strings.Repeat(part, n))
			}
			cl := env.dial()
			cl.send(raw)
			f := cl.readFault()
			require.Equal(t, causeTooLarge, f.cause)
			require.Equal(t, causeTooLarge, f.resp.Header.Get("X-Soapgw-Error"))
			require.Contains(t, f.text, "exceeds the limit")

			// The exchange is over at both gateways; the upstream saw nothing of it.
			require.Eventually(t, func() bool { return len(env.origin.inflight) == 0 && len(env.edge.inflight) == 0 }, testDeadline, time.Millisecond)
			conns, bytes := up.counts()
			require.Zero(t, conns, "connections to the upstream")
			require.Zero(t, bytes, "bytes to the upstream")
		})
	}
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// rawUpstream hands each request's bytes to the test as they arrive, for checks that
// depend on when bytes reach the upstream.
func rawUpstream(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * testDeadline))
		serve(c, bufio.NewReader(c))
	}()
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// readUntil reads from br until the bytes read end with marker, and returns them.
func readUntil(br *bufio.Reader, marker string) (string, error) {
	var b []byte
	for !bytes.HasSuffix(b, []byte(marker)) {
		c, err := br.ReadByte()
		if err != nil {
			return string(b), err
		}
		b = append(b, c)
	}
	return string(b), nil
}

// chunked: true opts in to streaming: the upstream gets the body chunked, and the first
// 64 KiB of it while the client has not sent the rest (the hops buffer up to a frame or a
// socket buffer, not the message).
func TestChunkedTrueStreamsRequestBody(t *testing.T) {
	const early = 64 << 10
	firstPart := make(chan string, 1)
	rest := make(chan string, 1)
	addr := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		head, err := readUntil(br, "\r\n\r\n")
		first := make([]byte, early)
		if err == nil {
			_, err = io.ReadFull(br, first)
		}
		firstPart <- head
		if err != nil {
			return
		}
		tail, _ := readUntil(br, "\r\n0\r\n\r\n")
		rest <- tail
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n<ok/>")
	})
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: addr, Chunked: true}}})
	raw, _ := chunkedClientRequest("/svc", strings.Repeat("a", 4*early), "<second/>")
	cut := strings.Index(raw, "<second/>")
	cl := env.dial()
	cl.send(raw[:cut])
	select {
	case head := <-firstPart:
		require.True(t, strings.HasPrefix(head, "POST /svc HTTP/1.1\r\nHost: svc.example\r\n"), head)
		require.Contains(t, head, "\r\nTransfer-Encoding: chunked\r\n")
		require.NotContains(t, head, "Content-Length")
	case <-time.After(testDeadline):
		t.Fatal("the upstream got too little before the client finished its body")
	}
	cl.send(raw[cut:])
	require.Contains(t, <-rest, "<second/>")
	resp, body := cl.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "<ok/>", string(body))
}

// With chunked: true a body over the origin's limit is cut where it passes the limit: the
// client gets request_too_large, and the upstream never gets the last chunk, so it cannot
// take what it got for a whole request.
func TestChunkedTrueOverLimitIsCutWithoutLastChunk(t *testing.T) {
	got := make(chan string, 1)
	addr := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		b, _ := io.ReadAll(br) // until the origin closes the connection
		got <- string(b)
	})
	ups := []Upstream{{Name: "up", Address: addr, Chunked: true}}
	env := newEnv(t, envConfig{Upstreams: ups, EdgeLimits: Limits{MaxRequestBytes: 1 << 20}})
	require.NoError(t, env.origin.Reconfigure(ups, Limits{ExchangeTimeout: testDeadline, MaxRequestBytes: 64 << 10}))
	raw, _ := chunkedClientRequest("/svc", slicesRepeat(strings.Repeat("y", 16<<10), 8)...)
	cl := env.dial()
	cl.send(raw)
	f := cl.readFault()
	require.Equal(t, causeTooLarge, f.cause)
	select {
	case b := <-got:
		require.Contains(t, b, "Transfer-Encoding: chunked")
		require.False(t, strings.HasSuffix(b, "\r\n0\r\n\r\n"), "the upstream got a complete chunked body")
		require.Less(t, len(b), 64<<10+4096)
	case <-time.After(testDeadline):
		t.Fatal("the upstream connection was not closed")
	}
}
