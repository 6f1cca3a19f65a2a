package peerauth

import (
	"crypto/tls"
	"fmt"
	"io"
)

// Authentication over a transport that runs TLS 1.3 itself (QUIC).
//
// The TCP tunnel wraps the connection in TLS here (Handshake). QUIC carries its own TLS
// 1.3 handshake, so this package only hands it the tls.Config and then runs the same key
// proof as over TCP, on a stream the transport opens once its handshake is done: the proof
// is an HMAC over the exporter of that QUIC connection's TLS secrets, so it binds the key
// to that connection exactly as it does over TCP (SPEC.md). Mutual TLS is checked by TLS
// itself. With insecure: true the transport still encrypts (QUIC cannot do otherwise) but
// nobody is authenticated.

// TLSConfig returns the configuration for the origin side of a transport's own TLS
// handshake, with proto as the only ALPN protocol. Each handshake reads the credentials
// current at that moment, so Update applies to new connections only.
func (s *Server) TLSConfig(proto string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{proto},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := s.tlsState().Clone()
			c.NextProtos = []string{proto}
			return c, nil
		},
	}
}

// tlsState returns the tls.Config of the current credentials; an insecure server gets one
// with its self-made certificate and no client verification.
func (s *Server) tlsState() *tls.Config {
	if st := s.cur.Load(); st != nil {
		return st.tls
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.selfSigned == nil {
		c, err := SelfSignedCertificate("soapgw-origin")
		if err != nil {
			return &tls.Config{MinVersion: tls.VersionTLS13} // the handshake fails and says why
		}
		s.selfSigned = c
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*s.selfSigned}}
}

// VerifyEdge authenticates the edge of a connection whose TLS handshake the transport has
// completed (cs), exchanging key proofs on rw when the origin requires the shared key. It
// returns who the edge proved to be, for logs, or an *Error.
func (s *Server) VerifyEdge(cs tls.ConnectionState, rw io.ReadWriter) (string, error) {
	if s.insecure {
		return "unauthenticated (insecure)", nil
	}
	st := s.cur.Load()
	who := ""
	if len(cs.PeerCertificates) > 0 {
		who = "certificate " + cs.PeerCertificates[0].Subject.String()
	} else if st.keys == nil {
		return "", &Error{Result: ResultBadCertificate, Err: fmt.Errorf("the edge presented no certificate")}
	}
	if st.keys == nil {
		return who, nil
	}
	exp, err := exporter(cs)
	if err != nil {
		return "", fail(ResultTLS, err)
	}
	id, err := serverProof(rw, exp, st.keys)
	if err != nil {
		return "", err
	}
	if who != "" {
		who += ", "
	}
	return who + "key " + id.String(), nil
}

// TLSConfig returns the configuration for the edge side of a transport's own TLS
// handshake, with proto as the only ALPN protocol, for the credentials current now.
func (c *Client) TLSConfig(proto string) *tls.Config {
	st := c.cur.Load()
	if st == nil { // insecure: encrypted, nobody verified
		return &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, NextProtos: []string{proto}}
	}
	tc := st.tls.Clone()
	tc.NextProtos = []string{proto}
	return tc
}

// ProveEdge runs the edge's side of the key proof on rw, a stream of a connection whose
// TLS handshake the transport has completed (cs), and checks the origin's proof. Without a
// shared key (mutual TLS alone) there is nothing to prove. It returns nil or an *Error.
func (c *Client) ProveEdge(cs tls.ConnectionState, rw io.ReadWriter) error {
	st := c.cur.Load()
	if c.insecure || st == nil || st.keys == nil {
		return nil
	}
	exp, err := exporter(cs)
	if err != nil {
		return fail(ResultTLS, err)
	}
	return clientProof(rw, exp, st.keys)
}

// NeedsProof reports whether ProveEdge exchanges anything, so a transport knows whether
// to open a stream for it.
func (c *Client) NeedsProof() bool {
	st := c.cur.Load()
	return !c.insecure && st != nil && st.keys != nil
}
