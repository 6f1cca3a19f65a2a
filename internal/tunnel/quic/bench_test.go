package quic

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/soapgw/soapgw/internal/codec"
	"github.com/soapgw/soapgw/internal/soapdemo"

	"github.com/soapgw/soapgw/internal/peerauth"
	"github.com/soapgw/soapgw/internal/tunnel"
)

// BenchmarkTransportExchange compares one sequential 1 KB request/response exchange over
// the UDP tunnel and over the TCP tunnel, both on loopback, identity-coded, side by side in
// one run. Besides wall time per exchange it reports the process CPU time per exchange
// (both gateways live in this process), the figure the "UDP ≤ 1.2 × TCP" is about.
func BenchmarkTransportExchange(b *testing.B) {
	msg := make([]byte, 1024)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	run := func(b *testing.B, open func(ctx context.Context) (rw streamRW, err error)) {
		ctx := context.Background()
		buf := make([]byte, 4096)
		b.ReportAllocs()
		b.SetBytes(2 * int64(len(msg)))
		cpu0 := cpuTime()
		for b.Loop() {
			st, err := open(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := st.Write(msg); err != nil {
				b.Fatal(err)
			}
			if err := st.CloseWrite(); err != nil {
				b.Fatal(err)
			}
			n := 0
			for {
				k, err := st.Read(buf[n:])
				n += k
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			if n != len(msg) {
				b.Fatalf("read %d bytes", n)
			}
			_ = st.Close()
		}
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
	}
	// udp: redundancy off; udp-auto: the default, datagrams negotiated, no copies while
	// nothing is lost (what the negotiation alone costs).
	for _, v := range []struct {
		name string
		mode Redundancy
	}{{"udp", RedundancyOff}, {"udp-auto", RedundancyAuto}} {
		b.Run(v.name, func(b *testing.B) {
			p := newPair(b, pairOptions{plain: true, copies: v.mode})
			p.setHandler(func(_ context.Context, st *Stream) {
				defer st.Close()
				req, _ := io.ReadAll(st)
				_, _ = st.Write(req)
				_ = st.CloseWrite()
			})
			pk0 := p.counter(b, "soapgw_udp_packets_total", "kind", "sent")
			run(b, func(ctx context.Context) (streamRW, error) { return p.peer.OpenStream(ctx) })
			b.ReportMetric((p.counter(b, "soapgw_udp_packets_total", "kind", "sent")-pk0)/float64(b.N), "packets/op")
		})
	}
	b.Run("tcp", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		// Authenticated as in production: TLS 1.3 and the key proof, like the UDP pair.
		key, _ := peerauth.GenerateKey()
		keys, _ := peerauth.ParseKeys("k", []byte(key))
		auth, _ := peerauth.NewServer(peerauth.ServerConfig{Keys: keys})
		client, _ := peerauth.NewClient(peerauth.ClientConfig{Keys: keys})
		srv := tunnel.NewServer(tunnel.ServerConfig{Session: &tunnel.Config{}, Authenticate: auth.Handshake}, nil, nil, func(_ context.Context, st *tunnel.Stream) {
			defer st.Close()
			req, _ := io.ReadAll(st)
			_, _ = st.Write(req)
			_ = st.CloseWrite()
		})
		go func() { _ = srv.Serve(ln) }()
		peer := tunnel.NewPeer(context.Background(), tunnel.PeerConfig{Name: "bench", Address: ln.Addr().String(), Connections: 1, Session: &tunnel.Config{},
			Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				return client.Handshake(ctx, c)
			}}, nil, nil)
		run(b, func(ctx context.Context) (streamRW, error) { return peer.OpenStream(ctx) })
		_ = peer.Close()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = ln.Close()
	})
}

type streamRW interface {
	io.ReadWriter
	CloseWrite() error
	Close() error
}

func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkStressCodedBytes reports the token codec's coded bytes per Stress message
// (seed 000's Axis traffic, internal/soapdemo) over the UDP tunnel, sequentially and with
// 16 concurrent callers, beside the TCP tunnel's, all in one run. Sequential calls keep
// the UDP tunnel's sequenced lane free, so it codes as TCP does; concurrent calls find the
// lane busy at times and code those messages stateless ("lane-busy-%").
func BenchmarkStressCodedBytes(b *testing.B) {
	const calls = 1000
	tok, _ := codec.NewPolicy("token", 0)
	exchange := func(b *testing.B, open func(ctx context.Context) (streamRW, error), i int) {
		st, err := open(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		if _, err := st.Write(soapdemo.StressRequest(i)); err != nil {
			b.Fatal(err)
		}
		if err := st.CloseWrite(); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadAll(st); err != nil {
			b.Fatal(err)
		}
	}
	respond := func(r io.Reader, w interface {
		io.Writer
		CloseWrite() error
	}) {
		req, _ := io.ReadAll(r)
		_, _ = w.Write(soapdemo.StressResponse(len(req)))
		_ = w.CloseWrite()
	}
	for _, tc := range []struct{ workers, window int }{{1, 1}, {16, 1}, {16, 4}, {16, 0}} {
		workers := tc.workers
		name := fmt.Sprint(tc.window)
		if tc.window == 0 {
			name = "auto"
		}
		b.Run(fmt.Sprintf("udp/callers=%d/window=%s", workers, name), func(b *testing.B) {
			for b.Loop() {
				p := newPair(b, pairOptions{codecs: true, encoding: tok, plain: true, window: tc.window})
				p.setHandler(func(_ context.Context, st *Stream) { defer st.Close(); respond(st, st) })
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						for i := w; i < calls; i += workers {
							exchange(b, func(ctx context.Context) (streamRW, error) { return p.peer.OpenStream(ctx) }, i)
						}
					})
				}
				wg.Wait()
				coded := p.counter(b, "soapgw_udp_codec_payload_bytes_total", "peer", "origin", "direction", "sent")
				busy := p.counter(b, "soapgw_udp_codec_lane_busy_total", "peer", "origin")
				b.ReportMetric(coded/calls, "coded-B/msg")
				b.ReportMetric(100*busy/calls, "lane-busy-%")
				b.ReportMetric(p.counter(b, "soapgw_udp_codec_decode_waits_total"), "decode-waits")
			}
		})
	}
	b.Run("tcp/callers=1", func(b *testing.B) {
		for b.Loop() {
			reg := prometheus.NewRegistry()
			m := tunnel.NewMetrics(reg)
			cfg := func() *tunnel.Config {
				return &tunnel.Config{Codecs: testCodecs(b), Encoding: tok, CodecName: func(id uint8) string { return codec.ID(id).String() }}
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := tunnel.NewServer(tunnel.ServerConfig{Session: cfg()}, nil, nil, func(_ context.Context, st *tunnel.Stream) { defer st.Close(); respond(st, st) })
			go func() { _ = srv.Serve(ln) }()
			peer := tunnel.NewPeer(context.Background(), tunnel.PeerConfig{Name: "origin", Address: ln.Addr().String(), Connections: 1, Session: cfg()}, m, nil)
			for i := range calls {
				exchange(b, func(ctx context.Context) (streamRW, error) { return peer.OpenStream(ctx) }, i)
			}
			mfs, _ := reg.Gather()
			var coded float64
			for _, mf := range mfs {
				if mf.GetName() == "soapgw_tunnel_codec_payload_bytes_total" {
					for _, mm := range mf.GetMetric() {
						for _, l := range mm.GetLabel() {
							if l.GetName() == "direction" && l.GetValue() == "sent" {
								coded += mm.GetCounter().GetValue()
							}
						}
					}
				}
			}
			b.ReportMetric(coded/calls, "coded-B/msg")
			_ = peer.Close()
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = srv.Shutdown(sctx)
			cancel()
			_ = ln.Close()
		}
	})
}
