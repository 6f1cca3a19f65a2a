package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEarlyAnswer: a server that answers a large request before it has read it (a body
// limit's 413; also 401, 503) and then reads no more. Through both tunnels, with the
// gateways' default limits, the client gets the server's answer byte for byte at once,
// its whole request is taken (no reset), and its connection carries the next call. Before
// the origin read the answer while it wrote the request, the call hung until the
// exchange timeout and the client got a timeout fault naming no answer.
func TestEarlyAnswer(t *testing.T) {
	for _, transport := range []string{"tcp", "udp"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			const answer = "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: text/html\r\nContent-Length: 23\r\nConnection: close\r\n\r\n<h1>body too large</h1>"
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			release := make(chan struct{})
			var once sync.Once
			answered := func() { once.Do(func() { close(release) }) }
			var wg sync.WaitGroup
			t.Cleanup(func() { _ = ln.Close(); answered(); wg.Wait() })
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer c.Close()
						_ = c.SetDeadline(time.Now().Add(time.Minute))
						br := bufio.NewReader(c)
						head, err := br.ReadString('\n')
						if err != nil {
							return
						}
						if strings.HasPrefix(head, "POST /big ") {
							_, _ = io.WriteString(c, answer)
							<-release
							_, _ = io.Copy(io.Discard, br) // until the origin closes
							return
						}
						for line := ""; line != "\r\n"; { // a small call: its head, then its body
							if line, err = br.ReadString('\n'); err != nil {
								return
							}
						}
						_, _ = io.CopyN(io.Discard, br, int64(len(smallBody)))
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: 4\r\n\r\n<a/>")
						_, _ = io.Copy(io.Discard, br)
					}()
				}
			}()
			a := newPairAddrs(t)
			limits := "limits:\n  max_request_bytes: 8MiB\n"
			startGateway(t, a.OriginAdmin, originYAML(a, "http://"+ln.Addr().String(), limits))
			edgeCfg := edgeYAML(a, limits)
			if transport == "udp" {
				edgeCfg = udpEdgeYAML(a, a.Tunnel, "") + limits
			}
			startGateway(t, a.EdgeAdmin, edgeCfg)

			c, err := net.Dial("tcp", a.Edge)
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
			big := strings.Repeat("<x/>", 1<<20) // 4 MiB, far more than the sockets hold
			sent := make(chan error, 1)
			go func() {
				_, err := fmt.Fprintf(c, "POST /big HTTP/1.1\r\nHost: svc\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:put\"\r\nContent-Length: %d\r\n\r\n%s", len(big), big)
				sent <- err
			}()
			br := bufio.NewReader(c)
			start := time.Now()
			resp, err := frReadResponse(br)
			require.NoError(t, err, "no answer to the large request")
			answered()
			t.Logf("answer after %v", time.Since(start))
			require.Equal(t, 413, resp.Status, resp.String())
			require.Equal(t, "<h1>body too large</h1>", string(resp.Body))
			require.Equal(t, "text/html", resp.Get("Content-Type"))
			require.NoError(t, <-sent, "the client's request was not taken whole")

			_, err = fmt.Fprintf(c, "POST /small HTTP/1.1\r\nHost: svc\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:put\"\r\nContent-Length: %d\r\n\r\n%s", len(smallBody), smallBody)
			require.NoError(t, err)
			resp, err = frReadResponse(br)
			require.NoError(t, err, "no answer to the next call on the same connection")
			require.Equal(t, 200, resp.Status, resp.String())
			require.Equal(t, "<a/>", string(resp.Body))
		})
	}
}

const smallBody = `<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><put xmlns="urn:t"/></soap:Body></soap:Envelope>`

// TestEarlyFault: a large request to an upstream that is down. The origin answers
// upstream_unreachable before it has read the request; through both tunnels the client gets
// that fault (not tunnel_lost from a reset that overtook it) and its whole request is taken.
func TestEarlyFault(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	for _, transport := range []string{"tcp", "udp"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			a := newPairAddrs(t)
			limits := "limits:\n  max_request_bytes: 8MiB\n"
			startGateway(t, a.OriginAdmin, originYAML(a, down, limits))
			edgeCfg := edgeYAML(a, limits)
			if transport == "udp" {
				edgeCfg = udpEdgeYAML(a, a.Tunnel, "") + limits
			}
			startGateway(t, a.EdgeAdmin, edgeCfg)
			big := strings.Repeat("<x/>", 1<<20)
			for range 3 {
				c, err := net.Dial("tcp", a.Edge)
				require.NoError(t, err)
				require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
				sent := make(chan error, 1)
				go func() {
					_, err := fmt.Fprintf(c, "POST /svc HTTP/1.1\r\nHost: svc\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:put\"\r\nContent-Length: %d\r\n\r\n%s", len(big), big)
					sent <- err
				}()
				resp, err := frReadResponse(bufio.NewReader(c))
				require.NoError(t, err)
				require.Equal(t, "upstream_unreachable", resp.Get("X-Soapgw-Error"), resp.String())
				require.NoError(t, <-sent, "the client's request was not taken whole")
				_ = c.Close()
			}
		})
	}
}

// TestStalledUpstreamTimesOut: a server that takes a large request's head and then
// neither reads nor answers. The origin's exchange_timeout ends the call; through both
// tunnels the client gets the timeout fault, not tunnel_lost from a stream reset under the
// edge that was still sending the request, and its whole request is taken.
func TestStalledUpstreamTimesOut(t *testing.T) {
	for _, transport := range []string{"tcp", "udp"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			release := make(chan struct{})
			var once sync.Once
			faulted := func() { once.Do(func() { close(release) }) }
			var wg sync.WaitGroup
			t.Cleanup(func() { _ = ln.Close(); faulted(); wg.Wait() })
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer c.Close()
						_ = c.SetDeadline(time.Now().Add(time.Minute))
						var b [1]byte
						_, _ = c.Read(b[:])
						<-release // read nothing more until the client has its fault
						_, _ = io.Copy(io.Discard, c)
					}()
				}
			}()
			a := newPairAddrs(t)
			startGateway(t, a.OriginAdmin, originYAML(a, "http://"+ln.Addr().String(), "limits:\n  exchange_timeout: 1s\n"))
			edgeCfg := edgeYAML(a, "")
			if transport == "udp" {
				edgeCfg = udpEdgeYAML(a, a.Tunnel, "")
			}
			startGateway(t, a.EdgeAdmin, edgeCfg)
			c, err := net.Dial("tcp", a.Edge)
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
			big := strings.Repeat("<x/>", 6<<20) // 24 MiB: more than the tunnels' windows and the sockets hold
			sent := make(chan error, 1)
			go func() {
				_, err := fmt.Fprintf(c, "POST /svc HTTP/1.1\r\nHost: svc\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:put\"\r\nContent-Length: %d\r\n\r\n%s", len(big), big)
				sent <- err
			}()
			resp, err := frReadResponse(bufio.NewReader(c))
			require.NoError(t, err)
			faulted()
			require.Equal(t, "timeout", resp.Get("X-Soapgw-Error"), resp.String())
			require.NoError(t, <-sent, "the client's request was not taken whole")
		})
	}
}
