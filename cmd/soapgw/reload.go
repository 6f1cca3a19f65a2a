package main

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/soapgw/soapgw/internal/config"
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
	w := newFileWatcher(func() []string {
		g.reloadMu.Lock()
		defer g.reloadMu.Unlock()
		return credentialFiles(g.cfg)
	})
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		w.watch(ctx, credentialPoll, g.log, func() error {
			g.reloadMu.Lock()
			defer g.reloadMu.Unlock()
			err := g.applyCredentials(g.cfg)
			g.countReload(reloadFiles, err)
			if err == nil {
				g.log.Info("credential files changed: new tunnel connections use the new credentials", "files", credentialFiles(g.cfg))
			}
			return err
		})
	}()
}

// reloadConfig handles SIGHUP: it reads the configuration file again and, if it is valid,
// applies what can change without a restart (credentials) and names what cannot. An
// invalid file is refused with its file:line errors and the running configuration stays.
func (g *gateway) reloadConfig(path string) error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	cfg, err := config.Load(path)
	if err == nil {
		err = g.applyCredentials(cfg)
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
	// The credential sections now follow the new file; everything else keeps running
	// as started, so g.cfg keeps describing what runs, but with the new credentials.
	g.cfg = withCredentialsOf(g.cfg, cfg)
	return nil
}

func (g *gateway) countReload(trigger string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	g.reloads.WithLabelValues(trigger, result).Inc()
}

// applyCredentials loads every credential cfg names and swaps them in; nothing changes
// unless all of them load.
func (g *gateway) applyCredentials(cfg *config.Config) error {
	var updates []func() error
	if g.originAuth != nil && cfg.Origin != nil {
		ac, err := originAuth(cfg.Origin)
		if err != nil {
			return err
		}
		updates = append(updates, func() error { return g.originAuth.Update(ac) })
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
			updates = append(updates, func() error {
				if err := auth.Update(cc); err != nil {
					return fmt.Errorf("%s: %w", field, err)
				}
				return nil
			})
		}
	}
	var errs []error
	for _, u := range updates {
		errs = append(errs, u())
	}
	return errors.Join(errs...)
}

// credentialFields are cleared before comparing configurations: they reload live.
func withoutCredentials(c *config.Config) config.Config {
	out := *c
	if c.Origin != nil {
		o := *c.Origin
		o.Auth, o.TLS = nil, nil
		out.Origin = &o
	}
	if c.Edge != nil {
		e := *c.Edge
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
	a, b := withoutCredentials(running), withoutCredentials(next)
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

// withCredentialsOf returns running with the credential sections of next, for the peers
// and origin that exist in both.
func withCredentialsOf(running, next *config.Config) *config.Config {
	out := *running
	if running.Origin != nil && next.Origin != nil {
		o := *running.Origin
		o.Auth, o.TLS = next.Origin.Auth, next.Origin.TLS
		out.Origin = &o
	}
	if running.Edge != nil && next.Edge != nil {
		e := *running.Edge
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
