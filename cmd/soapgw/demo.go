package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/soapgw/soapgw/internal/codec"
	"github.com/soapgw/soapgw/internal/config"
	"github.com/soapgw/soapgw/internal/netsim"
	"github.com/soapgw/soapgw/internal/peerauth"
	"github.com/soapgw/soapgw/internal/soapdemo"
)

type demoOptions struct {
	calls       int
	concurrency int
	rtt         time.Duration
	codec       string
	transport   string
	loss        float64
	redundancy  string // edge.peers[].redundancy: auto, on or off
}

func newDemoCommand(g *globalOptions) *cobra.Command {
	o := &demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run an example SOAP service through a gateway pair over a slow link (no config needed)",
		Long: `demo starts, in this process, the calendaring service of the Stress scenario (Kangasharju
et al.: 652-byte requests, 464-byte responses), an origin and an edge gateway, and an
emulated link with the given round-trip time between the edge and everything behind it.
It then makes the same calls twice with an HTTP/1.0 client that opens a TCP connection per
call, as legacy SOAP stacks do: once directly across the link, once through the gateways,
and prints latency and the bytes that crossed the link.

With --transport udp the gateways' tunnel is the UDP one (QUIC), across an emulated
datagram link with the same round-trip time that also loses --loss of the datagrams in
each direction (1 % by default). Small messages are sent twice while the link loses
packets (--redundancy auto, the default), always (--redundancy, or =on) or never (=off).
The direct path stays TCP and lossless.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.calls < 1 || o.concurrency < 1 || o.rtt < 0 {
				return usageError{fmt.Errorf("demo: --calls and --concurrency must be positive, --rtt not negative")}
			}
			if o.transport != config.TransportTCP && o.transport != config.TransportUDP {
				return usageError{fmt.Errorf("demo: --transport must be tcp or udp, got %q", o.transport)}
			}
			if o.loss < 0 || o.loss >= 1 || (cmd.Flag("loss").Changed && o.transport != config.TransportUDP) {
				return usageError{fmt.Errorf("demo: --loss is a fraction below 1, for --transport udp")}
			}
			if cmd.Flag("redundancy").Changed && o.transport != config.TransportUDP {
				return usageError{fmt.Errorf("demo: --redundancy is for --transport udp")}
			}
			if o.redundancy != config.RedundancyAuto && o.redundancy != config.RedundancyOn && o.redundancy != config.RedundancyOff {
				return usageError{fmt.Errorf("demo: --redundancy must be auto, on or off, got %q", o.redundancy)}
			}
			if _, err := codec.NewPolicy(o.codec, 0); err != nil {
				return usageError{fmt.Errorf("demo: %w", err)}
			}
			if f := cmd.Flag("log-level"); f != nil && !f.Changed {
				// Gateway logs are noise in a demo unless something goes wrong.
				g.logLevel = "warn"
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			return runDemo(cmd.Context(), o, g.stdout, log)
		},
	}
	cmd.Flags().IntVarP(&o.calls, "calls", "n", 300, "calls per configuration")
	cmd.Flags().IntVar(&o.concurrency, "concurrency", 1, "concurrent clients (1 = one synchronous client, as in the papers)")
	cmd.Flags().DurationVar(&o.rtt, "rtt", 20*time.Millisecond, "round-trip time of the emulated link")
	cmd.Flags().StringVar(&o.codec, "codec", "auto", "tunnel codec: "+strings.Join(codec.Names, ", "))
	cmd.Flags().StringVar(&o.transport, "transport", "tcp", "tunnel transport: tcp, or udp (QUIC) across a lossy link (see --loss)")
	cmd.Flags().Float64Var(&o.loss, "loss", 0.01, "with --transport udp: fraction of the tunnel's datagrams lost each way")
	cmd.Flags().StringVar(&o.redundancy, "redundancy", config.RedundancyAuto, "with --transport udp: send small messages twice: auto (while packets are lost), on, off (edge.peers[].redundancy)")
	cmd.Flag("redundancy").NoOptDefVal = config.RedundancyOn
	return cmd
}

type demoResult struct {
	name  string
	stats soapdemo.Stats
	total time.Duration
	link  netsim.LinkStats
}

// statsLink is an emulated link the demo reads its byte counts from.
type statsLink interface{ Stats() netsim.LinkStats }

func runDemo(ctx context.Context, o *demoOptions, out io.Writer, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The SOAP service.
	svcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	svc := &http.Server{Handler: soapdemo.NewStressHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = svc.Serve(svcLn) }()
	defer svc.Close()
	svcAddr := svcLn.Addr().String()

	linkCfg := netsim.LinkConfig{Delay: o.rtt / 2, Handshake: true}
	fmt.Fprintf(out, "soapgw demo: %d Stress calls (%d-byte requests, %d-byte responses) per configuration, link RTT %s, %d client(s)\n\n",
		o.calls, soapdemo.StressRequestSize, soapdemo.StressResponseSize, o.rtt, o.concurrency)

	// 1. Direct: a connection per call across the link, as the client does today.
	direct, err := netsim.NewLink(ctx, svcAddr, linkCfg)
	if err != nil {
		return err
	}
	defer direct.Close()
	r1, err := demoCalls(ctx, "direct (HTTP/1.0, connection per call)", direct.Addr(), o, direct)
	if err != nil {
		return err
	}

	// 2. Through the pair: client → edge (local) → tunnel across the link → origin → service.
	// The tunnel is authenticated as a deployment's should be: a fresh shared key, TLS 1.3.
	key, err := peerauth.GenerateKey()
	if err != nil {
		return err
	}
	origin, err := startGateway(ctx, mustParse(fmt.Sprintf(`
node: demo-origin
origin:
  listen: 127.0.0.1:0
  auth: {key: %q}
  upstreams:
    - name: calendar
      url: http://%s
`, key, svcAddr)), log)
	if err != nil {
		return err
	}
	defer origin.shutdown(context.Background())
	peerAddr, transport := "", "tcp"
	var tunnelLink statsLink
	if o.transport == config.TransportUDP {
		// QUIC over an emulated datagram path: the same delay, and losses.
		l, err := netsim.NewUDPLink(ctx, origin.udpAddr(), netsim.UDPLinkConfig{Delay: o.rtt / 2, Loss: o.loss})
		if err != nil {
			return err
		}
		defer l.Close()
		peerAddr, transport, tunnelLink = l.Addr(), "udp", l
	} else {
		l, err := netsim.NewLink(ctx, origin.tunnelAddr(), linkCfg)
		if err != nil {
			return err
		}
		defer l.Close()
		peerAddr, tunnelLink = l.Addr(), l
	}
	edge, err := startGateway(ctx, mustParse(fmt.Sprintf(`
node: demo-edge
edge:
  listeners:
    - name: soap
      listen: 127.0.0.1:0
  peers:
    - name: origin
      address: %s
      transport: %s
      redundancy: %s
      connections: 1
      codec: %s
      auth: {key: %q}
  routes:
    - peer: origin
      upstream: calendar
`, peerAddr, transport, o.redundancy, o.codec, key)), log)
	if err != nil {
		return err
	}
	defer edge.shutdown(context.Background())
	if err := waitReady(ctx, edge, 5*time.Second); err != nil {
		return err
	}
	name := "soapgw pair (persistent tunnel, " + o.codec + ")"
	if o.transport == config.TransportUDP {
		name = fmt.Sprintf("soapgw pair (UDP tunnel, %s, %.1f%% loss)", o.codec, 100*o.loss)
		if o.redundancy != config.RedundancyAuto {
			name = fmt.Sprintf("soapgw pair (UDP tunnel, %s, redundancy %s, %.1f%% loss)", o.codec, o.redundancy, 100*o.loss)
		}
	}
	r2, err := demoCalls(ctx, name, edge.edgeAddr("soap"), o, tunnelLink)
	if err != nil {
		return err
	}
	printDemo(out, o, []demoResult{r1, r2})
	return nil
}

// demoCalls runs the calls and checks every response byte for byte: a demo that could
// print numbers for wrong answers would prove nothing.
func demoCalls(ctx context.Context, name, addr string, o *demoOptions, link statsLink) (demoResult, error) {
	before := link.Stats()
	start := time.Now()
	lat, err := soapdemo.RunCalls(ctx, o.calls, o.concurrency, func(ctx context.Context, i int) error {
		status, body, err := soapdemo.CallHTTP10(ctx, addr, soapdemo.StressPath, soapdemo.StressRequest(i), soapdemo.StressRequestHeaders(addr))
		if err != nil {
			return err
		}
		if status != 200 || !bytes.Equal(body, soapdemo.StressResponse(i)) {
			return fmt.Errorf("call %d: status %d, response differs from the service's (%d bytes)", i, status, len(body))
		}
		return nil
	})
	if err != nil {
		return demoResult{}, fmt.Errorf("%s: %w", name, err)
	}
	after := link.Stats()
	return demoResult{
		name:  name,
		stats: soapdemo.Summarize(lat),
		total: time.Since(start),
		link: netsim.LinkStats{
			Connections: after.Connections - before.Connections,
			BytesUp:     after.BytesUp - before.BytesUp,
			BytesDown:   after.BytesDown - before.BytesDown,
		},
	}, nil
}

func printDemo(out io.Writer, o *demoOptions, rs []demoResult) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "configuration\tcalls\tp50\tp99\ttotal\tlink conns\tlink bytes\tbytes/call\t")
	for _, r := range rs {
		bytes := r.link.BytesUp + r.link.BytesDown
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t\n", r.name, r.stats.N,
			r.stats.P50.Round(10*time.Microsecond), r.stats.P99.Round(10*time.Microsecond), r.total.Round(time.Millisecond),
			r.link.Connections, bytes, bytes/int64(max(r.stats.N, 1)))
	}
	_ = tw.Flush()
	if len(rs) == 2 && rs[1].stats.P50 > 0 {
		fmt.Fprintf(out, "\nthrough soapgw: p50 %.1fx faster, %.0f%% of the payload bytes on the link; every response checked byte for byte.\n",
			float64(rs[0].stats.P50)/float64(rs[1].stats.P50),
			100*float64(rs[1].link.BytesUp+rs[1].link.BytesDown)/float64(max(rs[0].link.BytesUp+rs[0].link.BytesDown, 1)))
		if o.transport == config.TransportUDP {
			fmt.Fprintln(out, "(link bytes count TCP payload for the direct path and UDP payload, QUIC packets whole, for the tunnel; the direct path also pays a TCP handshake and teardown per call and crosses the link without loss.)")
		} else {
			fmt.Fprintln(out, "(link bytes count TCP payload only; the direct path also pays a TCP handshake and teardown per call.)")
		}
	}
}

func mustParse(yml string) *config.Config {
	cfg, err := config.Parse("demo.yaml", []byte(yml))
	if err != nil {
		panic(fmt.Sprintf("demo: built-in configuration is invalid: %v", err))
	}
	return cfg
}

func waitReady(ctx context.Context, g *gateway, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ok, why := g.ready()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("gateway not ready: " + why)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
