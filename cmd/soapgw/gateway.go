package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/soapgw/soapgw/internal/admin"
	"github.com/soapgw/soapgw/internal/config"
	"github.com/soapgw/soapgw/internal/ledger"
	"github.com/soapgw/soapgw/internal/peerauth"
	"github.com/soapgw/soapgw/internal/proxy"
	"github.com/soapgw/soapgw/internal/sockopt"
	"github.com/soapgw/soapgw/internal/spool"
	"github.com/soapgw/soapgw/internal/tunnel"
	quictun "github.com/soapgw/soapgw/internal/tunnel/quic"
)

// gateway is one soapgw process's roles, wired from a configuration: this is the only
// place that knows every package.
type gateway struct {
	cfg *config.Config
	log *slog.Logger
	reg *prometheus.Registry

	peers   map[string]tunnelPeer
	edge    *proxy.Edge
	edgeLns map[string]net.Listener

	origin     *proxy.Origin
	tunSrv     *tunnel.Server
	tunLn      net.Listener
	udpSrv     *quictun.Server // nil when origin.udp_listen is off
	udpLn      *net.UDPConn
	originAuth *peerauth.Server

	udpMetrics *quictun.Metrics
	transports *transportMetrics
	udpBufWarn sync.Once

	peerAuths map[string]*peerauth.Client // by peer name
	// listenerTLS: the edge listeners that serve HTTPS, by name (their certificates
	// reload like the tunnel's credentials).
	listenerTLS map[string]*listenerTLS
	insecure    *prometheus.GaugeVec
	reloads     *prometheus.CounterVec
	codecs      *codecs
	credWatch   *fileWatcher // the credential files, as loaded at start
	reloadMu    sync.Mutex   // one reload at a time; guards cfg after start
	stopWatch   context.CancelFunc

	admin *admin.Server

	spool  *spool.Spool   // edge.one_way; nil when off
	ledger *ledger.Ledger // origin.one_way; nil when off

	errc     chan error // a serving goroutine failed
	wg       sync.WaitGroup
	draining atomic.Bool // set when shutdown starts: /readyz turns 503 so traffic moves away
}

// startGateway binds every listener (so a port clash fails at once, before anything
// serves), then starts serving. Peers start connecting immediately.
func startGateway(ctx context.Context, cfg *config.Config, log *slog.Logger) (g *gateway, err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "soapgw_build_info",
		Help: "Always 1; labels carry the soapgw version, the node name and the roles this process runs.",
	}, []string{"version", "node", "edge", "origin"})
	reg.MustRegister(build)
	build.WithLabelValues(versionString(), cfg.Node, strconv.FormatBool(cfg.Edge != nil), strconv.FormatBool(cfg.Origin != nil)).Set(1)
	g = &gateway{cfg: cfg, log: log, reg: reg, peers: map[string]tunnelPeer{}, peerAuths: map[string]*peerauth.Client{}, listenerTLS: map[string]*listenerTLS{}, edgeLns: map[string]net.Listener{}, errc: make(chan error, 8)}
	built := g // the named result is nil on error returns; clean up what was built
	defer func() {
		if err != nil {
			built.closeListeners()
			for _, p := range built.peers {
				_ = p.Close()
			}
			if built.admin != nil {
				_ = built.admin.Shutdown(context.Background())
			}
			if built.edge != nil {
				_ = built.edge.Shutdown(context.Background()) // nothing served yet: returns at once
			}
			built.closeStores()
		}
	}()
	g.insecure = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "soapgw_tunnel_insecure",
		Help: "1 for each tunnel listener (role origin) or peer (role edge) configured with insecure: true: plaintext and unauthenticated.",
	}, []string{"role", "peer"})
	g.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "soapgw_reloads_total",
		Help: "Configuration and credential reloads, by trigger (sighup, files) and result (ok, error); on error the running configuration stays.",
	}, []string{"trigger", "result"})
	reg.MustRegister(g.insecure, g.reloads)
	for _, tr := range []string{reloadSIGHUP, reloadFiles} {
		for _, r := range []string{"ok", "error"} {
			g.reloads.WithLabelValues(tr, r)
		}
	}
	tm := tunnel.NewMetrics(reg)
	g.udpMetrics = quictun.NewMetrics(reg)
	g.transports = newTransportMetrics(reg)
	pm := proxy.NewMetrics(reg)
	lim := proxyLimits(cfg.Limits)
	cs, err := newCodecs(cfg.Codecs, log)
	if err != nil {
		return nil, usageError{fmt.Errorf("codecs: %w", err)}
	}

	g.codecs = cs
	// The credential files' contents are taken before they are loaded, so a change that
	// lands in between is seen at the first poll instead of being missed.
	g.credWatch = newFileWatcher(func() []string {
		g.reloadMu.Lock()
		defer g.reloadMu.Unlock()
		return credentialFiles(g.cfg)
	})
	socks := &tunnelSockets{log: log}
	if cfg.Origin != nil {
		if err := g.startOrigin(cfg.Origin, cs, socks, tm, pm, lim); err != nil {
			return nil, err
		}
	}
	if cfg.Edge != nil {
		if err := g.startEdge(ctx, cfg.Edge, cs, socks, tm, pm, lim); err != nil {
			return nil, err
		}
	}

	if cfg.Admin.Listen != "" {
		g.admin, err = admin.Listen(cfg.Admin.Listen, reg, g.ready, cfg.Admin.Pprof)
		if err != nil {
			return nil, err
		}
	}

	// Everything is bound: serve.
	if g.tunSrv != nil {
		g.serve("origin tunnel listener", func() error { return g.tunSrv.Serve(g.tunLn) })
		log.Info("origin listening for tunnels", "addr", g.tunLn.Addr().String(), "upstreams", len(cfg.Origin.Upstreams))
	}
	if g.udpSrv != nil {
		g.serve("origin UDP tunnel listener", func() error { return g.udpSrv.Serve(g.udpLn) })
		log.Info("origin listening for UDP tunnels", "addr", g.udpLn.LocalAddr().String())
	}
	for name, ln := range g.edgeLns {
		g.serve("edge listener "+name, func() error { return g.edge.Serve(ln, name) })
		log.Info("edge listening for SOAP clients", "listener", name, "addr", ln.Addr().String())
	}
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	g.stopWatch = stopWatch
	g.watchCredentials(wctx)
	if g.admin != nil {
		g.serve("admin listener", g.admin.Serve)
		log.Info("admin listening", "addr", g.admin.Addr().String())
	}
	return g, nil
}

// startOrigin builds the origin role: upstreams, the tunnel listener and the server that
// authenticates tunnel connections before they hold any slot.
func (g *gateway) startOrigin(o *config.OriginConfig, cs *codecs, socks *tunnelSockets, tm *tunnel.Metrics, pm *proxy.Metrics, lim proxy.Limits) error {
	ups, err := proxyUpstreams(o.Upstreams)
	if err != nil {
		return err
	}
	resumeWindow := o.ResumeWindow
	if resumeWindow == 0 {
		resumeWindow = -1 // off
	}
	ocfg := proxy.OriginConfig{Node: g.cfg.Node, Upstreams: ups, Limits: lim,
		ResumeWindow: resumeWindow, ResumeMaxBytes: int64(o.ResumeMaxBytes)}
	if o.OneWay != nil {
		if g.ledger, err = openLedger(o.OneWay); err != nil {
			return err
		}
		ocfg.Ledger, ocfg.RedeliverInDoubt = g.ledger, o.OneWay.InDoubt == config.InDoubtRedeliver
		ocfg.OneWayConcurrency = o.OneWay.MaxConcurrent
	}
	g.origin, err = proxy.NewOrigin(ocfg, pm, g.log)
	if err != nil {
		return err
	}
	ac, err := originAuth(o)
	if err != nil {
		return usageError{err}
	}
	if g.originAuth, err = peerauth.NewServer(ac); err != nil {
		return usageError{fmt.Errorf("origin: %w", err)}
	}
	g.insecure.WithLabelValues("origin", "").Set(0) // the series exists either way, for alerts
	if o.Insecure {
		g.insecure.WithLabelValues("origin", "").Set(1)
		g.log.Warn("origin.insecure is true: tunnels are plaintext and unauthenticated; anyone who reaches the tunnel port can call every upstream", "listen", o.Listen)
	}
	enc, err := cs.policy(o.Codec)
	if err != nil {
		return usageError{fmt.Errorf("origin.codec: %w", err)}
	}
	g.tunLn, err = socks.listen(o.Listen, o.RTOMin)
	if err != nil {
		return fmt.Errorf("origin.listen: %w", err)
	}
	// The origin pings too: it measures RTT for its own metrics and notices an edge
	// whose host vanished (a half-open connection) instead of keeping it for good.
	// An edge reading bulk responses over a slow link counts as alive while its kernel
	// acknowledges them (PeerAcked), though our PING waits behind them.
	// Instance: each connection's HELLO names this process and when it came up, so a
	// resume can learn that a request never reached it (proxy/instance.go).
	scfg := cs.session(tunnel.Config{Node: g.cfg.Node, KeepaliveInterval: 15 * time.Second, KeepaliveTimeout: 10 * time.Second,
		MaxStreams: uint32(o.MaxStreams), PeerAcked: sockopt.PeerAcked, Instance: g.origin.ConnectionInstance}, enc) // MaxStreams 0: the tunnel's default
	tm.InitHandshakes()
	origin := g.origin
	g.tunSrv = tunnel.NewServer(tunnel.ServerConfig{
		Session:                scfg,
		MaxConnections:         o.MaxConnections,
		Authenticate:           g.originAuth.Handshake,
		HandshakeTimeout:       o.HandshakeTimeout,
		MaxHandshakes:          o.MaxHandshakes,
		MaxHandshakesPerSource: o.MaxHandshakesPerSource,
	}, tm, g.log.With("role", "origin"), func(ctx context.Context, st *tunnel.Stream) {
		origin.ServeStream(ctx, st)
	})
	if err := g.startUDPOrigin(o, cs, enc); err != nil {
		return err
	}
	return nil
}

// proxyRoutes maps configured routes onto the running peers (at start and on reload).
func (g *gateway) proxyRoutes(rs []config.Route) ([]proxy.Route, error) {
	routes := make([]proxy.Route, 0, len(rs))
	for i, r := range rs {
		route := proxy.Route{Listener: r.Listener, PathPrefix: r.PathPrefix, Host: r.Host, Peer: r.Peer, Upstream: r.Upstream}
		if r.Codec != "" {
			enc, err := g.codecs.policy(r.Codec)
			if err != nil {
				return nil, fmt.Errorf("edge.routes[%d].codec: %w", i, err)
			}
			if peer := g.peers[r.Peer]; peer != nil {
				route.Opener = routeOpener(peer, enc)
			}
		}
		routes = append(routes, route)
	}
	return routes, nil
}

// proxyUpstreams maps the configured upstreams onto the origin's, reading their TLS files
// (at start, on reload and when the files change: credentialFiles).
func proxyUpstreams(us []config.Upstream) ([]proxy.Upstream, error) {
	ups := make([]proxy.Upstream, 0, len(us))
	for i, u := range us {
		up := proxy.Upstream{
			Name:            u.Name,
			Address:         u.HostPort(),
			TLS:             proxy.UpstreamTLS{Enabled: u.HTTPS(), InsecureSkipVerify: u.InsecureSkipVerify},
			HTTP10:          u.HTTPVersion == config.HTTP10,
			Chunked:         u.AcceptsChunked(),
			RewriteHost:     u.HostHeader == config.HostHeaderUpstream,
			ConnectTimeout:  u.ConnectTimeout,
			ResponseTimeout: u.ResponseTimeout,
			IdleTimeout:     u.IdleTimeout,
			PoolSize:        u.PoolSize,
		}
		if t := u.TLS; t != nil {
			up.TLS.ServerName = t.ServerName
			for _, f := range []struct {
				key, path string
				into      *string
			}{{"ca_file", t.CAFile, &up.TLS.RootsPEM}, {"cert_file", t.CertFile, &up.TLS.CertPEM}, {"key_file", t.KeyFile, &up.TLS.KeyPEM}} {
				if f.path == "" {
					continue
				}
				b, err := os.ReadFile(f.path)
				if err != nil {
					return nil, fmt.Errorf("origin.upstreams[%d].tls.%s: %w", i, f.key, err)
				}
				*f.into = string(b)
			}
		}
		ups = append(ups, up)
	}
	return ups, nil
}

// startEdge builds the edge role: a reconnecting, authenticating tunnel peer per
// configured origin, the routes, and the client listeners.
func (g *gateway) startEdge(ctx context.Context, e *config.EdgeConfig, cs *codecs, socks *tunnelSockets, tm *tunnel.Metrics, pm *proxy.Metrics, lim proxy.Limits) error {
	openers := map[string]proxy.Opener{}
	for i, p := range e.Peers {
		field := fmt.Sprintf("edge.peers[%d]", i)
		peer, err := g.startPeer(ctx, p, field, cs, socks, tm)
		if err != nil {
			return err
		}
		openers[p.Name] = routeOpener(peer, nil)
	}
	routes, err := g.proxyRoutes(e.Routes)
	if err != nil {
		return usageError{err}
	}
	ecfg := proxy.EdgeConfig{Routes: routes, Peers: openers, Limits: lim}
	if e.OneWay != nil {
		if ecfg.OneWay, g.spool, err = openOneWay(e.OneWay, g.log); err != nil {
			return err
		}
	}
	g.edge, err = proxy.NewEdge(ecfg, pm, g.log)
	if err != nil {
		return err
	}
	tlsConfs, err := listenerTLSConfigs(e)
	if err != nil {
		return usageError{err}
	}
	for i, l := range e.Listeners {
		ln, err := listenClients(ctx, l.Listen)
		if err != nil {
			return fmt.Errorf("edge.listeners[%d] (%s): %w", i, l.Name, err)
		}
		if c := tlsConfs[l.Name]; c != nil {
			lt := &listenerTLS{}
			lt.cur.Store(c)
			g.listenerTLS[l.Name] = lt
			ln = lt.listen(ln)
		}
		g.edgeLns[l.Name] = ln
	}
	return nil
}

// listenClients listens for SOAP clients. Their connections carry no TCP keepalive
// probes (Go's default is one every 15 s): the edge closes an idle client connection at
// edge.idle_timeout and watches a waiting one for the client's close, and the four
// socket options that set the probes up on every accepted connection were a quarter of
// the edge's system calls per exchange with HTTP/1.0 clients (a connection per call).
func listenClients(ctx context.Context, address string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1} // negative: no probes
	return lc.Listen(ctx, "tcp", address)
}

// startPeer starts the tunnel peer for p: it dials TCP or UDP (QUIC), authenticates (TLS
// and key proof, or mutual TLS, or nothing when insecure) and then runs the tunnel
// handshake. With transport udp and fallback tcp it keeps both up.
func (g *gateway) startPeer(ctx context.Context, p config.Peer, field string, cs *codecs, socks *tunnelSockets, tm *tunnel.Metrics) (tunnelPeer, error) {
	enc, err := cs.policy(p.Codec)
	if err != nil { // config validation already refuses unknown names
		return nil, usageError{fmt.Errorf("%s (%s): %w", field, p.Name, err)}
	}
	ac, err := peerAuth(p, field)
	if err != nil {
		return nil, usageError{err}
	}
	auth, err := peerauth.NewClient(ac)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", field, err)}
	}
	g.peerAuths[p.Name] = auth
	g.insecure.WithLabelValues("edge", p.Name).Set(0)
	if p.Insecure {
		g.insecure.WithLabelValues("edge", p.Name).Set(1)
		g.log.Warn("insecure is true for this peer: its tunnel is plaintext and unauthenticated", "peer", p.Name, "address", p.Address)
	}
	var peer tunnelPeer
	switch {
	case p.Transport == config.TransportUDP && p.Fallback == config.TransportTCP:
		fb := &fallbackPeer{name: p.Name, udp: udpPeer{g.startUDPPeer(ctx, p, cs, enc, auth)}, tcp: tcpPeer{g.startTCPPeer(ctx, p, cs, enc, auth, socks, tm)},
			active: g.transports.active, switches: g.transports.switches, log: g.log.With("role", "edge")}
		for _, to := range config.Transports {
			g.transports.switches.WithLabelValues(p.Name, to) // the series exist at 0, for increase() and the dashboard
		}
		fb.note(config.TransportUDP)
		peer = fb
	case p.Transport == config.TransportUDP:
		peer = udpPeer{g.startUDPPeer(ctx, p, cs, enc, auth)}
		g.transports.active.WithLabelValues(p.Name, config.TransportUDP).Set(1)
	default:
		peer = tcpPeer{g.startTCPPeer(ctx, p, cs, enc, auth, socks, tm)}
		g.transports.active.WithLabelValues(p.Name, config.TransportTCP).Set(1)
	}
	g.peers[p.Name] = peer
	return peer, nil
}

// startTCPPeer starts the TCP tunnel peer for p, authenticated with auth.
func (g *gateway) startTCPPeer(ctx context.Context, p config.Peer, cs *codecs, enc tunnel.Encoding, auth *peerauth.Client, socks *tunnelSockets, tm *tunnel.Metrics) *tunnel.Peer {
	dial := socks.dialer(p.RTOMin)
	return tunnel.NewPeer(ctx, tunnel.PeerConfig{
		Name:           p.Name,
		Address:        p.Address,
		Connections:    p.Connections,
		MaxConnections: p.MaxConnectionsOrDefault(),
		DialTimeout:    p.DialTimeout,
		Dial: func(ctx context.Context, address string) (net.Conn, error) {
			c, err := dial(ctx, address)
			if err != nil {
				return nil, err
			}
			ac, err := auth.Handshake(ctx, c)
			if err != nil {
				_ = c.Close()
				return nil, fmt.Errorf("authenticating to %s: %w", address, err)
			}
			return ac, nil
		},
		Session: cs.session(tunnel.Config{
			Node:              g.cfg.Node,
			KeepaliveInterval: p.KeepaliveInterval,
			KeepaliveTimeout:  p.KeepaliveTimeout,
			PeerAcked:         sockopt.PeerAcked,
		}, enc),
	}, tm, g.log.With("role", "edge"))
}

func proxyLimits(l config.Limits) proxy.Limits {
	return proxy.Limits{
		MaxRequestBytes:        int64(l.MaxRequestBytes),
		MaxResponseBytes:       int64(l.MaxResponseBytes),
		MaxHeaderBytes:         int(l.MaxHeaderBytes),
		ExchangeTimeout:        l.ExchangeTimeout,
		ExchangeMaxDuration:    l.ExchangeMaxDuration,
		IdleTimeout:            l.IdleTimeout,
		MaxConcurrentExchanges: l.MaxConcurrentExchanges,
		MaxClientConnections:   l.MaxClientConnections,
		AllowAbsoluteForm:      l.AllowAbsoluteForm,
		FaultStatus:            proxyFaultStatus(l.FaultStatus),
	}
}

// proxyFaultStatus maps limits.fault_status (validated: "soap" or "http") to the proxy's.
func proxyFaultStatus(s string) proxy.FaultStatus {
	if s == config.FaultStatusHTTP {
		return proxy.FaultStatusHTTP
	}
	return proxy.FaultStatusSOAP
}

func (g *gateway) serve(what string, f func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := f(); err != nil {
			g.errc <- fmt.Errorf("%s: %w", what, err)
		}
	}()
}

// ready is the /readyz check: listeners are up (they are, once startGateway returned) and
// an edge has a live tunnel to every peer.
func (g *gateway) ready() (bool, string) {
	if g.draining.Load() {
		return false, "draining (shutting down)"
	}
	var down []string
	for name, p := range g.peers {
		if !p.Ready() {
			down = append(down, name)
		}
	}
	if len(down) > 0 {
		sort.Strings(down)
		return false, "no tunnel to peer " + strings.Join(down, ", ")
	}
	return true, ""
}

// edgeAddr is the bound address of an edge listener (for the demo and tests).
func (g *gateway) edgeAddr(name string) string { return g.edgeLns[name].Addr().String() }

// tunnelAddr is the bound address of the origin's tunnel listener.
func (g *gateway) tunnelAddr() string { return g.tunLn.Addr().String() }

// udpAddr is the bound address of the origin's UDP tunnel listener.
func (g *gateway) udpAddr() string { return g.udpLn.LocalAddr().String() }

func (g *gateway) closeListeners() {
	for _, ln := range g.edgeLns {
		_ = ln.Close()
	}
	if g.tunLn != nil {
		_ = g.tunLn.Close()
	}
	if g.udpLn != nil { // before Serve; afterwards Shutdown closes it
		_ = g.udpLn.Close()
	}
}

// shutdown drains in dependency order: the edge stops taking requests and finishes those
// in flight (which still need the tunnel); then the tunnels close; the origin tells its
// peers GOAWAY, finishes the streams it accepted and closes its upstream connections; the
// admin endpoint goes last so the drain can be watched.
func (g *gateway) shutdown(ctx context.Context) error {
	g.draining.Store(true)
	var errs []error
	if g.edge != nil {
		if err := g.edge.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range g.peers {
		_ = p.Close()
	}
	if g.tunSrv != nil {
		_ = g.tunLn.Close()
		if err := g.tunSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("origin drain: %w", err))
		}
		if g.udpSrv != nil {
			if err := g.udpSrv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("origin UDP drain: %w", err))
			}
		}
		g.origin.Close()
	}
	if g.admin != nil {
		_ = g.admin.Shutdown(context.WithoutCancel(ctx))
	}
	g.stopWatch()
	g.wg.Wait()
	g.closeStores()
	return errors.Join(errs...)
}

// closeStores closes the one-way spool and ledger, after everything that writes them.
func (g *gateway) closeStores() {
	if g.spool != nil {
		if err := g.spool.Close(); err != nil {
			g.log.Error("closing the one-way spool", "err", err)
		}
	}
	if g.ledger != nil {
		if err := g.ledger.Close(); err != nil {
			g.log.Error("closing the one-way ledger", "err", err)
		}
	}
}
