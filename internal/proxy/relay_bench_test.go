package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/proxy"
	"github.com/soapgw/soapgw/internal/tunnel"
)

// relay is an edge and an origin joined by a tunnel over TCP loopback, in front of a
// net/http upstream: the whole data path of production, in one process.
type relay struct {
	upstream, edge string
	close          func()
}

func startRelay(tb testing.TB, respSize int) *relay {
	tb.Helper()
	body := bytes.Repeat([]byte("x"), respSize)
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/xml; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})}
	go func() { _ = up.Serve(upLn) }()

	origin, err := proxy.NewOrigin(proxy.OriginConfig{Upstreams: []proxy.Upstream{{Name: "svc", Address: upLn.Addr().String(), Chunked: true, PoolSize: 256}}}, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tunLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := tunnel.NewServer(tunnel.ServerConfig{}, nil, nil, func(ctx context.Context, st *tunnel.Stream) { origin.ServeStream(ctx, st) })
	go func() { _ = srv.Serve(tunLn) }()
	peer := tunnel.NewPeer(context.Background(), tunnel.PeerConfig{Name: "dc1", Address: tunLn.Addr().String(), Connections: 2}, nil, nil)
	edge, err := proxy.NewEdge(proxy.EdgeConfig{
		Routes: []proxy.Route{{Peer: "dc1", Upstream: "svc"}},
		Peers: map[string]proxy.Opener{"dc1": proxy.OpenerFunc(func(ctx context.Context) (proxy.Stream, error) {
			st, err := peer.OpenStream(ctx)
			if err != nil {
				return nil, err
			}
			return st, nil
		})},
	}, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	edgeLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() { _ = edge.Serve(edgeLn, "soap") }()
	deadline := time.Now().Add(5 * time.Second)
	for !peer.Ready() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return &relay{
		upstream: upLn.Addr().String(),
		edge:     edgeLn.Addr().String(),
		close: func() {
			_ = edge.Shutdown(context.Background())
			_ = peer.Close()
			_ = tunLn.Close()
			_ = srv.Shutdown(context.Background())
			origin.Close()
			_ = up.Close()
		},
	}
}

// client is a minimal HTTP/1.1 keep-alive client, so the benchmark measures the gateways
// and not a client library.
type client struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
}

func dialClient(tb testing.TB, addr string, reqSize int) *client {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	body := bytes.Repeat([]byte("y"), reqSize)
	req := fmt.Appendf(nil, "POST /svc HTTP/1.1\r\nHost: %s\r\nContent-Type: text/xml; charset=utf-8\r\nSOAPAction: \"urn:bench\"\r\nContent-Length: %d\r\n\r\n", addr, len(body))
	return &client{c: c, br: bufio.NewReaderSize(c, 64<<10), req: append(req, body...)}
}

func (c *client) call() error {
	if _, err := c.c.Write(c.req); err != nil {
		return err
	}
	resp, err := httpwire.ReadResponse(c.br, "POST", httpwire.Limits{})
	if err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// BenchmarkRelay measures one exchange through the gateway pair against the same call
// made directly, for 1 KB and 64 KB messages, with 1 and 64 concurrent keep-alive
// clients. Client, server and both gateways share the machine's cores, as on the target
// 2-core box. Run:
//
//	go test -run '^$' -bench Relay -benchtime 3s ./internal/proxy/
//
// Reported: ns/op (sequential: latency; parallel: inverse throughput), exchanges/s,
// p50-µs (median latency of one exchange), B/op and allocs/op for the whole process.
func BenchmarkRelay(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		r := startRelay(b, size)
		for _, clients := range []int{1, 64} {
			for _, path := range []struct{ name, addr string }{{"direct", r.upstream}, {"pair", r.edge}} {
				name := fmt.Sprintf("size=%dKB/clients=%d/%s", size>>10, clients, path.name)
				b.Run(name, func(b *testing.B) { benchCalls(b, path.addr, size, clients) })
			}
		}
		r.close()
	}
}

func benchCalls(b *testing.B, addr string, size, clients int) {
	cs := make([]*client, clients)
	for i := range cs {
		cs[i] = dialClient(b, addr, size)
		if err := cs[i].call(); err != nil { // warm the connection and the pools
			b.Fatal(err)
		}
	}
	defer func() {
		for _, c := range cs {
			_ = c.c.Close()
		}
	}()
	lat := make([][]time.Duration, clients)
	b.ReportAllocs()
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	created := func() uint64 {
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[0].Value.Uint64()
	}
	goroutines0 := created()
	start := time.Now()
	var wg sync.WaitGroup
	var next sync.Mutex
	remaining := b.N
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				if remaining == 0 {
					next.Unlock()
					return
				}
				remaining--
				next.Unlock()
				t0 := time.Now()
				if err := c.call(); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds())/1e3, "p99-µs")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "exchanges/s")
	// Goroutines started per exchange, client's included: each is a hand-off (and
	// often a thread wake-up) on the data path.
	b.ReportMetric(float64(created()-goroutines0-uint64(clients))/float64(b.N), "goroutines/op")
}
