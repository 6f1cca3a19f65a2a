package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/netsim"
	"github.com/soapgw/soapgw/internal/testutil"
)

// startPairOver starts an origin in front of upstreamURL and an edge whose peer uses
// transport ("tcp" or "udp"); originExtra and edgeExtra are top-level YAML.
func startPairOver(t *testing.T, transport, upstreamURL, originExtra, edgeExtra string) pairAddrs {
	a := newPairAddrs(t)
	startGateway(t, a.OriginAdmin, originYAML(a, upstreamURL, originExtra))
	edgeCfg := edgeYAML(a, edgeExtra)
	if transport == "udp" {
		edgeCfg = udpEdgeYAML(a, a.Tunnel, "") + edgeExtra
	}
	startGateway(t, a.EdgeAdmin, edgeCfg)
	return a
}

// sendLarge dials the edge and writes a SOAP request with body from a goroutine (the
// gateways may answer before they have read it); the channel gets the write's result.
func sendLarge(t *testing.T, edge, path, body string) (net.Conn, <-chan error) {
	c, err := net.Dial("tcp", edge)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
	sent := make(chan error, 1)
	go func() { _, err := c.Write(frSoapRequest("svc", path, false, body)); sent <- err }()
	return c, sent
}

// early413 is a server's answer to a request over its body limit, sent before the body.
const early413 = "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: text/html\r\nContent-Length: 23\r\nConnection: close\r\n\r\n<h1>body too large</h1>"

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
			answered, answer0 := testutil.Gate()
			url := "http://" + testutil.RawServer(t, func(c net.Conn, br *bufio.Reader) {
				req, err := readRawRequestHead(br)
				if err != nil {
					return
				}
				if strings.HasPrefix(req, "POST /big ") {
					_, _ = io.WriteString(c, early413)
					<-answered
					_, _ = io.Copy(io.Discard, br) // until the origin closes
					return
				}
				_, _ = io.CopyN(io.Discard, br, int64(len(smallBody)))
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: 4\r\n\r\n<a/>")
				_, _ = io.Copy(io.Discard, br)
			}, answer0)
			limits := "limits:\n  max_request_bytes: 8MiB\n"
			a := startPairOver(t, transport, url, limits, limits)

			c, sent := sendLarge(t, a.Edge, "/big", strings.Repeat("<x/>", 1<<20)) // 4 MiB, far more than the sockets hold
			br := bufio.NewReader(c)
			resp, err := frReadResponse(br)
			require.NoError(t, err, "no answer to the large request")
			answer0()
			require.Equal(t, 413, resp.Status, resp.String())
			require.Equal(t, "<h1>body too large</h1>", string(resp.Body))
			require.Equal(t, "text/html", resp.Get("Content-Type"))
			require.NoError(t, <-sent, "the client's request was not taken whole")

			_, err = c.Write(frSoapRequest("svc", "/small", false, smallBody))
			require.NoError(t, err)
			resp, err = frReadResponse(br)
			require.NoError(t, err, "no answer to the next call on the same connection")
			require.Equal(t, 200, resp.Status, resp.String())
			require.Equal(t, "<a/>", string(resp.Body))
		})
	}
}

// early413Server is a server that answers every request with early413 once it has its
// head, and reads nothing more until release is called (the test has its answer).
func early413Server(t *testing.T) (url string, release func()) {
	answered, release := testutil.Gate()
	return "http://" + testutil.RawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequestHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, early413)
		<-answered
	}, release), release
}

// requireEarly413 checks that resp is early413 byte for byte, relayed with Connection:
// close (the rest of the request was never read).
func requireEarly413(t *testing.T, resp *frResp) {
	t.Helper()
	require.Equal(t, 413, resp.Status, resp.String())
	require.Equal(t, "<h1>body too large</h1>", string(resp.Body))
	require.Equal(t, "text/html", resp.Get("Content-Type"))
	require.Equal(t, "close", resp.Get("Connection"), "the request was not read whole: the connection cannot carry another")
}

// TestEarlyAnswerPastTheDrain: as TestEarlyAnswer, with a request so large (200 MiB) that
// the origin stops reading it: it drains at most 64 MiB after the answer, then resets the
// stream. The answer was sent whole before that reset; through both tunnels the client
// gets it byte for byte, and then its connection closes (the rest of its request was
// never read). Before, the edge's failed write ended the call with tunnel_lost.
func TestEarlyAnswerPastTheDrain(t *testing.T) {
	for _, transport := range []string{"tcp", "udp"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			url, answer0 := early413Server(t)
			limits := "limits:\n  max_request_bytes: 256MiB\n"
			a := startPairOver(t, transport, url, limits, limits)

			c, err := net.Dial("tcp", a.Edge)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
			const size = 200 << 20
			go func() { // the client sends until the edge stops taking it
				head := frSoapRequest("svc", "/big", false, "")
				head = append(head[:len(head)-len("0\r\n\r\n")], fmt.Sprintf("%d\r\n\r\n", size)...)
				if _, err := c.Write(head); err != nil {
					return
				}
				chunk := []byte(strings.Repeat("<x/>", 1<<18)) // 1 MiB
				for range size / len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
			br := bufio.NewReader(c)
			resp, err := frReadResponse(br)
			require.NoError(t, err, "no answer to the large request")
			answer0()
			requireEarly413(t, resp)
			_, err = br.ReadByte()
			require.Error(t, err, "the edge kept a connection whose request it did not read")
		})
	}
}

// TestEarlyAnswerOverASlowLink: the server answers an 8 MiB request at once (413) on a
// 1 Mbit/s path between the gateways, where the rest of the request would take a minute
// to cross. The origin drains it for two seconds at most, then resets the request's side
// of the stream; the edge relays the answer, which had arrived whole, with Connection:
// close. Over both tunnels the client gets the server's answer in seconds, not after its
// upload crossed the link.
func TestEarlyAnswerOverASlowLink(t *testing.T) {
	for _, transport := range []string{"tcp", "udp"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			url, answer0 := early413Server(t)
			limits := "limits:\n  max_request_bytes: 16MiB\n"
			a := newPairAddrs(t)
			startGateway(t, a.OriginAdmin, originYAML(a, url, limits))
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			const delay, rate = 10 * time.Millisecond, 128 << 10 // bytes/s: 1 Mbit/s
			if transport == "tcp" {
				link, err := netsim.NewLink(ctx, a.Tunnel, netsim.LinkConfig{Delay: delay, Bandwidth: rate})
				require.NoError(t, err)
				t.Cleanup(func() { _ = link.Close() })
				viaLink := a
				viaLink.Tunnel = link.Addr()
				startGateway(t, a.EdgeAdmin, edgeYAML(viaLink, limits))
			} else {
				link, err := netsim.NewUDPLink(ctx, a.Tunnel, netsim.UDPLinkConfig{Delay: delay, Bandwidth: rate})
				require.NoError(t, err)
				t.Cleanup(func() { _ = link.Close() })
				startGateway(t, a.EdgeAdmin, udpEdgeYAML(a, link.Addr(), "")+limits)
			}

			noise := make([]byte, 6<<20) // incompressible: the codecs cannot shrink it past the link
			_, _ = rand.Read(noise)
			c, sent := sendLarge(t, a.Edge, "/big", "<b>"+base64.StdEncoding.EncodeToString(noise)+"</b>") // 8 MiB: a minute at 1 Mbit/s
			start := time.Now()
			resp, err := frReadResponse(bufio.NewReader(c))
			require.NoError(t, err, "no answer to the large request")
			answer0()
			took := time.Since(start)
			requireEarly413(t, resp)
			require.Less(t, took, 15*time.Second, "the answer waited for the request to cross the link")
			t.Logf("answer after %v", took)
			<-sent // the edge lingers, then closes: the write ends either way
		})
	}
}

// readRawRequestHead reads a request's head (request line and fields) and returns it.
func readRawRequestHead(br *bufio.Reader) (string, error) {
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return "", err
		}
		head.WriteString(line)
		if line == "\r\n" {
			return head.String(), nil
		}
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
			limits := "limits:\n  max_request_bytes: 8MiB\n"
			a := startPairOver(t, transport, down, limits, limits)
			for range 3 {
				c, sent := sendLarge(t, a.Edge, "/svc", strings.Repeat("<x/>", 1<<20))
				resp, err := frReadResponse(bufio.NewReader(c))
				require.NoError(t, err)
				require.Equal(t, "upstream_unreachable", resp.Get("X-Soapgw-Error"), resp.String())
				require.NoError(t, <-sent, "the client's request was not taken whole")
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
			faulted, fault0 := testutil.Gate()
			url := "http://" + testutil.RawServer(t, func(c net.Conn, br *bufio.Reader) {
				_, _ = br.ReadByte()
				<-faulted // read nothing more until the client has its fault
				_, _ = io.Copy(io.Discard, br)
			}, fault0)
			a := startPairOver(t, transport, url, "limits:\n  exchange_timeout: 1s\n", "")
			// 24 MiB: more than the tunnels' windows and the sockets hold.
			c, sent := sendLarge(t, a.Edge, "/svc", strings.Repeat("<x/>", 6<<20))
			resp, err := frReadResponse(bufio.NewReader(c))
			require.NoError(t, err)
			fault0()
			require.Equal(t, "timeout", resp.Get("X-Soapgw-Error"), resp.String())
			require.NoError(t, <-sent, "the client's request was not taken whole")
		})
	}
}
