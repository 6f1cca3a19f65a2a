package e2e

// Codecs end to end: the generated traffic of every paper's family (internal/trafficgen) goes
// through a pair of real gateways with each codec, and every request and response must
// arrive byte for byte; then the same with the decoders deliberately desynchronized, which
// must cost resends and never a corrupted or lost message.

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/trafficgen"
)

// codecTraffic is a list of request/response body pairs, in wire order, from every
// family of the generator (the big and the non-HTTP-safe edge cases aside).
type codecExchange struct {
	family, name string
	req, resp    []byte
}

func codecTraffic(t testing.TB, perFamily int) []codecExchange {
	t.Helper()
	var out []codecExchange
	for _, fam := range trafficgen.Families {
		ms := trafficgen.Family(fam, perFamily, trafficgen.DefaultSeed)
		if fam == "edge" {
			// One message per case: each is sent as a request and answered with itself.
			for _, m := range ms {
				if !trafficgen.IsBig(m) {
					out = append(out, codecExchange{fam, m.Name, m.Body, m.Body})
				}
			}
			continue
		}
		for i := 0; i+1 < len(ms); i += 2 {
			require.Equal(t, trafficgen.Request, ms[i].Dir)
			out = append(out, codecExchange{fam, ms[i].Name, ms[i].Body, ms[i+1].Body})
		}
	}
	return out
}

// codecUpstream answers call i (header X-Call) with traffic[i]'s response, after checking
// the request body is exactly traffic[i]'s: a 200 with the right body means both
// directions arrived intact.
func codecUpstream(t testing.TB, traffic []codecExchange) *recordingServer {
	return startRecordingServer(t, func(r *recordedRequest) []byte {
		i, err := strconv.Atoi(r.Header("X-Call"))
		if err != nil || i < 0 || i >= len(traffic) || !bytes.Equal(r.Body, traffic[i].req) {
			return []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 22\r\n\r\nrequest body corrupted")
		}
		resp := traffic[i].resp
		return append(fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: text/xml; charset=utf-8\r\nContent-Length: %d\r\n\r\n", len(resp)), resp...)
	})
}

// codecCall sends one HTTP/1.1 keep-alive request on c and checks the response body.
func codecCall(c net.Conn, br *bufio.Reader, host string, x codecExchange, i int) error {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	ct := "text/xml; charset=utf-8"
	if bytes.Contains(x.req, []byte("http://www.w3.org/2003/05/soap-envelope")) {
		ct = "application/soap+xml; charset=utf-8"
	}
	req := fmt.Appendf(nil, "POST /svc/%s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nSOAPAction: \"urn:%s\"\r\nX-Call: %d\r\nContent-Length: %d\r\n\r\n",
		x.family, host, ct, x.name, i, len(x.req))
	if _, err := c.Write(append(req, x.req...)); err != nil {
		return err
	}
	r, err := frReadResponse(br)
	if err != nil {
		return err
	}
	if r.Status != 200 {
		return fmt.Errorf("call %d (%s/%s): status %d: %s", i, x.family, x.name, r.Status, trShort(string(r.Body)))
	}
	if !bytes.Equal(r.Body, x.resp) {
		return fmt.Errorf("call %d (%s/%s): response differs (%d bytes, want %d)", i, x.family, x.name, len(r.Body), len(x.resp))
	}
	return nil
}

// codecRun sends every exchange through addr with workers keep-alive clients; each worker
// takes every workers-th exchange, so each connection sees a mix of families in order.
func codecRun(t *testing.T, addr string, traffic []codecExchange, workers int) {
	t.Helper()
	var wg sync.WaitGroup
	var failed atomic.Int64
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for i := w; i < len(traffic); i += workers {
				if err := codecCall(c, br, addr, traffic[i], i); err != nil {
					failed.Add(1)
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.Zero(t, failed.Load())
}

// metricSum adds up the samples of a metric whose labels match every label=value given.
func metricSum(t testing.TB, admin, name string, labels ...string) float64 {
	t.Helper()
	code, m := httpGet("http://" + admin + "/metrics")
	require.Equal(t, 200, code)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{([^}]*)\} (\S+)$`)
	var sum float64
	for _, g := range re.FindAllStringSubmatch(m, -1) {
		ok := true
		for _, l := range labels {
			k, v, _ := bytes.Cut([]byte(l), []byte("="))
			if !bytes.Contains([]byte(g[1]), fmt.Appendf(nil, `%s="%s"`, k, v)) {
				ok = false
			}
		}
		if ok {
			v, err := strconv.ParseFloat(g[2], 64)
			require.NoError(t, err)
			sum += v
		}
	}
	return sum
}

func codecPair(t *testing.T, upstream, codecName string, env ...string) (pairAddrs, *gateway, *gateway) {
	a := newPairAddrs(t)
	origin := startGatewayEnv(t, a.OriginAdmin, originYAML(a, upstream, "  codec: "+codecName+"\n"), env)
	edgeCfg := edgeYAML(a, "") + "" // peer codec set below
	edgeCfg = string(regexp.MustCompile(`(?m)^      connections: 2$`).ReplaceAll([]byte(edgeCfg), []byte("      connections: 2\n      codec: "+codecName)))
	edge := startGatewayEnv(t, a.EdgeAdmin, edgeCfg, env)
	return a, origin, edge
}

// startGatewayEnv is startGateway with extra environment variables for the process.
func startGatewayEnv(t testing.TB, adminAddr, yml string, env []string) *gateway {
	t.Helper()
	path := filepath.Join(t.TempDir(), "soapgw.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yml), 0o600))
	p := startProcEnv(t, env, binary, "run", "--config", path, "--log-level", "debug")
	g := &gateway{proc: p, admin: adminAddr}
	g.waitReady(t, 10*time.Second)
	return g
}

func TestCodecsEndToEnd(t *testing.T) {
	traffic := codecTraffic(t, 24)
	up := codecUpstream(t, traffic)
	var raw int
	for _, x := range traffic {
		raw += len(x.req) + len(x.resp)
	}
	for _, tc := range []struct {
		codec    string
		onWire   string  // the codec the messages must be counted under
		maxRatio float64 // coded/raw payload bytes, both directions
	}{
		{"identity", "identity", 1.0},
		{"gzip", "gzip", 0.5},
		{"zstd", "zstd", 0.5},
		{"zstd-stream", "zstd-stream", 0.2},
		{"token", "token", 0.2},
		{"auto", "token", 0.2},
	} {
		t.Run(tc.codec, func(t *testing.T) {
			t.Parallel()
			a, origin, edge := codecPair(t, up.URL(), tc.codec)
			codecRun(t, a.Edge, traffic, 3)

			sent := metricSum(t, edge.admin, "soapgw_tunnel_codec_messages_total", "direction=sent", "codec="+tc.onWire)
			sent += metricSum(t, origin.admin, "soapgw_tunnel_codec_messages_total", "direction=sent", "codec="+tc.onWire)
			require.GreaterOrEqual(t, sent, float64(len(traffic)), "requests and responses counted under codec %s", tc.onWire)
			var payload, rawBytes float64
			for _, g := range []*gateway{edge, origin} {
				payload += metricSum(t, g.admin, "soapgw_tunnel_codec_payload_bytes_total", "direction=sent")
				rawBytes += metricSum(t, g.admin, "soapgw_tunnel_codec_raw_bytes_total", "direction=sent")
			}
			require.Positive(t, rawBytes)
			ratio := payload / rawBytes
			t.Logf("%s: %d exchanges, %.0f raw message bytes -> %.0f payload bytes (%.1f %%)", tc.codec, len(traffic), rawBytes, payload, 100*ratio)
			require.LessOrEqual(t, ratio, tc.maxRatio)
			for _, g := range []*gateway{edge, origin} {
				require.Zero(t, metricSum(t, g.admin, "soapgw_tunnel_codec_resyncs_total"), "no resync without fault injection")
				require.Zero(t, metricSum(t, g.admin, "soapgw_gateway_errors_total"))
			}
		})
	}
}

// The decoders of both gateways are desynchronized on purpose every few messages (see
// faultEnv in cmd/soapgw/codecs.go): every message must still arrive intact, because the
// receiver detects the failure (decode error or checksum), both ends start a new epoch,
// and the sender resends the message uncoded.
func TestCodecDesyncRecovery(t *testing.T) {
	traffic := codecTraffic(t, 16)
	up := codecUpstream(t, traffic)
	for _, name := range []string{"token", "zstd-stream"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, origin, edge := codecPair(t, up.URL(), name, "SOAPGW_FAULT_DESYNC_EVERY=7")
			codecRun(t, a.Edge, traffic, 4)
			var resyncs, resends float64
			for _, g := range []*gateway{edge, origin} {
				resyncs += metricSum(t, g.admin, "soapgw_tunnel_codec_resyncs_total")
				resends += metricSum(t, g.admin, "soapgw_tunnel_codec_resends_total")
				require.Zero(t, metricSum(t, g.admin, "soapgw_gateway_errors_total"), "a desync must not fail an exchange")
			}
			t.Logf("%s: %d exchanges, %.0f resyncs, %.0f resends", name, len(traffic), resyncs, resends)
			require.Positive(t, resyncs, "the fault injection must have desynchronized something")
			require.Equal(t, resyncs, resends, "every NACKed message is resent exactly once")
			// Coding resumes after each resync: most messages are still coded.
			coded := metricSum(t, edge.admin, "soapgw_tunnel_codec_messages_total", "direction=sent", "codec="+name)
			require.Greater(t, coded, float64(len(traffic))/2)
		})
	}
}

// largeXML is a DataSet-style message of at least n bytes built from the Northwind
// responses in testdata; seed varies its start so that no two are alike.
func largeXML(t testing.TB, n, seed int) []byte {
	t.Helper()
	var parts [][]byte
	for _, f := range []string{"0001-response.xml", "0003-response.xml"} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "corpus", "northwind", f))
		require.NoError(t, err)
		parts = append(parts, b)
	}
	out := fmt.Appendf(nil, `<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><Data seed="%d">`, seed)
	for i := seed; len(out) < n; i++ {
		out = append(out, parts[i%len(parts)]...)
	}
	return append(out, "</Data></soap:Body></soap:Envelope>"...)
}

// Messages larger than codecs.max_coded_message (1 MiB) are coded as they stream
// (zstd-streaming) instead of crossing the link raw, in both directions, byte for byte,
// between messages coded whole; over the TCP tunnel and over the UDP tunnel (through a
// relay that drops 2 % of the datagrams).
func TestCodecLargeMessagesCodedAsTheyStream(t *testing.T) {
	small := codecTraffic(t, 2)[:6]
	traffic := append([]codecExchange{}, small[:3]...)
	traffic = append(traffic,
		codecExchange{"northwind", "GetOrders", largeXML(t, 1500<<10, 1), largeXML(t, 3<<20, 2)},
		codecExchange{"northwind", "GetCustomers", []byte("<Get/>"), largeXML(t, 2<<20, 3)})
	traffic = append(traffic, small[3:]...)
	for _, transport := range []string{"tcp", "udp"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			up := codecUpstream(t, traffic)
			metric := "soapgw_tunnel_codec_"
			var a pairAddrs
			var origin, edge *gateway
			if transport == "tcp" {
				a, origin, edge = codecPair(t, up.URL(), "auto")
			} else {
				metric = "soapgw_udp_codec_"
				a = newPairAddrs(t)
				origin = startGateway(t, a.OriginAdmin, originYAML(a, up.URL(), "  codec: auto\n"))
				relay := startUDPRelay(t, a.Tunnel, 2, 0, 2*time.Millisecond, false)
				edge = startGateway(t, a.EdgeAdmin, udpEdgeYAML(a, relay.Addr(), "\n      codec: auto"))
			}
			codecRun(t, a.Edge, traffic, 2)

			var payload, raw, received float64
			for _, g := range []*gateway{edge, origin} {
				require.Positive(t, metricSum(t, g.admin, metric+"messages_total", "direction=sent", "codec=zstd-streaming"),
					"%s codes its large messages as they stream", g.admin)
				payload += metricSum(t, g.admin, metric+"payload_bytes_total", "direction=sent", "codec=zstd-streaming")
				raw += metricSum(t, g.admin, metric+"raw_bytes_total", "direction=sent", "codec=zstd-streaming")
				received += metricSum(t, g.admin, metric+"messages_total", "direction=received", "codec=zstd-streaming")
				require.Zero(t, metricSum(t, g.admin, "soapgw_tunnel_codec_fallbacks_total", "reason=too_large"))
				require.Zero(t, metricSum(t, g.admin, "soapgw_gateway_errors_total"))
			}
			require.Equal(t, float64(3), received)
			t.Logf("%s: large messages: %.0f raw bytes -> %.0f on the link (%.1f %%)", transport, raw, payload, 100*payload/raw)
			require.Less(t, payload, raw/8)
		})
	}
}
