package peerauth

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// tlsRecordHandshake is the first byte of a TLS ClientHello record; a soapgw tunnel
// HELLO frame starts with 0x00 (the top byte of a length below 16 MiB).
const tlsRecordHandshake = 0x16

// ServerConfig is what the accepting side authenticates with. Without Insecure, at least
// one of Keys and ClientCAs must be set: an origin must not serve anonymous edges.
type ServerConfig struct {
	// Insecure runs plaintext, unauthenticated tunnels. Nothing else may be set.
	Insecure bool
	// Keys are the shared keys accepted from edges; the primary answers with its proof.
	Keys *Keyring
	// Cert is the origin's TLS certificate. nil: one generated at start (shared-key mode,
	// where the edge identifies the origin by its proof, not its certificate).
	Cert *tls.Certificate
	// ClientCAs, when set, make a client certificate signed by one of them mandatory.
	ClientCAs *x509.CertPool
}

// Server authenticates accepted connections. Its credentials can be swapped at run time
// (Update) without touching connections already authenticated.
type Server struct {
	insecure   bool
	mu         sync.Mutex       // serializes Update
	selfSigned *tls.Certificate // made once, used while no Cert is configured; guarded by mu
	cur        atomic.Pointer[serverState]
}

type serverState struct {
	keys *Keyring
	tls  *tls.Config
}

// NewServer checks cfg and returns a Server.
func NewServer(cfg ServerConfig) (*Server, error) {
	s := &Server{insecure: cfg.Insecure}
	if err := s.Update(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// Insecure reports whether this server runs plaintext, unauthenticated tunnels.
func (s *Server) Insecure() bool { return s.insecure }

// Update replaces the credentials used for new connections. Switching between insecure
// and authenticated needs a restart. It is safe to call concurrently with Handshake and
// with itself.
func (s *Server) Update(cfg ServerConfig) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cfg.Insecure != s.insecure {
		return errors.New("switching insecure on or off needs a restart")
	}
	if cfg.Insecure {
		if cfg.Keys != nil || cfg.Cert != nil || cfg.ClientCAs != nil {
			return errors.New("insecure: true cannot be combined with auth or tls")
		}
		return nil
	}
	if cfg.Keys == nil && cfg.ClientCAs == nil {
		return errors.New("no way to authenticate edges: set a shared key (auth), a client CA (tls.ca_file), or insecure: true")
	}
	cert := cfg.Cert
	if cert == nil {
		if s.selfSigned == nil {
			c, err := SelfSignedCertificate("soapgw-origin")
			if err != nil {
				return err
			}
			s.selfSigned = c
		}
		cert = s.selfSigned
	}
	tc := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{*cert},
		SessionTicketsDisabled: true, // tunnel connections are long-lived; keep no ticket keys
	}
	if cfg.ClientCAs != nil {
		tc.ClientCAs = cfg.ClientCAs
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	s.cur.Store(&serverState{keys: cfg.Keys, tls: tc})
	return nil
}

// Handshake authenticates an accepted connection within ctx. It returns the connection
// to run the tunnel on and a short description of who the peer proved to be (for logs),
// or an *Error. It does not close conn on failure.
func (s *Server) Handshake(ctx context.Context, conn net.Conn) (net.Conn, string, error) {
	stop := bindDeadline(ctx, conn)
	defer stop()
	first, err := peekByte(conn)
	if err != nil {
		return nil, "", fail(ResultIO, fmt.Errorf("read first byte: %w", err))
	}
	pc := &prefixConn{Conn: conn, prefix: []byte{first}}
	if s.insecure {
		if first == tlsRecordHandshake {
			return nil, "", &Error{Result: ResultUnexpectedTLS, Err: errors.New("the edge starts TLS but this origin has insecure: true (give both sides the same auth settings)")}
		}
		return pc, "unauthenticated (insecure)", nil
	}
	if first != tlsRecordHandshake {
		why := "the peer does not speak TLS"
		if first == 0 {
			why = "the peer sent a plaintext tunnel handshake: an edge with insecure: true, but this origin requires authentication"
		}
		return nil, "", &Error{Result: ResultNotTLS, Err: errors.New(why)}
	}
	st := s.cur.Load()
	tc := tls.Server(pc, st.tls)
	// Handshake, not HandshakeContext: bindDeadline already ends the handshake with ctx,
	// and HandshakeContext would close conn when ctx ends, which this method promises
	// not to do.
	if err := tc.Handshake(); err != nil {
		return nil, "", fail(ResultTLS, err)
	}
	who := ""
	if cs := tc.ConnectionState(); len(cs.PeerCertificates) > 0 {
		who = "certificate " + cs.PeerCertificates[0].Subject.String()
	}
	if st.keys != nil {
		exp, err := exporter(tc.ConnectionState())
		if err != nil {
			return nil, "", fail(ResultTLS, err)
		}
		id, err := serverProof(tc, exp, st.keys)
		if err != nil {
			return nil, "", err
		}
		if who != "" {
			who += ", "
		}
		who += "key " + id.String()
	}
	return tc, who, nil
}

// serverProof reads the edge's proof, checks it against the keys and answers with the
// origin's proof (or a refusal, so the edge can say why it was turned away).
func serverProof(tc io.ReadWriter, exp []byte, keys *Keyring) (KeyID, error) {
	b := make([]byte, ProofLen)
	if _, err := io.ReadFull(tc, b); err != nil {
		return KeyID{}, fail(ResultIO, fmt.Errorf("read edge proof: %w", err))
	}
	p, err := ParseProof(b)
	if err != nil {
		if !bytes.HasPrefix(b, proofMagic[:]) {
			// Most likely the tunnel HELLO of an edge that authenticates by certificate
			// alone, while this origin also requires the shared key.
			err = fmt.Errorf("%w (the edge sent no key proof: this origin requires the shared key, auth, as well)", err)
		}
		return KeyID{}, &Error{Result: ResultProtocol, Err: err}
	}
	if p.Kind != KindEdge {
		return KeyID{}, &Error{Result: ResultProtocol, Err: fmt.Errorf("first proof is of kind %s, want edge", p.Kind)}
	}
	k, ok := keys.Lookup(p.KeyID)
	if !ok || !p.verify(k, exp) {
		_, _ = tc.Write(Proof{Kind: KindRefused, KeyID: p.KeyID}.Append(nil))
		if !ok {
			return p.KeyID, &Error{Result: ResultBadKey, Err: fmt.Errorf("edge used key id %s, which this origin does not hold (it holds %v)", p.KeyID, keys.IDs())}
		}
		return p.KeyID, &Error{Result: ResultBadKey, Err: fmt.Errorf("edge proof for key id %s does not verify", p.KeyID)}
	}
	if _, err := tc.Write(newProof(k, KindOrigin, exp).Append(nil)); err != nil {
		return p.KeyID, fail(ResultIO, fmt.Errorf("send origin proof: %w", err))
	}
	return p.KeyID, nil
}

// ClientConfig is what the dialling side authenticates with.
type ClientConfig struct {
	// Insecure runs a plaintext, unauthenticated tunnel. Nothing else may be set.
	Insecure bool
	// Keys: the primary key proves this edge; the origin must answer with a proof of the
	// same key.
	Keys *Keyring
	// VerifyServer checks the origin's certificate against RootCAs (system roots when
	// nil) and ServerName. Without it the origin is identified by its key proof alone.
	VerifyServer bool
	RootCAs      *x509.CertPool
	ServerName   string
	// Cert is the client certificate for mutual TLS. Optional.
	Cert *tls.Certificate
}

// Client authenticates dialled connections; Update swaps credentials for new ones.
type Client struct {
	insecure bool
	cur      atomic.Pointer[clientState]
}

type clientState struct {
	keys *Keyring
	tls  *tls.Config
}

// NewClient checks cfg and returns a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	c := &Client{insecure: cfg.Insecure}
	if err := c.Update(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// Insecure reports whether this client runs a plaintext, unauthenticated tunnel.
func (c *Client) Insecure() bool { return c.insecure }

// Update replaces the credentials used for new connections.
func (c *Client) Update(cfg ClientConfig) error {
	if cfg.Insecure != c.insecure {
		return errors.New("switching insecure on or off needs a restart")
	}
	if cfg.Insecure {
		if cfg.Keys != nil || cfg.Cert != nil || cfg.VerifyServer {
			return errors.New("insecure: true cannot be combined with auth or tls")
		}
		return nil
	}
	if cfg.Keys == nil && cfg.Cert == nil {
		return errors.New("no credentials for the origin: set a shared key (auth), a client certificate (tls.cert_file, tls.key_file), or insecure: true")
	}
	if cfg.Keys == nil && !cfg.VerifyServer {
		return errors.New("a client certificate without server verification would talk to anyone: configure tls to verify the origin")
	}
	tc := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		ServerName:             cfg.ServerName,
		RootCAs:                cfg.RootCAs,
		SessionTicketsDisabled: true,
	}
	if !cfg.VerifyServer {
		// The origin's certificate is one it made itself; its key proof, bound to this
		// connection's TLS secrets, is what identifies it (see package doc).
		tc.InsecureSkipVerify = true
	}
	if cert := cfg.Cert; cert != nil {
		// Always present the configured certificate. With tls.Config.Certificates, Go
		// sends none when its issuer is not among the CA names the origin lists as
		// acceptable; the origin then reports "client didn't provide a certificate"
		// (tls_failed) and the edge "certificate required", while the real cause is a
		// certificate from another CA, which the origin reports as bad_certificate.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	c.cur.Store(&clientState{keys: cfg.Keys, tls: tc})
	return nil
}

// Handshake authenticates a dialled connection within ctx and returns the connection to
// run the tunnel on, or an *Error. It does not close conn on failure.
func (c *Client) Handshake(ctx context.Context, conn net.Conn) (net.Conn, error) {
	if c.insecure {
		return &silentCloseConn{Conn: conn, hint: hintInsecureEdge}, nil
	}
	stop := bindDeadline(ctx, conn)
	defer stop()
	st := c.cur.Load()
	tc := tls.Client(&silentCloseConn{Conn: conn, hint: hintSecureEdge}, st.tls)
	if err := tc.Handshake(); err != nil { // bounded by bindDeadline, as in Server.Handshake
		return nil, fail(ResultTLS, err)
	}
	if st.keys == nil {
		return tc, nil
	}
	exp, err := exporter(tc.ConnectionState())
	if err != nil {
		return nil, fail(ResultTLS, err)
	}
	if err := clientProof(tc, exp, st.keys); err != nil {
		return nil, err
	}
	return tc, nil
}

// clientProof sends the edge's proof and checks the origin's answer.
func clientProof(tc io.ReadWriter, exp []byte, keys *Keyring) error {
	k := keys.Primary()
	if _, err := tc.Write(newProof(k, KindEdge, exp).Append(nil)); err != nil {
		return fail(ResultIO, fmt.Errorf("send edge proof: %w", err))
	}
	b := make([]byte, ProofLen)
	if _, err := io.ReadFull(tc, b); err != nil {
		return fail(ResultIO, fmt.Errorf("read origin proof (the origin closed: wrong kind of credentials?): %w", err))
	}
	p, err := ParseProof(b)
	if err != nil {
		return &Error{Result: ResultProtocol, Err: err}
	}
	switch {
	case p.Kind == KindRefused:
		return &Error{Result: ResultBadKey, Err: fmt.Errorf("%w (key id %s)", ErrKeyRefused, k.ID())}
	case p.Kind != KindOrigin || p.KeyID != k.ID() || !p.verify(k, exp):
		return &Error{Result: ResultBadKey, Err: ErrOriginProof}
	}
	return nil
}

func exporter(cs tls.ConnectionState) ([]byte, error) {
	if cs.Version != tls.VersionTLS13 {
		return nil, fmt.Errorf("TLS version %x, want 1.3", cs.Version)
	}
	return cs.ExportKeyingMaterial(exporterLabel, nil, 32)
}

// bindDeadline makes conn's I/O fail when ctx ends (its deadline, or cancellation), and
// returns a function that undoes that. Once stop has returned, conn has no deadline and
// nothing will set one.
func bindDeadline(ctx context.Context, conn net.Conn) (stop func()) {
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	hooked := make(chan struct{})
	unhook := context.AfterFunc(ctx, func() {
		defer close(hooked)
		_ = conn.SetDeadline(time.Unix(1, 0))
	})
	return func() {
		if !unhook() {
			// ctx ended while the handshake finished, and the hook runs on its own
			// goroutine: wait for it, or its past deadline could land after the reset
			// below and break a connection handed out as authenticated.
			<-hooked
		}
		_ = conn.SetDeadline(time.Time{})
	}
}

func peekByte(conn net.Conn) (byte, error) {
	var b [1]byte
	_, err := io.ReadFull(conn, b[:])
	return b[0], err
}

// Hints for an edge whose origin closed the connection before sending a byte: what an
// origin in another mode does (see SPEC.md, Modes), which would otherwise reach the
// operator as a bare EOF or connection reset.
const (
	hintInsecureEdge = "the origin closed the connection without answering the plaintext tunnel handshake: " +
		"if it requires authentication, this peer needs its auth or tls settings instead of insecure: true"
	hintSecureEdge = "the origin closed the connection without answering TLS: " +
		"if it runs with insecure: true, this peer needs insecure: true too"
)

// silentCloseConn adds hint to a read that fails because the peer closed the connection
// before it sent a single byte.
type silentCloseConn struct {
	net.Conn
	hint string
	got  atomic.Bool // a byte arrived
}

func (c *silentCloseConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.got.Store(true)
	} else if err != nil && !c.got.Load() && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		err = &hintError{err: err, hint: c.hint}
	}
	return n, err
}

// CloseWrite half-closes the underlying connection, as the tunnel's graceful close needs.
func (c *silentCloseConn) CloseWrite() error { return closeWrite(c.Conn) }

// NetConn is the connection below, as tls.Conn's (socket options: internal/sockopt).
func (c *silentCloseConn) NetConn() net.Conn { return c.Conn }

type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + " (" + e.hint + ")" }
func (e *hintError) Unwrap() error { return e.err }

// closeWrite half-closes conn if it can (a TCP connection).
func closeWrite(conn net.Conn) error {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// prefixConn replays bytes already read from its connection before reading on.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the underlying connection. The tunnel session closes gracefully
// with a half-close (a close with unread input would send RST, which can make the peer's
// kernel drop the last responses); without this method an insecure origin's sessions
// lost that and were closed outright.
func (c *prefixConn) CloseWrite() error { return closeWrite(c.Conn) }

// NetConn is the connection below, as tls.Conn's (socket options: internal/sockopt).
func (c *prefixConn) NetConn() net.Conn { return c.Conn }
