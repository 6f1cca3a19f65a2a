package e2e

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// attachmentBody is call i's response: a SOAP envelope with a base64 attachment of
// about size bytes that no codec shrinks much (an ASP.NET GetDocument), the same bytes
// for the same i.
func attachmentBody(i, size int) []byte {
	raw := make([]byte, size*3/4)
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	for k := range raw {
		raw[k] = byte(rng.Uint32())
	}
	return fmt.Appendf(nil, `<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><GetDocumentResponse xmlns="urn:docs"><call>%d</call><GetDocumentResult>%s</GetDocumentResult></GetDocumentResponse></soap:Body></soap:Envelope>`,
		i, base64.StdEncoding.EncodeToString(raw))
}

// TestUDPLargeResponsesOverTCPWhileLossy: an edge on the UDP tunnel with fallback tcp,
// over a path that loses 3 % of its datagrams (the TCP path beside it loses none), fetches
// 200 KB attachments with 4 clients at once. QUIC's congestion control would crawl under
// that loss, so once the origin sees its packets lost it sends the large responses over
// the TCP tunnel instead (the edge collects them there); small ones stay on UDP. Every
// client gets its response byte for byte, every call runs once, and no exchange fails.
func TestUDPLargeResponsesOverTCPWhileLossy(t *testing.T) {
	t.Parallel()
	const calls, clients, size = 48, 4, 200 << 10
	var mu sync.Mutex
	ran := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		call := r.Header.Get("X-Call")
		mu.Lock()
		ran[call]++
		mu.Unlock()
		i, _ := strconv.Atoi(call)
		body := attachmentBody(i, size)
		if r.Header.Get("X-Small") != "" {
			body = body[:2000]
		}
		w.Header().Set("Content-Type", "text/xml; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}))
	t.Cleanup(up.Close)
	a := newPairAddrs(t)
	origin := startGateway(t, a.OriginAdmin, originYAML(a, up.URL, ""))
	relay := startUDPRelay(t, a.Tunnel, 3, 0, 2*time.Millisecond, true)
	edge := startGateway(t, a.EdgeAdmin, udpEdgeYAML(a, relay.Addr(), "\n      fallback: tcp"))

	client := &http.Client{Timeout: 60 * time.Second}
	var next, failed atomic.Int32
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= calls {
					return
				}
				req, _ := http.NewRequest("POST", "http://"+a.Edge+"/svc", bytes.NewReader([]byte(`<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><GetDocument xmlns="urn:docs"/></soap:Body></soap:Envelope>`)))
				req.Header.Set("Content-Type", "text/xml; charset=utf-8")
				req.Header.Set("SOAPAction", `"urn:docs/GetDocument"`)
				req.Header.Set("X-Call", strconv.Itoa(i))
				small := i%4 == 3
				if small {
					req.Header.Set("X-Small", "1")
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Logf("call %d: %v", i, err)
					failed.Add(1)
					continue
				}
				got, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				want := attachmentBody(i, size)
				if small {
					want = want[:2000]
				}
				if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, want) {
					t.Logf("call %d: status %d, %d bytes (want %d), err %v", i, resp.StatusCode, len(got), len(want), err)
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "every client got its response byte for byte")
	mu.Lock()
	require.Len(t, ran, calls)
	for call, n := range ran {
		require.Equal(t, 1, n, "call %s ran %d times", call, n)
	}
	mu.Unlock()
	diverted := metricSum(t, origin.admin, "soapgw_origin_responses_diverted_total")
	collected := metricSum(t, edge.admin, "soapgw_resumes_total", "role=edge", "result=diverted")
	t.Logf("%d calls: %v responses diverted to TCP, %v collected there; UDP loss seen by the origin %.3f",
		calls, diverted, collected, metricSum(t, origin.admin, "soapgw_udp_loss_ratio"))
	require.Positive(t, diverted, "large responses went over TCP on the lossy UDP path")
	require.Equal(t, diverted, collected)
	require.LessOrEqual(t, diverted, float64(calls-calls/4), "small responses stay on UDP")
	require.Zero(t, metricSum(t, edge.admin, "soapgw_gateway_errors_total"))
	require.Zero(t, metricSum(t, origin.admin, "soapgw_gateway_errors_total"))
}
