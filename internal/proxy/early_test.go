package proxy

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/testutil"
)

// readFinal reads responses on the client's connection until a final one.
func (c *client) readFinal(method string) (*httpwire.Response, []byte) {
	c.t.Helper()
	for {
		resp, body := c.read(method)
		if resp.StatusCode >= 200 {
			return resp, body
		}
	}
}

// largeEnv is a pair for requests of megabytes: the edge routes to ups, the origin has
// originUps (nil: ups), both take bodies of up to 8 MiB, and the origin gives up on a
// stalled exchange after 20 s (the client waits testDeadline).
func largeEnv(t *testing.T, ups, originUps []Upstream) *testEnv {
	if originUps == nil {
		originUps = ups
	}
	lim := Limits{MaxRequestBytes: 8 << 20, ExchangeTimeout: 20 * time.Second}
	env := newEnv(t, envConfig{Upstreams: ups, EdgeLimits: lim})
	require.NoError(t, env.origin.Reconfigure(originUps, lim))
	return env
}

// sendAsync writes raw from a goroutine (the gateways may answer before they have read
// it) and returns the write's result.
func (c *client) sendAsync(raw string) <-chan error {
	sent := make(chan error, 1)
	go func() { _, err := io.WriteString(c.c, raw); sent <- err }()
	return sent
}

// An upstream that answers a large request before reading it (a server's body limit: 413)
// and never reads the rest: the client gets that answer byte for byte at once, not a
// timeout fault after limits.exchange_timeout with the answer lost, and its connection
// stays usable; the origin closes the upstream connection, which is in the middle of a
// request. Content-Length bodies stream to the upstream, chunked ones are read whole first
// (and sent with a Content-Length) or streamed chunked (upstream chunked: true): all three
// block in their write the same way.
func TestEarlyAnswerReachesTheClient(t *testing.T) {
	big := strings.Repeat("<x/>", 1<<20) // 4 MiB: more than the sockets hold
	// No Connection: close: the error status alone stops the write.
	const answer = "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n\r\nbody too large"
	for _, c := range []struct {
		name    string
		chunked bool // the client sends the body chunked
		streams bool // the upstream takes chunked bodies
	}{
		{"content-length", false, false},
		{"chunked read whole", true, false},
		{"chunked streamed", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			closed := make(chan struct{}, 1)
			release, answered := testutil.Gate()
			addr := testutil.RawServer(t, func(conn net.Conn, br *bufio.Reader) {
				head, err := readUntil(br, "\r\n\r\n")
				if err != nil {
					return
				}
				if strings.Contains(head, "/small") {
					_, _ = readUntil(br, "<small/>")
					_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					_, _ = readUntil(br, "never") // until the origin closes
					return
				}
				_, _ = io.WriteString(conn, answer)
				<-release // read nothing more until the client has the answer
				if _, err := io.Copy(io.Discard, br); err == nil {
					closed <- struct{}{} // EOF: the origin closed the connection
				}
			}, answered)
			env := largeEnv(t, []Upstream{{Name: "up", Address: addr, Chunked: c.streams}}, nil)
			cl := env.dial()
			raw := soapRequest(1, "/svc", "", big)
			if c.chunked {
				raw, _ = chunkedClientRequest("/svc", big[:1<<21], big[1<<21:])
			}
			sent := cl.sendAsync(raw)

			resp, body := cl.readFinal("POST")
			answered()
			require.Equal(t, 413, resp.StatusCode)
			require.Equal(t, "body too large", string(body))
			require.Equal(t, "text/plain", resp.Header.Get("Content-Type"))
			require.NoError(t, <-sent, "the client could not send its whole request")
			select {
			case <-closed:
			case <-time.After(testDeadline):
				t.Fatal("the origin kept the upstream connection of an unfinished request")
			}

			// The client's connection carries the next call (on a new upstream connection).
			cl.send(soapRequest(1, "/small", "", "<small/>"))
			resp, body = cl.readFinal("POST")
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "ok", string(body))
		})
	}
}

// An upstream that sends 100 Continue before it reads a large body (the client asked with
// Expect: 100-continue, which goes through) and then reads it all: the interim response
// does not stop the request's write, and the final answer comes after the whole body.
func TestEarlyAnswerSkipsInterimResponses(t *testing.T) {
	big := strings.Repeat("<y/>", 1<<19) // 2 MiB
	got := make(chan int, 1)
	addr := testutil.RawServer(t, func(conn net.Conn, br *bufio.Reader) {
		head, err := readUntil(br, "\r\n\r\n")
		if err != nil || !strings.Contains(strings.ToLower(head), "expect: 100-continue") {
			got <- -1
			return
		}
		// Sent while the origin writes the body, which it cannot finish before this
		// reads it (a fresh connection's window is far below 2 MiB).
		_, _ = io.WriteString(conn, "HTTP/1.1 100 Continue\r\n\r\n")
		n, _ := io.CopyN(io.Discard, br, int64(len(big)))
		got <- int(n)
		_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len("read it all"))+"\r\n\r\nread it all")
		_, _ = readUntil(br, "never")
	})
	cl := largeEnv(t, []Upstream{{Name: "up", Address: addr}}, nil).dial()
	sent := cl.sendAsync(soapRequest(1, "/svc", "Expect: 100-continue\r\n", big))
	resp, body := cl.readFinal("POST")
	require.Equal(t, len(big), <-got, "the upstream did not get the whole body")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "read it all", string(body))
	require.NoError(t, <-sent)
}

// A fault the origin answers before it has read a large request (the upstream is down, or
// not configured there): the client gets that fault, naming the cause, not tunnel_lost
// from a stream reset that overtook it, and its whole request is taken.
func TestOriginFaultBeforeTheRequestEnded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := ln.Addr().String()
	require.NoError(t, ln.Close())
	big := strings.Repeat("<x/>", 1<<20) // 4 MiB
	for _, c := range []struct {
		name   string
		origin []Upstream // what the origin has; the edge routes to "up"
		cause  string
	}{
		{"upstream down", []Upstream{{Name: "up", Address: down}}, causeUpstreamDown},
		{"unknown upstream", []Upstream{{Name: "other", Address: down}}, causeUnknownUpstream},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := largeEnv(t, []Upstream{{Name: "up", Address: down}}, c.origin)
			for range 3 {
				cl := env.dial()
				sent := cl.sendAsync(soapRequest(1, "/svc", "", big))
				f := cl.readFault()
				require.Equal(t, c.cause, f.cause, f.text)
				require.NoError(t, <-sent, "the client's request was not taken whole")
			}
		})
	}
}

// A server that answers 200 as soon as it has the head and reads the whole body before it
// ends its (chunked) answer: an early answer that is not an error and keeps the connection
// does not stop the request's write, or the server would wait for the rest forever.
func TestEarlyAnswerLetsAServerReadOn(t *testing.T) {
	big := strings.Repeat("<z/>", 1<<20) // 4 MiB
	addr := testutil.RawServer(t, func(conn net.Conn, br *bufio.Reader) {
		if _, err := readUntil(br, "\r\n\r\n"); err != nil {
			return
		}
		_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
		n, _ := io.CopyN(io.Discard, br, int64(len(big)))
		msg := "read " + strconv.FormatInt(n, 10)
		_, _ = io.WriteString(conn, strconv.FormatInt(int64(len(msg)), 16)+"\r\n"+msg+"\r\n0\r\n\r\n")
		_, _ = readUntil(br, "never")
	})
	cl := largeEnv(t, []Upstream{{Name: "up", Address: addr}}, nil).dial()
	sent := cl.sendAsync(soapRequest(1, "/svc", "", big))
	resp, body := cl.readFinal("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "read "+strconv.Itoa(len(big)), string(body))
	require.NoError(t, <-sent)
}

// The edge's own fault for a body over its limit comes before it has read the body: the
// client can still send all of it (the edge reads and drops it after the fault, then
// closes) instead of getting a reset in its write, which many stacks report in place of
// the fault (Java's HttpURLConnection, gSOAP; any client on Windows).
func TestEdgeFaultLingers(t *testing.T) {
	env := newEnv(t, envConfig{Upstreams: []Upstream{{Name: "up", Address: "127.0.0.1:1"}}, EdgeLimits: Limits{MaxRequestBytes: 1 << 10}})
	big := strings.Repeat("<x/>", 1<<20) // 4 MiB
	for range 3 {
		cl := env.dial()
		sent := cl.sendAsync(soapRequest(1, "/svc", "", big))
		f := cl.readFault()
		require.Equal(t, causeTooLarge, f.cause)
		require.True(t, f.resp.Close)
		require.NoError(t, <-sent, "the client's write was reset")
		cl.requireClosed()
	}
}
