package e2e

// "Never a corrupted or mixed-up message, even when a gateway restarts": concurrent
// clients keep calling through a pair while the origin and the edge are restarted, and
// every 200 must be exactly the response to its own request.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// frRestartBody is the upstream's answer to request id with body: it encodes the id and
// the SHA-256 of the body the upstream received, padded to a size that varies with the
// body, so responses of different lengths interleave on the tunnel.
func frRestartBody(id string, body []byte) []byte {
	sum := sha256.Sum256(body)
	pad := (int(sum[0])<<8 | int(sum[1])) % 700
	return fmt.Appendf(nil, `<resp id="%s" sha256="%s" len="%d">%s</resp>`, id, hex.EncodeToString(sum[:]), len(body), strings.Repeat(id+";", pad))
}

// frCallRecord is one client call's outcome.
type frCallRecord struct {
	id         string
	start, end time.Time
	kind       string // ok, fault, conn, hang, wrong
	detail     string
	reason     string // a fault's reason text
}

type frWindow struct {
	name     string
	sig      string // "origin-term", "origin-kill", "edge-term"
	from, to time.Time
}

func (w frWindow) overlaps(c frCallRecord, grace time.Duration) bool {
	return c.start.Before(w.to.Add(grace)) && c.end.After(w.from)
}

func (w frWindow) inFlightAtSignal(c frCallRecord) bool {
	return c.start.Before(w.from) && c.end.After(w.from)
}

func TestRestartNoCorruption(t *testing.T) {
	const (
		clients  = 8
		maxCalls = 5000
		maxTime  = 20 * time.Second
	)

	// Upstream: checks each request against what its client registered, and answers
	// with frRestartBody.
	var (
		expMu    sync.Mutex
		expected = map[string]string{} // id → hex sha256 of the body the client sent
		seen     = map[string]int{}
		upErrs   []string
	)
	srv := startRecordingServer(t, func(r *recordedRequest) []byte {
		id := r.Header("X-Req-Id")
		target := strings.SplitN(string(r.Head), " ", 3)[1]
		sum := sha256.Sum256(r.Body)
		expMu.Lock()
		seen[id]++
		switch want, ok := expected[id]; {
		case !ok:
			upErrs = append(upErrs, fmt.Sprintf("unknown request id %q (target %s)", id, target))
		case want != hex.EncodeToString(sum[:]):
			upErrs = append(upErrs, fmt.Sprintf("request %s reached the server with a different body (%d bytes)", id, len(r.Body)))
		case target != "/echo/"+id:
			upErrs = append(upErrs, fmt.Sprintf("request %s reached the server with target %s", id, target))
		case seen[id] > 1:
			upErrs = append(upErrs, fmt.Sprintf("request %s reached the server %d times", id, seen[id]))
		}
		expMu.Unlock()
		// A varying service time keeps exchanges in flight at every moment, so each
		// restart catches some mid-way.
		time.Sleep(time.Duration(sum[2]%50) * time.Millisecond)
		return soapResponse(200, "OK", [][2]string{{"Content-Type", "text/xml; charset=utf-8"}, {"X-Req-Id", id}}, frRestartBody(id, r.Body))
	})

	a := newPairAddrs(t)
	oyml, eyml := originYAML(a, srv.URL(), ""), edgeYAML(a, "")
	origin := startGateway(t, a.OriginAdmin, oyml)
	edge := startGateway(t, a.EdgeAdmin, eyml)

	var (
		total   atomic.Int64
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		recMu   sync.Mutex
		records []frCallRecord
	)
	deadline := time.Now().Add(maxTime)
	client := func(n int) {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(uint64(n), 42))
		http10 := n >= clients-2 // two HTTP/1.0 clients without keep-alive
		v12 := n%2 == 1
		var (
			conn net.Conn
			br   *bufio.Reader
		)
		defer func() {
			if conn != nil {
				_ = conn.Close()
			}
		}()
		for seq := 0; ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			if time.Now().After(deadline) || total.Add(1) > maxCalls {
				return
			}
			id := fmt.Sprintf("c%d-%d", n, seq)
			payload := make([]byte, 50+rng.IntN(4000))
			for i := range payload {
				payload[i] = "abcdefghijklmnopqrstuvwxyz0123456789 <>/="[rng.IntN(41)]
			}
			body := fmt.Appendf(nil, `<req id="%s"><![CDATA[%s]]></req>`, id, payload)
			sum := sha256.Sum256(body)
			expMu.Lock()
			expected[id] = hex.EncodeToString(sum[:])
			expMu.Unlock()
			req := frSoapRequest(a.Edge, "/echo/"+id, v12, string(body), "X-Req-Id: "+id)
			if http10 {
				req = bytes.Replace(req, []byte(" HTTP/1.1\r\n"), []byte(" HTTP/1.0\r\n"), 1)
			}

			rec := frCallRecord{id: id, start: time.Now()}
			var (
				r   *frResp
				err error
			)
			if conn == nil {
				conn, err = net.DialTimeout("tcp", a.Edge, 2*time.Second)
				if err == nil {
					br = bufio.NewReader(conn)
				} else {
					conn = nil
				}
			}
			if err == nil {
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err = conn.Write(req); err == nil {
					r, err = frReadResponse(br)
				}
			}
			rec.end = time.Now()
			switch {
			case err != nil:
				rec.kind, rec.detail = "conn", err.Error()
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					rec.kind = "hang"
				}
			case r.Status == 200:
				want := frRestartBody(id, body)
				if r.Get("X-Req-Id") != id || !bytes.Equal(r.Body, want) {
					rec.kind = "wrong"
					rec.detail = fmt.Sprintf("200 for %s is not its response: X-Req-Id %q, body %d bytes (want %d): %.200q", id, r.Get("X-Req-Id"), len(r.Body), len(want), r.Body)
				} else {
					rec.kind = "ok"
				}
			default:
				rec.kind, rec.detail = "fault", r.Get("X-Soapgw-Error")
				if f, err := frParseFault(r.Body, v12); err == nil {
					rec.reason = f.Reason + " (exchange " + f.Exchange + ")"
				}
				semantic, _ := strconv.Atoi(r.Get("X-Soapgw-Status"))
				if ferr := frCheckFault(r, semantic, r.Get("X-Soapgw-Error"), v12); ferr != nil || !r.Has("X-Soapgw-Error") {
					rec.kind = "wrong"
					rec.detail = fmt.Sprintf("non-200 that is not a gateway fault (%v): %s", ferr, r)
				}
			}
			if err != nil || http10 || r.closes() {
				if conn != nil {
					_ = conn.Close()
				}
				conn = nil
			}
			recMu.Lock()
			records = append(records, rec)
			recMu.Unlock()
			if rec.kind == "conn" {
				time.Sleep(20 * time.Millisecond) // edge restarting: do not spin
			} else {
				time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
			}
		}
	}
	wg.Add(clients)
	for i := range clients {
		go client(i)
	}
	stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopClients()

	var windows []frWindow
	pause := func() { time.Sleep(700 * time.Millisecond) }
	restartOrigin := func(name string, sig syscall.Signal) {
		w := frWindow{name: name, from: time.Now()}
		if sig == syscall.SIGKILL {
			w.sig = "origin-kill"
			origin.kill()
		} else {
			w.sig = "origin-term"
			require.True(t, origin.signal(sig, 10*time.Second), "origin did not drain and exit")
			require.Equal(t, 0, origin.exitCode(time.Second), "graceful origin exit code")
		}
		exited := time.Now()
		origin = startGateway(t, a.OriginAdmin, oyml)
		started := time.Now()
		edge.waitReady(t, 10*time.Second)
		w.to = time.Now()
		windows = append(windows, w)
		t.Logf("%s: restarted in %s (old one exited after %s, new one ready after %s more, edge reconnected after %s more)", name,
			w.to.Sub(w.from).Round(time.Millisecond), exited.Sub(w.from).Round(time.Millisecond),
			started.Sub(exited).Round(time.Millisecond), w.to.Sub(started).Round(time.Millisecond))
	}

	pause()
	restartOrigin("origin SIGTERM #1", syscall.SIGTERM)
	pause()
	restartOrigin("origin SIGTERM #2", syscall.SIGTERM)
	pause()
	restartOrigin("origin SIGKILL", syscall.SIGKILL)
	pause()
	{
		w := frWindow{name: "edge SIGTERM", sig: "edge-term", from: time.Now()}
		require.True(t, edge.signal(syscall.SIGTERM, 10*time.Second), "edge did not drain and exit")
		require.Equal(t, 0, edge.exitCode(time.Second), "graceful edge exit code")
		edge = startGateway(t, a.EdgeAdmin, eyml)
		w.to = time.Now()
		windows = append(windows, w)
		t.Logf("%s: restarted in %s", w.name, w.to.Sub(w.from).Round(time.Millisecond))
	}
	pause()
	stopClients()

	// Verdict.
	recMu.Lock()
	defer recMu.Unlock()
	counts := map[string]int{}
	causes := map[string]int{}
	for _, c := range records {
		counts[c.kind]++
		if c.kind == "fault" {
			causes[c.detail]++
		}
	}
	t.Logf("%d calls: %v; fault causes: %v", len(records), counts, causes)
	for _, w := range windows {
		wc := map[string]int{}
		inflight := map[string]int{}
		for _, c := range records {
			if w.overlaps(c, 0) {
				wc[c.kind]++
			}
			if w.inFlightAtSignal(c) {
				inflight[c.kind]++
			}
		}
		t.Logf("%-18s %5s: overlapping calls %v; in flight at the signal %v", w.name, w.to.Sub(w.from).Round(time.Millisecond), wc, inflight)
	}

	var problems []string
	for _, c := range records {
		switch c.kind {
		case "wrong":
			problems = append(problems, c.id+": "+c.detail)
		case "hang":
			problems = append(problems, c.id+": no response within 10s: "+c.detail)
		case "conn":
			// A connection error is acceptable while the edge restarts, and for an
			// exchange in flight when the origin is killed (a response cut off mid-body
			// is aborted so the client cannot take it for a whole one).
			ok := false
			for _, w := range windows {
				if (w.sig == "edge-term" && w.overlaps(c, 300*time.Millisecond)) || (w.sig == "origin-kill" && w.inFlightAtSignal(c)) {
					ok = true
				}
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: connection error outside an edge restart (%s..%s): %s", c.id, c.start.Format("15:04:05.000"), c.end.Format("15:04:05.000"), c.detail))
			}
		}
		// Exchanges in flight when the origin is asked to drain must all succeed.
		// origin_unreachable means the edge gave up waiting for a tunnel (the restart took
		// longer than the peer's dial_timeout): the origin never accepted that exchange.
		if c.kind != "ok" && !(c.kind == "fault" && c.detail == "origin_unreachable") {
			for _, w := range windows {
				if w.sig == "origin-term" && w.inFlightAtSignal(c) {
					problems = append(problems, fmt.Sprintf("%s: in flight when the origin was asked to drain (%s), yet it failed: %s %s %s", c.id, w.name, c.kind, c.detail, c.reason))
				}
			}
		}
	}
	expMu.Lock()
	problems = append(problems, upErrs...)
	expMu.Unlock()
	if len(problems) > 10 {
		problems = append(problems[:10], fmt.Sprintf("… and %d more", len(problems)-10))
	}
	require.Empty(t, problems)
	require.Greater(t, counts["ok"], 200, "too few successful calls to mean anything")
	for _, w := range windows {
		n := 0
		for _, c := range records {
			if w.overlaps(c, 0) {
				n++
			}
		}
		require.Greater(t, n, 0, "no call overlapped %s", w.name)
	}
	// Traffic flows after all of it.
	frHealthy(t, edge)
	frHealthy(t, origin)
}
