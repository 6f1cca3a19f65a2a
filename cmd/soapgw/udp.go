package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	quicgo "github.com/quic-go/quic-go"

	"github.com/soapgw/soapgw/internal/config"
	"github.com/soapgw/soapgw/internal/peerauth"
	"github.com/soapgw/soapgw/internal/proxy"
	"github.com/soapgw/soapgw/internal/sockopt"
	"github.com/soapgw/soapgw/internal/tunnel"
	quictun "github.com/soapgw/soapgw/internal/tunnel/quic"
)

// tunnelPeer is an edge's way to one origin: the TCP tunnel, the UDP tunnel, or UDP with
// a TCP fallback. Routes open their exchanges through it.
type tunnelPeer interface {
	Ready() bool
	Close() error
	// open opens an exchange; enc overrides the peer's codec policy when not nil. A bulk
	// one (a one-way delivery) never takes the last thirty-second of a connection's streams.
	open(ctx context.Context, enc tunnel.Encoding, bulk bool) (proxy.Stream, error)
}

type tcpPeer struct{ *tunnel.Peer }

func (p tcpPeer) open(ctx context.Context, enc tunnel.Encoding, bulk bool) (proxy.Stream, error) {
	open := p.OpenStream
	if bulk {
		open = p.OpenBulkStream
	}
	st, err := open(ctx)
	if err != nil {
		return nil, err // a nil *tunnel.Stream must not become a non-nil interface
	}
	if enc != nil {
		st.SetEncoding(enc)
	}
	return st, nil
}

type udpPeer struct{ *quictun.Peer }

func (p udpPeer) open(ctx context.Context, enc tunnel.Encoding, bulk bool) (proxy.Stream, error) {
	open := p.OpenStream
	if bulk {
		open = p.OpenBulkStream
	}
	st, err := open(ctx)
	if err != nil {
		return nil, err
	}
	if enc != nil {
		st.SetEncoding(enc)
	}
	return st, nil
}

// fallbackPeer carries a peer's traffic over UDP while a UDP connection is up and over
// TCP otherwise (networks that drop UDP). Both keep (re)connecting, so UDP takes over
// again as soon as it gets through; each switch is logged and counted.
type fallbackPeer struct {
	name     string
	udp, tcp tunnelPeer
	active   *prometheus.GaugeVec
	switches *prometheus.CounterVec
	log      *slog.Logger

	mu      sync.Mutex
	current string
}

func (p *fallbackPeer) Ready() bool { return p.udp.Ready() || p.tcp.Ready() }

func (p *fallbackPeer) Close() error {
	_ = p.udp.Close()
	return p.tcp.Close()
}

func (p *fallbackPeer) open(ctx context.Context, enc tunnel.Encoding, bulk bool) (proxy.Stream, error) {
	use, via := p.udp, config.TransportUDP
	if !p.udp.Ready() && p.tcp.Ready() {
		use, via = p.tcp, config.TransportTCP
	}
	p.note(via)
	return use.open(ctx, enc, bulk)
}

// openDiverted opens a stream to collect a response the origin diverted to the TCP
// tunnel (proxy.Diverter): over TCP, or over UDP while no TCP connection is up (the
// origin holds the response for whichever comes).
func (p *fallbackPeer) openDiverted(ctx context.Context, enc tunnel.Encoding) (proxy.Stream, error) {
	if p.tcp.Ready() {
		return p.tcp.open(ctx, enc, false)
	}
	return p.udp.open(ctx, enc, false)
}

// note records which transport carries the traffic now.
func (p *fallbackPeer) note(via string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current == via {
		return
	}
	if p.current != "" {
		p.switches.WithLabelValues(p.name, via).Inc()
		if via == config.TransportTCP {
			p.log.Warn("no UDP tunnel connection up: traffic falls back to the TCP tunnel; UDP is retried", "peer", p.name)
		} else {
			p.log.Info("UDP tunnel connection up again: traffic moves back to it from TCP", "peer", p.name)
		}
	}
	p.current = via
	p.active.WithLabelValues(p.name, config.TransportUDP).Set(b2f(via == config.TransportUDP))
	p.active.WithLabelValues(p.name, config.TransportTCP).Set(b2f(via == config.TransportTCP))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// transportMetrics says which transport carries each peer's traffic.
type transportMetrics struct {
	active   *prometheus.GaugeVec
	switches *prometheus.CounterVec
}

func newTransportMetrics(reg prometheus.Registerer) *transportMetrics {
	m := &transportMetrics{
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "soapgw_tunnel_transport_active",
			Help: "1 for the transport (tcp, udp) that carries a peer's new exchanges.",
		}, []string{"peer", "transport"}),
		switches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "soapgw_tunnel_transport_switches_total",
			Help: "Times a peer with transport udp and fallback tcp moved its traffic, by the transport it moved to.",
		}, []string{"peer", "to"}),
	}
	reg.MustRegister(m.active, m.switches)
	return m
}

// startUDPPeer starts the UDP tunnel peer for p, authenticated with auth.
func (g *gateway) startUDPPeer(ctx context.Context, p config.Peer, cs *codecs, enc tunnel.Encoding, auth *peerauth.Client) *quictun.Peer {
	log := g.log.With("role", "edge")
	return quictun.NewPeer(ctx, quictun.PeerConfig{
		Name:        p.Name,
		Address:     p.Address,
		Connections: p.Connections,
		DialTimeout: p.DialTimeout,
		Session: cs.session(tunnel.Config{
			Node:              g.cfg.Node,
			KeepaliveInterval: p.KeepaliveInterval,
			KeepaliveTimeout:  p.KeepaliveTimeout,
		}, enc),
		SequencedWindow: cs.cfg.UDPWindow,
		Redundancy:      udpRedundancy(p.RedundancyMode()),
		Divert:          p.Fallback == config.TransportTCP,
		TLS:             func() *tls.Config { return auth.TLSConfig(quictun.ALPN) },
		Prove:           auth.ProveEdge,
		ListenPacket:    func() (net.PacketConn, error) { return g.udpSocket("") },
	}, g.udpMetrics, log)
}

// udpSocket opens a UDP socket with the buffers quic-go wants; when the kernel grants
// less, it says once which sysctls to raise.
func (g *gateway) udpSocket(address string) (*net.UDPConn, error) {
	addr, err := net.ResolveUDPAddr("udp", address)
	if address == "" {
		addr, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	c, err := net.ListenUDP("udp", addr)
	if err != nil {
		return nil, err
	}
	rcv, snd, err := sockopt.SetUDPBuffers(c, sockopt.UDPBufferSize)
	if err == nil && (rcv < sockopt.UDPBufferSize || snd < sockopt.UDPBufferSize) {
		g.udpBufWarn.Do(func() {
			g.log.Warn("UDP tunnel socket buffers are smaller than QUIC wants: packets may be dropped at high rates; raise net.core.rmem_max and net.core.wmem_max (sysctl -w net.core.rmem_max=7500000 net.core.wmem_max=7500000), or run with CAP_NET_ADMIN",
				"receive_bytes", rcv, "send_bytes", snd, "wanted_bytes", sockopt.UDPBufferSize)
		})
	}
	return c, nil
}

// startUDPOrigin binds the origin's UDP tunnel listener; serving starts with the rest.
func (g *gateway) startUDPOrigin(o *config.OriginConfig, cs *codecs, enc tunnel.Encoding) error {
	addr := o.UDPAddress()
	if addr == "" {
		return nil
	}
	pc, err := g.udpSocket(addr)
	if err != nil {
		return fmt.Errorf("origin.udp_listen (%s): %w", addr, err)
	}
	g.udpLn = pc
	origin := g.origin
	g.udpSrv = quictun.NewServer(quictun.ServerConfig{
		Session:           cs.session(tunnel.Config{Node: g.cfg.Node, KeepaliveInterval: 15e9, KeepaliveTimeout: 10e9, Instance: g.origin.ConnectionInstance}, enc),
		TLS:               g.originAuth.TLSConfig(quictun.ALPN),
		Verify:            g.originAuth.VerifyEdge,
		HandshakeTimeout:  o.HandshakeTimeout,
		MaxConnections:    o.MaxConnections,
		MaxStreams:        int64(o.MaxStreams), // 0: the QUIC tunnel's default
		SequencedWindow:   cs.cfg.UDPWindow,
		StatelessResetKey: statelessResetKey(g.cfg.Node, o),
	}, g.udpMetrics, g.log.With("role", "origin", "transport", "udp"), func(ctx context.Context, st *quictun.Stream) {
		origin.ServeStream(ctx, st)
	})
	return nil
}

// statelessResetKey derives the origin's QUIC stateless reset key from what stays the
// same across its restarts: its node name and its tunnel credential (the shared key file
// or inline key, else the TLS key file). A restarted origin then resets the connections
// of the process before it at the edges' next packet, and they reconnect at once instead
// of after the keepalive timeout. Knowing the key lets one kill connections, so it comes
// from the secret and a label, never from the secret alone.
func statelessResetKey(node string, o *config.OriginConfig) *quicgo.StatelessResetKey {
	h := sha256.New()
	h.Write([]byte("soapgw quic stateless reset key v1\x00" + node + "\x00"))
	switch {
	case o.Auth != nil && o.Auth.KeyFile != "":
		if b, err := os.ReadFile(o.Auth.KeyFile); err == nil {
			h.Write(b)
		}
	case o.Auth != nil && o.Auth.Key != "":
		h.Write([]byte(o.Auth.Key))
	case o.TLS != nil && o.TLS.KeyFile != "":
		if b, err := os.ReadFile(o.TLS.KeyFile); err == nil {
			h.Write(b)
		}
	}
	var k quicgo.StatelessResetKey
	copy(k[:], h.Sum(nil))
	return &k
}

// udpRedundancy maps edge.peers[].redundancy to the UDP tunnel's setting.
func udpRedundancy(mode string) quictun.Redundancy {
	switch mode {
	case config.RedundancyOn:
		return quictun.RedundancyOn
	case config.RedundancyOff:
		return quictun.RedundancyOff
	}
	return quictun.RedundancyAuto
}
