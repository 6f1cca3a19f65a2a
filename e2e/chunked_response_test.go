package e2e

// Responses of unknown length through real gateways with the default codec: a chunked
// response the upstream sends at once is coded like any other, and one whose upstream
// pauses mid-body still reaches the client in parts (and then is coded as it streams).

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stagedUpstream answers every request by writing the wire parts the test registered for
// its target, one after the other; before every part but the first it waits for the test
// to release it (or gives up after a while).
type stagedUpstream struct {
	ln      net.Listener
	release chan struct{}

	mu    sync.Mutex
	parts map[string][]string // by target
	wg    sync.WaitGroup
}

func startStagedUpstream(t *testing.T) *stagedUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := &stagedUpstream{ln: ln, release: make(chan struct{}), parts: map[string][]string{}}
	u.wg.Add(1)
	go u.serve()
	t.Cleanup(func() { _ = ln.Close(); u.wg.Wait() })
	return u
}

func (u *stagedUpstream) URL() string { return "http://" + u.ln.Addr().String() }

func (u *stagedUpstream) set(target string, parts ...string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.parts[target] = parts
}

func (u *stagedUpstream) serve() {
	defer u.wg.Done()
	for {
		c, err := u.ln.Accept()
		if err != nil {
			return
		}
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(60 * time.Second))
			br := bufio.NewReader(c)
			for {
				req, err := readRawRequest(br)
				if err != nil {
					return
				}
				target := strings.Fields(string(req.Head))[1]
				u.mu.Lock()
				parts := u.parts[target]
				u.mu.Unlock()
				if parts == nil {
					_, _ = io.WriteString(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
					continue
				}
				for i, p := range parts {
					if i > 0 {
						select {
						case <-u.release:
						case <-time.After(30 * time.Second):
							return
						}
					}
					if _, err := io.WriteString(c, p); err != nil {
						return
					}
				}
			}
		}()
	}
}

// e2eChunked frames each part as one chunk; last adds the last chunk.
func e2eChunked(last bool, parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.FormatInt(int64(len(p)), 16) + "\r\n" + p + "\r\n")
	}
	if last {
		b.WriteString("0\r\n\r\n")
	}
	return b.String()
}

func TestChunkedResponseCodedOrStreamed(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><GetOrdersResponse xmlns="http://example.com/orders">`)
	for i := range 500 { // ~55 KB: more than the origin reads from the upstream at once
		fmt.Fprintf(&sb, "<order><id>%d</id><customer>customer-%d</customer><total>%d.%02d</total><status>shipped</status></order>", 1000+i, i%17, i*13, i%100)
	}
	sb.WriteString("</GetOrdersResponse></soap:Body></soap:Envelope>")
	body := sb.String()
	q := len(body) / 4
	// Chunks of about 7 KB, as Axis2 or Java servlet containers send from their buffers.
	chunks := func(s string) []string {
		var out []string
		for len(s) > 7000 {
			out = append(out, s[:7000])
			s = s[7000:]
		}
		return append(out, s)
	}
	const head = "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\nTransfer-Encoding: chunked\r\nX-Stack: axis2\r\n\r\n"

	type exchange struct {
		target string
		wire   []string // what the upstream writes, each part after the client got the one before
		parts  []string // the body bytes the client must have before the upstream writes more
		coded  bool
	}
	cases := map[string]exchange{
		// How SOAP stacks usually answer: chunks, sent without a pause.
		"prompt": {
			target: "/svc/prompt",
			wire:   []string{head + e2eChunked(true, chunks(body)...)},
			parts:  []string{body},
			coded:  true,
		},
		// A slow upstream: the first chunks, then nothing until the client has them.
		"trickle": {
			target: "/svc/trickle",
			wire:   []string{head + e2eChunked(false, chunks(body[:2*q])...), e2eChunked(false, chunks(body[2*q:3*q])...), e2eChunked(true, chunks(body[3*q:])...)},
			parts:  []string{body[:2*q], body[2*q : 3*q], body[3*q:]},
		},
	}
	up := startStagedUpstream(t)
	for _, x := range cases {
		require.Equal(t, body, strings.Join(x.parts, ""))
		up.set(x.target, x.wire...)
	}
	a, origin, edge := codecPair(t, up.URL(), "auto")

	type counts struct{ coded, streamed, identity, flushed, edgeDecoded float64 }
	snapshot := func() counts {
		return counts{
			coded:       metricSum(t, origin.admin, "soapgw_tunnel_codec_messages_total", "direction=sent", "codec=token"),
			streamed:    metricSum(t, origin.admin, "soapgw_tunnel_codec_messages_total", "direction=sent", "codec=zstd-streaming"),
			identity:    metricSum(t, origin.admin, "soapgw_tunnel_codec_messages_total", "direction=sent", "codec=identity"),
			flushed:     metricSum(t, origin.admin, "soapgw_tunnel_codec_fallbacks_total", "reason=flushed"),
			edgeDecoded: metricSum(t, edge.admin, "soapgw_tunnel_codec_messages_total", "direction=received", "codec=token"),
		}
	}

	c, err := net.DialTimeout("tcp", a.Edge, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	br := bufio.NewReader(c)
	// Twice each, on one keep-alive connection: the upstream connection is reused too.
	for _, name := range []string{"prompt", "trickle", "prompt", "trickle"} {
		t.Run(name, func(t *testing.T) {
			x := cases[name]
			target, parts, coded := x.target, x.parts, x.coded
			before := snapshot()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			req := "POST " + target + " HTTP/1.1\r\nHost: " + a.Edge + "\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:GetOrders\"\r\nContent-Length: 9\r\n\r\n<orders/>"
			_, err := io.WriteString(c, req)
			require.NoError(t, err)

			// Head, byte for byte, then the body as the client's HTTP stack reads it.
			wantHead := "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\nX-Stack: axis2\r\nTransfer-Encoding: chunked\r\n\r\n"
			gotHead := make([]byte, len(wantHead))
			_, err = io.ReadFull(br, gotHead)
			require.NoError(t, err)
			require.Equal(t, wantHead, string(gotHead))
			cr := httputil.NewChunkedReader(br)
			for i, p := range parts {
				got := make([]byte, len(p))
				_, err := io.ReadFull(cr, got)
				require.NoError(t, err, "part %d: held back while the upstream paused", i)
				require.True(t, bytes.Equal([]byte(p), got), "part %d differs", i)
				if i+1 < len(parts) {
					select { // only now may the upstream send more
					case up.release <- struct{}{}:
					case <-time.After(30 * time.Second):
						t.Fatal("the upstream is gone")
					}
				}
			}
			rest, err := io.ReadAll(cr)
			require.NoError(t, err)
			require.Empty(t, rest)
			crlf := make([]byte, 2) // the chunked reader leaves the empty trailer section
			_, err = io.ReadFull(br, crlf)
			require.NoError(t, err)
			require.Equal(t, "\r\n", string(crlf))

			// Counted by the origin once the message is written: wait for it.
			require.Eventually(t, func() bool {
				now := snapshot()
				return now.coded+now.streamed+now.identity > before.coded+before.streamed+before.identity
			}, 10*time.Second, 10*time.Millisecond, "the response is counted")
			after := snapshot()
			if coded {
				require.Equal(t, before.coded+1, after.coded, "the prompt chunked response travelled coded (token)")
				require.Equal(t, before.flushed, after.flushed, "and was never flushed")
				require.Equal(t, before.edgeDecoded+1, after.edgeDecoded, "the edge decoded it")
			} else {
				require.Equal(t, before.streamed+1, after.streamed, "the trickling response was flushed, and so coded as it streamed")
				require.Equal(t, before.flushed, after.flushed, "not sent uncoded")
				require.Equal(t, before.identity, after.identity)
				require.Equal(t, before.coded, after.coded)
			}
		})
	}
	for _, g := range []*gateway{edge, origin} {
		require.Zero(t, metricSum(t, g.admin, "soapgw_gateway_errors_total"))
		require.Zero(t, metricSum(t, g.admin, "soapgw_tunnel_codec_resyncs_total"))
	}
}
