package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"time"

	"github.com/soapgw/soapgw/internal/config"
	"github.com/soapgw/soapgw/internal/peerauth"
)

// originAuth builds the origin's tunnel authentication settings from its configuration,
// reading the key, certificate and CA files.
func originAuth(o *config.OriginConfig) (peerauth.ServerConfig, error) {
	sc := peerauth.ServerConfig{Insecure: o.Insecure}
	var err error
	if o.Auth != nil {
		if sc.Keys, err = loadKeys(o.Auth, "origin.auth"); err != nil {
			return sc, err
		}
	}
	if t := o.TLS; t != nil {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return sc, fmt.Errorf("origin.tls: %w", err)
		}
		sc.Cert = &cert
		if t.CAFile != "" {
			if sc.ClientCAs, err = loadPool(t.CAFile); err != nil {
				return sc, fmt.Errorf("origin.tls.ca_file: %w", err)
			}
		}
	}
	return sc, nil
}

// peerAuth builds an edge peer's tunnel authentication settings; field names the peer
// in errors ("edge.peers[0]").
func peerAuth(p config.Peer, field string) (peerauth.ClientConfig, error) {
	cc := peerauth.ClientConfig{Insecure: p.Insecure}
	var err error
	if p.Auth != nil {
		if cc.Keys, err = loadKeys(p.Auth, field+".auth"); err != nil {
			return cc, err
		}
	}
	if t := p.TLS; t != nil {
		// A tls section means: verify the origin's certificate (against ca_file, or the
		// system roots) as well as any key proof.
		cc.VerifyServer = true
		cc.ServerName = t.ServerName
		if cc.ServerName == "" {
			host, _, err := net.SplitHostPort(p.Address)
			if err != nil {
				return cc, fmt.Errorf("%s.address: %w", field, err)
			}
			cc.ServerName = host
		}
		if t.CAFile != "" {
			if cc.RootCAs, err = loadPool(t.CAFile); err != nil {
				return cc, fmt.Errorf("%s.tls.ca_file: %w", field, err)
			}
		}
		if t.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				return cc, fmt.Errorf("%s.tls: %w", field, err)
			}
			cc.Cert = &cert
		}
	}
	return cc, nil
}

func loadKeys(a *config.Auth, field string) (*peerauth.Keyring, error) {
	if a.KeyFile != "" {
		data, err := os.ReadFile(a.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s.key_file: %w", field, err)
		}
		r, err := peerauth.ParseKeys(a.KeyFile, data)
		if err != nil {
			return nil, fmt.Errorf("%s.key_file: %w", field, err)
		}
		return r, nil
	}
	r, err := peerauth.ParseKeys("key", []byte(a.Key))
	if err != nil {
		return nil, fmt.Errorf("%s.key: %w", field, err)
	}
	return r, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate found", path)
	}
	return pool, nil
}

// credentialFiles lists every file a configuration authenticates tunnels, upstream and
// client connections with: the files watched for changes.
func credentialFiles(cfg *config.Config) []string {
	var files []string
	add := func(a *config.Auth, t *config.TLS) {
		if a != nil && a.KeyFile != "" {
			files = append(files, a.KeyFile)
		}
		if t != nil {
			for _, f := range []string{t.CertFile, t.KeyFile, t.CAFile} {
				if f != "" {
					files = append(files, f)
				}
			}
		}
	}
	if o := cfg.Origin; o != nil {
		add(o.Auth, o.TLS)
		for _, u := range o.Upstreams {
			add(nil, u.TLS)
		}
	}
	if e := cfg.Edge; e != nil {
		for _, p := range e.Peers {
			add(p.Auth, p.TLS)
		}
		for _, l := range e.Listeners {
			add(nil, l.TLS)
		}
	}
	sort.Strings(files)
	return files
}

// fileWatcher polls files for content changes. Polling (not inotify) also sees the
// symlink swap by which Kubernetes updates mounted secrets, and costs a few small reads
// per interval.
type fileWatcher struct {
	files func() []string
	sums  map[string][sha256.Size]byte
}

func newFileWatcher(files func() []string) *fileWatcher {
	w := &fileWatcher{files: files}
	w.sums = w.snapshot()
	return w
}

func (w *fileWatcher) snapshot() map[string][sha256.Size]byte {
	sums := map[string][sha256.Size]byte{}
	for _, f := range w.files() {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a file being replaced; the next poll sees it
		}
		sums[f] = sha256.Sum256(data)
	}
	return sums
}

// changed reports whether any watched file's content differs from the last call's.
func (w *fileWatcher) changed() bool {
	now := w.snapshot()
	diff := len(now) != len(w.sums)
	for f, s := range now {
		if w.sums[f] != s {
			diff = true
		}
	}
	w.sums = now
	return diff
}

// watch calls reload whenever the files change, polling every interval until ctx ends.
func (w *fileWatcher) watch(ctx context.Context, every time.Duration, log *slog.Logger, reload func() error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !w.changed() {
			continue
		}
		if err := reload(); err != nil {
			log.Error("credential files changed but cannot be used; the running credentials stay", "err", err)
		}
	}
}
