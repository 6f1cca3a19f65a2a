package main

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/soapgw/soapgw/internal/config"
	"github.com/soapgw/soapgw/internal/proxy"
)

// Reload triggers, as the soapgw_reloads_total label.
const (
	reloadSIGHUP = "sighup"
	reloadFiles  = "files"
)

// credentialPoll is how often credential files are checked for changes.
const credentialPoll = 2 * time.Second

// watchCredentials re-reads the credential files whenever their content changes, until
// the gateway shuts down. Connections already authenticated are not touched: new
// credentials apply to the next tunnel connection, so in-flight exchanges never notice.
func (g *gateway) watchCredentials(ctx context.Context) {
	w := g.credWatch
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		w.watch(ctx, credentialPoll, g.log, func() error {
			g.reloadMu.Lock()
			defer g.reloadMu.Unlock()
			err := g.applyCredentials(g.cfg)
			if err == nil && g.origin != nil && g.cfg.Origin != nil {
				err = g.applyUpstreams(g.cfg, proxyLimits(g.cfg.Limits)) // their TLS files
			}
			g.countReload(reloadFiles, err)
			if err == nil {
				g.log.Info("credential files changed: new tunnel, upstream and client connections use the new credentials", "files", credentialFiles(g.cfg))
			}
			return err
		})
	}()
}

// reloadConfig handles SIGHUP: it reads the configuration file again and, if it is valid,
// applies what can change without a restart (credentials, routes, upstreams, limits) and
// names what cannot. An invalid file is refused with its file:line errors and the running
// configuration stays.
func (g *gateway) reloadConfig(path string) error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	cfg, err := config.Load(path)
	if err == nil {
		err = g.applyLive(cfg)
	}
	g.countReload(reloadSIGHUP, err)
	if err != nil {
		return err
	}
	if changed := needsRestart(g.cfg, cfg); len(changed) > 0 {
		g.log.Warn("configuration reloaded; these changes need a restart and are not in effect", "sections", changed)
	} else {
		g.log.Info("configuration reloaded")
	}
	// The live sections now follow the new file; everything else keeps running as
	// started, so g.cfg keeps describing what runs.
	g.cfg = withLiveOf(g.cfg, cfg)
	return nil
}

// applyLive applies the sections of cfg that can change while running. Everything is
// checked before anything changes, so a refused reload leaves the running configuration
// whole (the one exception: credentials, applied last, are each checked on their own).
func (g *gateway) applyLive(cfg *config.Config) error {
	if running, next := g.cfg.Limits.MaxConcurrentExchanges, cfg.Limits.MaxConcurrentExchanges; running != next {
		return fmt.Errorf("limits.max_concurrent_exchanges: changing it (%d to %d) needs a restart; nothing was reloaded", running, next)
	}
	lim := proxyLimits(cfg.Limits)
	var routes []proxy.Route
	if g.edge != nil && cfg.Edge != nil {
		for _, r := range cfg.Edge.Routes {
			if g.peers[r.Peer] == nil {
				return fmt.Errorf("edge.routes: peer %q is new: adding peers needs a restart; nothing was reloaded", r.Peer)
			}
		}
		var err error
		if routes, err = g.proxyRoutes(cfg.Edge.Routes); err != nil {
			return err
		}
	}
	if err := g.applyCredentials(cfg); err != nil {
		return err
	}
	if g.edge != nil && cfg.Edge != nil {
		if err := g.edge.Reconfigure(routes, lim); err != nil {
			return err
		}
	}
	if g.origin != nil && cfg.Origin != nil {
		if err := g.applyUpstreams(cfg, lim); err != nil {
			return err
		}
	}
	return nil
}

// applyUpstreams gives the origin cfg's upstreams, their TLS files read again: a pool whose
// settings and files did not change keeps its connections.
func (g *gateway) applyUpstreams(cfg *config.Config, lim proxy.Limits) error {
	ups, err := proxyUpstreams(cfg.Origin.Upstreams)
	if err != nil {
		return err
	}
	return g.origin.Reconfigure(ups, lim)
}

func (g *gateway) countReload(trigger string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	g.reloads.WithLabelValues(trigger, result).Inc()
}

// applyCredentials loads every credential cfg names and swaps them in; nothing changes
// unless all of them load and none switches insecure on or off (which needs a restart).
func (g *gateway) applyCredentials(cfg *config.Config) error {
	var updates []func() error
	if g.originAuth != nil && cfg.Origin != nil {
		ac, err := originAuth(cfg.Origin)
		if err != nil {
			return err
		}
		if ac.Insecure != g.originAuth.Insecure() {
			return fmt.Errorf("origin.insecure: switching it needs a restart; nothing was reloaded")
		}
		updates = append(updates, func() error {
			if err := g.originAuth.Update(ac); err != nil {
				return fmt.Errorf("origin: %w", err)
			}
			return nil
		})
	}
	if cfg.Edge != nil {
		for i, p := range cfg.Edge.Peers {
			auth := g.peerAuths[p.Name]
			if auth == nil {
				continue // a new peer: needs a restart
			}
			field := fmt.Sprintf("edge.peers[%d]", i)
			cc, err := peerAuth(p, field)
			if err != nil {
				return err
			}
			if cc.Insecure != auth.Insecure() {
				return fmt.Errorf("%s.insecure: switching it needs a restart; nothing was reloaded", field)
			}
			updates = append(updates, func() error {
				if err := auth.Update(cc); err != nil {
					return fmt.Errorf("%s: %w", field, err)
				}
				return nil
			})
		}
	}
	if len(g.listenerTLS) > 0 {
		// The running listeners' files, read again: listeners (their tls section with
		// them) need a restart to change, and needsRestart names them.
		confs, err := listenerTLSConfigs(g.cfg.Edge)
		if err != nil {
			return err
		}
		updates = append(updates, func() error {
			for name, lt := range g.listenerTLS {
				lt.cur.Store(confs[name])
			}
			return nil
		})
	}
	var errs []error
	for _, u := range updates {
		errs = append(errs, u())
	}
	return errors.Join(errs...)
}

// withoutLive clears the fields that reload while running, to compare the rest.
func withoutLive(c *config.Config) config.Config {
	out := *c
	out.Limits = config.Limits{MaxConcurrentExchanges: c.Limits.MaxConcurrentExchanges}
	if c.Origin != nil {
		o := *c.Origin
		o.Auth, o.TLS, o.Upstreams = nil, nil, nil
		out.Origin = &o
	}
	if c.Edge != nil {
		e := *c.Edge
		e.Routes = nil
		e.Peers = append([]config.Peer(nil), c.Edge.Peers...)
		for i := range e.Peers {
			e.Peers[i].Auth, e.Peers[i].TLS = nil, nil
		}
		out.Edge = &e
	}
	return out
}

// needsRestart names the sections that differ between the running and the new
// configuration other than credentials.
func needsRestart(running, next *config.Config) []string {
	a, b := withoutLive(running), withoutLive(next)
	var changed []string
	diff := func(name string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			changed = append(changed, name)
		}
	}
	diff("node", a.Node, b.Node)
	diff("admin", a.Admin, b.Admin)
	diff("limits", a.Limits, b.Limits)
	diff("codecs", a.Codecs, b.Codecs)
	diff("drain_timeout", a.DrainTimeout, b.DrainTimeout)
	diff("edge", a.Edge, b.Edge)
	diff("origin", a.Origin, b.Origin)
	return changed
}

// withLiveOf returns running with the live sections of next (credentials, routes,
// upstreams, limits), for the peers and roles that exist in both.
func withLiveOf(running, next *config.Config) *config.Config {
	out := *running
	out.Limits = next.Limits
	if running.Origin != nil && next.Origin != nil {
		o := *running.Origin
		o.Auth, o.TLS, o.Upstreams = next.Origin.Auth, next.Origin.TLS, next.Origin.Upstreams
		out.Origin = &o
	}
	if running.Edge != nil && next.Edge != nil {
		e := *running.Edge
		e.Routes = next.Edge.Routes
		e.Peers = append([]config.Peer(nil), running.Edge.Peers...)
		for i := range e.Peers {
			for _, np := range next.Edge.Peers {
				if np.Name == e.Peers[i].Name {
					e.Peers[i].Auth, e.Peers[i].TLS = np.Auth, np.TLS
				}
			}
		}
		out.Edge = &e
	}
	return &out
}
