package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/soapgw/soapgw/internal/config"
)

// listenerTLS is the TLS configuration an edge listener serves its clients with. The
// credential watcher and SIGHUP swap it (update): a handshake takes the current one, so a
// renewed certificate applies to the next client connection and none is dropped.
type listenerTLS struct {
	cur atomic.Pointer[tls.Config]
}

// serverConfig builds the configuration of t: its certificate and, with ca_file, the
// client certificates it requires. TLS 1.2 at least (SOAP stacks of the last decade all
// speak it: Java 8, .NET 4.6, gSOAP with OpenSSL 1.0.1), and HTTP/1.1 only in ALPN: a
// client that offers h2 falls back to HTTP/1.1, which is what the edge serves.
func serverConfig(t *config.TLS, field string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"http/1.1"},
	}
	if t.CAFile != "" {
		if c.ClientCAs, err = loadPool(t.CAFile); err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", field, err)
		}
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// listen wraps ln so that its connections speak TLS with the current configuration. The
// handshake runs on the connection's first read, in its own goroutine (the edge's
// connection worker), never in the accept loop.
func (l *listenerTLS) listen(ln net.Listener) net.Listener {
	return tls.NewListener(ln, &tls.Config{
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return l.cur.Load(), nil },
	})
}

// listenerTLSConfigs builds the TLS configuration of every edge listener that has one,
// by name; it fails on the first that cannot be loaded.
func listenerTLSConfigs(e *config.EdgeConfig) (map[string]*tls.Config, error) {
	out := map[string]*tls.Config{}
	if e == nil {
		return out, nil
	}
	for i, l := range e.Listeners {
		if l.TLS == nil {
			continue
		}
		c, err := serverConfig(l.TLS, fmt.Sprintf("edge.listeners[%d].tls", i))
		if err != nil {
			return nil, err
		}
		out[l.Name] = c
	}
	return out, nil
}
