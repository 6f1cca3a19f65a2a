package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Concurrency and size: Go clients call the same Go upstream directly and through a pair;
// the responses must be identical.

// ccEchoHandler answers every request with a deterministic transformation of it: the
// body's SHA-256 and length in header fields, the SOAPAction echoed, and the body echoed
// between markers. No Date field, so two answers to the same request are identical
// bytes. "X-Resp-Chunked: 1" makes it stream the answer without a Content-Length
// (chunked to HTTP/1.1 callers); otherwise it sets Content-Length.
func ccEchoHandler(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
		return
	}
	sum := sha256.Sum256(body)
	h := w.Header()
	h["Date"] = nil
	h.Set("Content-Type", "text/xml; charset=utf-8")
	h.Set("X-Body-Sha256", hex.EncodeToString(sum[:]))
	h.Set("X-Body-Len", strconv.Itoa(len(body)))
	h["X-Echo-SOAPAction"] = []string{r.Header.Get("SOAPAction")}
	h["X-Echo-Target"] = []string{r.Method + " " + r.RequestURI}
	const pre, post = "<echo>", "</echo>"
	streamed := r.Header.Get("X-Resp-Chunked") == "1"
	if !streamed {
		h.Set("Content-Length", strconv.Itoa(len(pre)+len(body)+len(post)))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, pre)
	if streamed {
		f, _ := w.(http.Flusher)
		if f != nil {
			f.Flush() // commits to chunked framing, whatever the size
		}
		for len(body) > 0 {
			n := min(len(body), 256<<10)
			_, _ = w.Write(body[:n])
			body = body[n:]
			if f != nil {
				f.Flush()
			}
		}
	} else {
		_, _ = w.Write(body)
	}
	_, _ = io.WriteString(w, post)
}

func ccStartUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(ccEchoHandler))
	srv.Config.ReadHeaderTimeout = 10 * time.Second
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// ccRaw10 sends one HTTP/1.0 request (no keep-alive) on a new connection and returns
// every byte of the answer, up to the server's close.
func ccRaw10(ctx context.Context, addr, target, action string, body []byte) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.0\r\nHost: %s\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: %s\r\nContent-Length: %d\r\n\r\n",
		target, addr, action, len(body))
	b.Write(body)
	if _, err := c.Write(b.Bytes()); err != nil {
		return nil, err
	}
	return io.ReadAll(c)
}

// ccCall11 makes one call with a keep-alive net/http client and returns the response as
// comparable bytes: status line, header fields (sorted by net/http), body.
func ccCall11(ctx context.Context, client *http.Client, base, target, action string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", base+target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "text/xml; charset=utf-8")
	req.Header["SOAPAction"] = []string{action}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "%s %s\r\n", resp.Proto, resp.Status)
	_ = resp.Header.Write(&out)
	fmt.Fprintf(&out, "Content-Length(parsed): %d\r\n\r\n", resp.ContentLength)
	out.Write(rb)
	return out.Bytes(), nil
}

// ccBody is a deterministic request body for one call: SOAP envelope text around bytes
// of every value, of a size that varies from call to call.
func ccBody(client, call int) []byte {
	rng := rand.New(rand.NewPCG(uint64(client), uint64(call)))
	bin := make([]byte, rng.IntN(12<<10))
	for i := range bin {
		bin[i] = byte(rng.Uint32())
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><call client="%d" n="%d">`, client, call)
	b.Write(bin)
	b.WriteString("</call></soap:Body></soap:Envelope>")
	return b.Bytes()
}

func ccTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		MaxConnsPerHost:     48,
		MaxIdleConnsPerHost: 48,
		MaxIdleConns:        96,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
}

// TestConcurrencyPairVsDirect: 200 concurrent clients, each making HTTP/1.0 calls (a new
// connection per call) and HTTP/1.1 keep-alive calls (net/http, a bounded shared pool), to
// the upstream directly and through the pair; every answer through the pair must equal
// the direct one byte for byte.
func TestConcurrencyPairVsDirect(t *testing.T) {
	up := ccStartUpstream(t)
	// The default codec (auto): the bodies carry up to 12 KB of random bytes, which the
	// token codec codes as blobs at hundreds of MB/s. (Coded bit by bit, as before blobs,
	// they took ~1 MB/s under -race on each connection's single writer, and 200 clients
	// did not finish within the budget.)
	a, _, _ := startPair(t, up.URL)
	direct := up.Listener.Addr().String()

	const (
		clients = 200
		calls10 = 3
		calls11 = 4
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	trDirect, trPair := ccTransport(), ccTransport()
	defer trDirect.CloseIdleConnections()
	defer trPair.CloseIdleConnections()
	hcDirect := &http.Client{Transport: trDirect, Timeout: 20 * time.Second}
	hcPair := &http.Client{Transport: trPair, Timeout: 20 * time.Second}

	var (
		mu     sync.Mutex
		errs   []string
		nCalls int
	)
	report := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
		cancel() // stop early: one failure is enough to look at
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			<-start
			for k := range calls10 + calls11 {
				if ctx.Err() != nil {
					return
				}
				body := ccBody(c, k)
				sum := sha256.Sum256(body)
				target := fmt.Sprintf("/svc/client%d/call%d", c, k)
				action := fmt.Sprintf(`"urn:client%d:call%d"`, c, k)
				var got, want []byte
				var err error
				kind := "HTTP/1.1 keep-alive"
				if k < calls10 {
					kind = "HTTP/1.0"
					if want, err = ccRaw10(ctx, direct, target, action, body); err == nil {
						got, err = ccRaw10(ctx, a.Edge, target, action, body)
					}
				} else {
					if want, err = ccCall11(ctx, hcDirect, "http://"+direct, target, action, body); err == nil {
						got, err = ccCall11(ctx, hcPair, "http://"+a.Edge, target, action, body)
					}
				}
				if err != nil {
					report("client %d call %d (%s): %v", c, k, kind, err)
					return
				}
				if !bytes.Equal(got, want) {
					report("client %d call %d (%s): through the pair\n%q\ndirect\n%q", c, k, kind, trShort(string(got)), trShort(string(want)))
					return
				}
				if !bytes.Contains(want, []byte(hex.EncodeToString(sum[:]))) || !bytes.HasSuffix(want, append(append([]byte("<echo>"), body...), "</echo>"...)) {
					report("client %d call %d (%s): the upstream's answer does not match the request: %q", c, k, kind, trShort(string(want)))
					return
				}
				mu.Lock()
				nCalls++
				mu.Unlock()
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d failures, first: %s", len(errs), errs[0])
	}
	require.NoError(t, ctx.Err(), "calls did not finish in time")
	require.Equal(t, clients*(calls10+calls11), nCalls)
	t.Logf("%d calls through the pair (and as many direct) in %s", nCalls, time.Since(t0).Round(time.Millisecond))
}

// TestConcurrencySizeLadder: bodies from 0 B to 20 MB (random bytes, fixed seed) through
// the pair, sent with Content-Length and chunked, answered chunked and with Content-Length;
// the upstream's digest of what it received and the echoed body must match what was sent.
func TestConcurrencySizeLadder(t *testing.T) {
	up := ccStartUpstream(t)
	a, _, _ := startPair(t, up.URL)

	sizes := []int{0, 1, 1 << 10, 64 << 10, 1 << 20, 5 << 20, 20 << 20}
	rng := rand.New(rand.NewChaCha8([32]byte{'s', 'o', 'a', 'p', 'g', 'w'}))
	data := make([]byte, sizes[len(sizes)-1])
	for i := 0; i < len(data); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8 && i+j < len(data); j++ {
			data[i+j] = byte(v >> (8 * j))
		}
	}

	for _, chunkedReq := range []bool{false, true} {
		mode := "content-length request, chunked response"
		if chunkedReq {
			mode = "chunked request, content-length response"
		}
		t.Run(mode, func(t *testing.T) {
			// One keep-alive connection for the whole ladder: each exchange must leave it
			// in sync for the next.
			conn, err := net.DialTimeout("tcp", a.Edge, 2*time.Second)
			require.NoError(t, err)
			defer conn.Close()
			br := bufio.NewReaderSize(conn, 64<<10)
			for _, size := range sizes {
				body := data[:size]
				sum := sha256.Sum256(body)
				_ = conn.SetDeadline(time.Now().Add(15 * time.Second))

				var head bytes.Buffer
				fmt.Fprintf(&head, "POST /ladder/%d HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\n", size, a.Edge)
				if chunkedReq {
					head.WriteString("Transfer-Encoding: chunked\r\n\r\n")
				} else {
					fmt.Fprintf(&head, "X-Resp-Chunked: 1\r\nContent-Length: %d\r\n\r\n", size)
				}
				werr := make(chan error, 1)
				go func() {
					// Written concurrently with reading the answer, as a streaming client
					// would; chunk sizes vary (fixed seed).
					crng := rand.New(rand.NewPCG(uint64(size), 7))
					bw := bufio.NewWriterSize(conn, 64<<10)
					_, err := bw.Write(head.Bytes())
					if !chunkedReq {
						if err == nil {
							_, err = bw.Write(body)
						}
					} else {
						rest := body
						for err == nil && len(rest) > 0 {
							n := min(len(rest), 1+crng.IntN(300<<10))
							_, err = fmt.Fprintf(bw, "%x\r\n", n)
							if err == nil {
								_, err = bw.Write(rest[:n])
							}
							if err == nil {
								_, err = bw.WriteString("\r\n")
							}
							rest = rest[n:]
						}
						if err == nil {
							_, err = bw.WriteString("0\r\n\r\n")
						}
					}
					if err == nil {
						err = bw.Flush()
					}
					werr <- err
				}()
				resp, err := trReadResponse(br, "POST")
				require.NoError(t, err, "size %d", size)
				require.NoError(t, <-werr, "size %d: writing the request", size)
				require.Equal(t, 200, resp.Status, "size %d: %s", size, resp.Head)
				require.Equal(t, hex.EncodeToString(sum[:]), trHeaderGet(resp.Head, "X-Body-Sha256"), "size %d: digest of the body the upstream received", size)
				require.Equal(t, strconv.Itoa(size), trHeaderGet(resp.Head, "X-Body-Len"), "size %d", size)
				require.Equal(t, !chunkedReq, resp.Chunked, "size %d: response framing at the client: %s", size, resp.Head)
				require.True(t, bytes.HasPrefix(resp.Body, []byte("<echo>")) && bytes.HasSuffix(resp.Body, []byte("</echo>")), "size %d", size)
				echoed := resp.Body[len("<echo>") : len(resp.Body)-len("</echo>")]
				got := sha256.Sum256(echoed)
				require.Equal(t, hex.EncodeToString(sum[:]), hex.EncodeToString(got[:]), "size %d: echoed body (%d bytes) differs from the request body", size, len(echoed))
				require.False(t, strings.Contains(resp.Head, "Connection: close"), "size %d: edge closes: %s", size, resp.Head)
			}
		})
	}
}
