package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
	"github.com/soapgw/soapgw/internal/proxy"
	"github.com/soapgw/soapgw/internal/tunnel"
)

// gateway is one soapgw process's roles, wired from a configuration: this is the only
// place that knows every package.
type gateway struct {
	cfg *config.Config
	log *slog.Logger
	reg *prometheus.Registry

	peers   map[string]*tunnel.Peer
	edge    *proxy.Edge
	edgeLns map[string]net.Listener

	origin *proxy.Origin
	tunSrv *tunnel.Server
	tunLn  net.Listener

	admin *admin.Server

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
	g = &gateway{cfg: cfg, log: log, reg: reg, peers: map[string]*tunnel.Peer{}, edgeLns: map[string]net.Listener{}, errc: make(chan error, 8)}
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
		}
	}()
	tm := tunnel.NewMetrics(reg)
	pm := proxy.NewMetrics(reg)
	lim := proxyLimits(cfg.Limits)
	cs, err := newCodecs(cfg.Codecs, log)
	if err != nil {
		return nil, usageError{fmt.Errorf("codecs: %w", err)}
	}

	socks := &tunnelSockets{log: log}

	if o := cfg.Origin; o != nil {
		ups := make([]proxy.Upstream, 0, len(o.Upstreams))
		for _, u := range o.Upstreams {
			ups = append(ups, proxy.Upstream{
				Name:               u.Name,
				Address:            u.HostPort(),
				TLS:                u.TLS(),
				InsecureSkipVerify: u.InsecureSkipVerify,
				HTTP10:             u.HTTPVersion == config.HTTP10,
				Chunked:            u.AcceptsChunked(),
				RewriteHost:        u.HostHeader == config.HostHeaderUpstream,
				ConnectTimeout:     u.ConnectTimeout,
				ResponseTimeout:    u.ResponseTimeout,
				IdleTimeout:        u.IdleTimeout,
				PoolSize:           u.PoolSize,
			})
		}
		g.origin, err = proxy.NewOrigin(proxy.OriginConfig{Node: cfg.Node, Upstreams: ups, Limits: lim}, pm, log)
		if err != nil {
			return nil, err
		}
		var tcfg *tls.Config
		if o.TLS != nil {
			if tcfg, err = serverTLS(o.TLS); err != nil {
				return nil, usageError{err}
			}
		}
		g.tunLn, err = socks.listen(o.Listen, o.RTOMin)
		if err != nil {
			return nil, fmt.Errorf("origin.listen: %w", err)
		}
		if tcfg != nil {
			// The TLS handshake runs inside the tunnel handshake, bounded by its timeout.
			g.tunLn = tls.NewListener(g.tunLn, tcfg)
		}
		// The origin pings too: it measures RTT for its own metrics and notices an edge
		// whose host vanished (a half-open connection) instead of keeping it for good.
		enc, err := cs.policy(o.Codec)
		if err != nil {
			return nil, usageError{fmt.Errorf("origin.codec: %w", err)}
		}
		scfg := cs.session(tunnel.Config{Node: cfg.Node, KeepaliveInterval: 15 * time.Second, KeepaliveTimeout: 10 * time.Second}, enc)
		origin := g.origin
		g.tunSrv = tunnel.NewServer(scfg, tm, log.With("role", "origin"), o.MaxConnections, func(ctx context.Context, st *tunnel.Stream) {
			origin.ServeStream(ctx, st)
		})
	}

	if e := cfg.Edge; e != nil {
		openers := map[string]proxy.Opener{}
		for i, p := range e.Peers {
			enc, err := cs.policy(p.Codec)
			if err != nil { // config validation already refuses unknown names
				return nil, usageError{fmt.Errorf("edge.peers[%d] (%s): %w", i, p.Name, err)}
			}
			dial := socks.dialer(p.RTOMin)
			if p.TLS != nil {
				tcfg, err := clientTLS(p.TLS, p.Address, fmt.Sprintf("edge.peers[%d].tls", i))
				if err != nil {
					return nil, usageError{err}
				}
				dial = tlsDialer(tcfg, dial)
			}
			peer := tunnel.NewPeer(ctx, tunnel.PeerConfig{
				Name:        p.Name,
				Address:     p.Address,
				Connections: p.Connections,
				DialTimeout: p.DialTimeout,
				Dial:        dial,
				Session: cs.session(tunnel.Config{
					Node:              cfg.Node,
					KeepaliveInterval: p.KeepaliveInterval,
					KeepaliveTimeout:  p.KeepaliveTimeout,
				}, enc),
			}, tm, log.With("role", "edge"))
			g.peers[p.Name] = peer
			openers[p.Name] = proxy.OpenerFunc(func(ctx context.Context) (proxy.Stream, error) {
				st, err := peer.OpenStream(ctx)
				if err != nil {
					return nil, err // a nil *tunnel.Stream must not become a non-nil interface
				}
				return st, nil
			})
		}
		routes := make([]proxy.Route, 0, len(e.Routes))
		for i, r := range e.Routes {
			route := proxy.Route{Listener: r.Listener, PathPrefix: r.PathPrefix, Host: r.Host, Peer: r.Peer, Upstream: r.Upstream}
			if r.Codec != "" {
				enc, err := cs.policy(r.Codec)
				if err != nil {
					return nil, usageError{fmt.Errorf("edge.routes[%d].codec: %w", i, err)}
				}
				if peer := g.peers[r.Peer]; peer != nil {
					route.Opener = routeOpener(peer, enc)
				}
			}
			routes = append(routes, route)
		}
		g.edge, err = proxy.NewEdge(proxy.EdgeConfig{Routes: routes, Peers: openers, Limits: lim}, pm, log)
		if err != nil {
			return nil, err
		}
		for i, l := range e.Listeners {
			ln, err := net.Listen("tcp", l.Listen)
			if err != nil {
				return nil, fmt.Errorf("edge.listeners[%d] (%s): %w", i, l.Name, err)
			}
			g.edgeLns[l.Name] = ln
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
	for name, ln := range g.edgeLns {
		g.serve("edge listener "+name, func() error { return g.edge.Serve(ln, name) })
		log.Info("edge listening for SOAP clients", "listener", name, "addr", ln.Addr().String())
	}
	if g.admin != nil {
		g.serve("admin listener", g.admin.Serve)
		log.Info("admin listening", "addr", g.admin.Addr().String())
	}
	return g, nil
}

func proxyLimits(l config.Limits) proxy.Limits {
	return proxy.Limits{
		MaxRequestBytes:        int64(l.MaxRequestBytes),
		MaxResponseBytes:       int64(l.MaxResponseBytes),
		MaxHeaderBytes:         int(l.MaxHeaderBytes),
		ExchangeTimeout:        l.ExchangeTimeout,
		IdleTimeout:            l.IdleTimeout,
		MaxConcurrentExchanges: l.MaxConcurrentExchanges,
	}
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

func (g *gateway) closeListeners() {
	for _, ln := range g.edgeLns {
		_ = ln.Close()
	}
	if g.tunLn != nil {
		_ = g.tunLn.Close()
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
		g.origin.Close()
	}
	if g.admin != nil {
		_ = g.admin.Shutdown(context.WithoutCancel(ctx))
	}
	g.wg.Wait()
	return errors.Join(errs...)
}
