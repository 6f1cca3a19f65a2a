package peerauth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// testKeyring makes a keyring of fresh keys, the first one primary.
func testKeyring(t testing.TB, keys ...Key) *Keyring {
	t.Helper()
	r, err := NewKeyring(keys...)
	require.NoError(t, err)
	return r
}

func newTestKey(t testing.TB) Key {
	t.Helper()
	s, err := GenerateKey()
	require.NoError(t, err)
	r, err := ParseKeys("k", []byte(s))
	require.NoError(t, err)
	return r.Primary()
}

// testPKI is a CA with an origin and an edge certificate.
type testPKI struct {
	pool         *x509.CertPool
	origin, edge *tls.Certificate
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	return newTestPKINamed(t, "test CA")
}

// newTestPKINamed is newTestPKI with a CA of the given name: a TLS client learns only
// the names of the CAs a server accepts, so a CA of another name is told apart earlier.
func newTestPKINamed(t testing.TB, caName string) *testPKI {
	t.Helper()
	caPEM, caKeyPEM, err := NewCertificatePEM(caName, nil, nil)
	require.NoError(t, err)
	ca, err := tls.X509KeyPair(caPEM, caKeyPEM)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	require.NoError(t, err)
	p := &testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	for _, c := range []struct {
		name string
		dst  **tls.Certificate
	}{{"origin.test", &p.origin}, {"edge.test", &p.edge}} {
		certPEM, keyPEM, err := NewCertificatePEM(c.name, caCert, ca.PrivateKey.(*ecdsa.PrivateKey))
		require.NoError(t, err)
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		require.NoError(t, err)
		*c.dst = &pair
	}
	return p
}

// pipeTCP returns both ends of a real loopback TCP connection.
func pipeTCP(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

type result struct {
	conn net.Conn
	who  string
	err  error
}

// handshake runs both sides concurrently over loopback TCP, within a deadline.
func handshake(t testing.TB, s *Server, c *Client) (srv, cli result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return handshakeWithin(t, ctx, s, c)
}

// handshakeWithin is handshake with the caller's ctx.
func handshakeWithin(t testing.TB, ctx context.Context, s *Server, c *Client) (srv, cli result) {
	t.Helper()
	cc, sc := pipeTCP(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv.conn, srv.who, srv.err = s.Handshake(ctx, sc)
		if srv.err != nil {
			_ = sc.Close() // as the tunnel server does: the client sees the refusal
		}
	}()
	cli.conn, cli.err = c.Handshake(ctx, cc)
	if cli.err != nil {
		_ = cc.Close()
	} else if c.Insecure() {
		// The origin learns the mode from the first byte, which is the tunnel HELLO's;
		// stand in for it.
		_, cli.err = cc.Write([]byte{0})
	}
	wg.Wait()
	if c.Insecure() && srv.err == nil {
		b := make([]byte, 1)
		_, srv.err = io.ReadFull(srv.conn, b)
	}
	return srv, cli
}

// requireChannel sends bytes both ways through an authenticated pair.
func requireChannel(t *testing.T, a, b net.Conn) {
	t.Helper()
	go func() { _, _ = a.Write([]byte("ping")) }()
	got := make([]byte, 4)
	_, err := io.ReadFull(b, got)
	require.NoError(t, err)
	require.Equal(t, "ping", string(got))
}

func resultOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Result
	}
	return ""
}

func TestHandshake(t *testing.T) {
	k1, k2, k3 := newTestKey(t), newTestKey(t), newTestKey(t)
	pki, other, stranger := newTestPKI(t), newTestPKI(t), newTestPKINamed(t, "another CA")
	mustServer := func(cfg ServerConfig) *Server {
		s, err := NewServer(cfg)
		require.NoError(t, err)
		return s
	}
	mustClient := func(cfg ClientConfig) *Client {
		c, err := NewClient(cfg)
		require.NoError(t, err)
		return c
	}
	keyServer := mustServer(ServerConfig{Keys: testKeyring(t, k1, k2)}) // accepts k1 and k2
	mtlsServer := mustServer(ServerConfig{Cert: pki.origin, ClientCAs: pki.pool})
	bothServer := mustServer(ServerConfig{Keys: testKeyring(t, k1), Cert: pki.origin, ClientCAs: pki.pool})
	insecureServer := mustServer(ServerConfig{Insecure: true})
	mtlsClient := func(ca *x509.CertPool, cert *tls.Certificate) *Client {
		return mustClient(ClientConfig{VerifyServer: true, RootCAs: ca, ServerName: "origin.test", Cert: cert})
	}

	for name, tc := range map[string]struct {
		server     *Server
		client     *Client
		serverWant string // "" for success, else the server's Result
		clientErr  error  // errors.Is target on the client's error, when the server refuses
		who        string // prefix of the server's description of the peer
	}{
		"shared key":                            {keyServer, mustClient(ClientConfig{Keys: testKeyring(t, k1)}), "", nil, "key " + k1.ID().String()},
		"rotation: old key first":               {keyServer, mustClient(ClientConfig{Keys: testKeyring(t, k1, k2)}), "", nil, "key " + k1.ID().String()},
		"rotation: new key first":               {keyServer, mustClient(ClientConfig{Keys: testKeyring(t, k2, k1)}), "", nil, "key " + k2.ID().String()},
		"wrong key":                             {keyServer, mustClient(ClientConfig{Keys: testKeyring(t, k3)}), ResultBadKey, ErrKeyRefused, ""},
		"mutual TLS":                            {mtlsServer, mtlsClient(pki.pool, pki.edge), "", nil, "certificate CN=edge.test"},
		"mutual TLS and key":                    {bothServer, mustClient(ClientConfig{Keys: testKeyring(t, k1), VerifyServer: true, RootCAs: pki.pool, ServerName: "origin.test", Cert: pki.edge}), "", nil, "certificate CN=edge.test,O=soapgw, key"},
		"key but no client certificate":         {bothServer, mustClient(ClientConfig{Keys: testKeyring(t, k1)}), ResultTLS, nil, ""},
		"client cert from another CA":           {mtlsServer, mtlsClient(pki.pool, other.edge), ResultBadCertificate, nil, ""},
		"client cert from a CA of another name": {mtlsServer, mtlsClient(pki.pool, stranger.edge), ResultBadCertificate, nil, ""},
		"insecure both":                         {insecureServer, mustClient(ClientConfig{Insecure: true}), "", nil, "unauthenticated"},
		"insecure edge, secure origin":          {keyServer, mustClient(ClientConfig{Insecure: true}), ResultNotTLS, nil, ""},
		"secure edge, insecure origin":          {insecureServer, mustClient(ClientConfig{Keys: testKeyring(t, k1)}), ResultUnexpectedTLS, nil, ""},
		"edge distrusts the origin's CA":        {mtlsServer, mtlsClient(other.pool, pki.edge), ResultTLS, nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.client.Insecure() && !tc.server.Insecure() {
				// An insecure edge sends its tunnel HELLO at once; stand in for it.
				cc, sc := pipeTCP(t)
				go func() { _, _ = cc.Write([]byte{0, 0, 2, 5, 0, 0, 0, 0, 0, '{', '}'}) }()
				_, _, err := tc.server.Handshake(context.Background(), sc)
				require.Equal(t, tc.serverWant, resultOf(err), "%v", err)
				return
			}
			srv, cli := handshake(t, tc.server, tc.client)
			if tc.serverWant == "" {
				require.NoError(t, srv.err)
				require.NoError(t, cli.err)
				require.Contains(t, srv.who, tc.who)
				requireChannel(t, cli.conn, srv.conn)
				requireChannel(t, srv.conn, cli.conn)
				return
			}
			require.Error(t, srv.err, "the origin must refuse")
			require.Equal(t, tc.serverWant, resultOf(srv.err), "%v", srv.err)
			if cli.err == nil {
				// TLS 1.3: a client's handshake ends before the server has checked its
				// certificate; the refusal arrives as an alert on the first read (in the
				// gateway: the tunnel HELLO), so the edge never gets a session either.
				require.Nil(t, tc.client.cur.Load().keys, "with a key the proof exchange reports the refusal")
				_ = cli.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err := cli.conn.Read(make([]byte, 1))
				require.ErrorContains(t, err, "tls: ")
			}
			if tc.clientErr != nil {
				require.ErrorIs(t, cli.err, tc.clientErr)
			}
		})
	}
}

func TestHandshakeRefusesGarbageSilenceAndBadProofs(t *testing.T) {
	s, err := NewServer(ServerConfig{Keys: testKeyring(t, newTestKey(t))})
	require.NoError(t, err)
	run := func(client func(c net.Conn)) error {
		cc, sc := pipeTCP(t)
		go client(cc)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, _, err := s.Handshake(ctx, sc)
		require.Error(t, err)
		return err
	}
	require.Equal(t, ResultTimeout, resultOf(run(func(net.Conn) {})), "a silent peer")
	require.Equal(t, ResultNotTLS, resultOf(run(func(c net.Conn) { _, _ = c.Write([]byte("GET / HTTP/1.1\r\n\r\n")) })))
	require.Equal(t, ResultTLS, resultOf(run(func(c net.Conn) { _, _ = c.Write([]byte{0x16, 0x03, 0x01, 0, 5, 1, 2, 3, 4, 5}) })))
	require.Equal(t, ResultIO, resultOf(run(func(c net.Conn) { _ = c.Close() })))
	tlsThen := func(after []byte) func(c net.Conn) {
		return func(c net.Conn) {
			tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
			if tc.Handshake() == nil {
				_, _ = tc.Write(after)
				_, _ = io.Copy(io.Discard, tc)
			}
		}
	}
	require.Equal(t, ResultProtocol, resultOf(run(tlsThen(bytes.Repeat([]byte{'x'}, ProofLen)))), "not a proof")
	wrong := newProof(newTestKey(t), KindEdge, make([]byte, 32)).Append(nil)
	require.Equal(t, ResultBadKey, resultOf(run(tlsThen(wrong))), "a key the origin does not hold")
	require.Equal(t, ResultTimeout, resultOf(run(tlsThen(nil))), "TLS, then silence")
}

// TestHandshakeReplayedCaptureFails: the bytes an edge sent on a successful connection,
// replayed on a new one, do not authenticate: the TLS handshake (fresh randoms) fails.
func TestHandshakeReplayedCaptureFails(t *testing.T) {
	k := newTestKey(t)
	s, err := NewServer(ServerConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)
	c, err := NewClient(ClientConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)

	cc, sc := pipeTCP(t)
	rec := &recordingConn{Conn: cc}
	done := make(chan error, 1)
	go func() { _, _, err := s.Handshake(context.Background(), sc); done <- err }()
	conn, err := c.Handshake(context.Background(), rec)
	require.NoError(t, err)
	require.NoError(t, <-done)
	_ = conn

	cc2, sc2 := pipeTCP(t)
	go func() { _, _ = cc2.Write(rec.bytes()); _, _ = io.Copy(io.Discard, cc2) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _, err = s.Handshake(ctx, sc2)
	require.Error(t, err)
	// The origin answers the replayed ClientHello with fresh randoms and a fresh key
	// share, so the replayed Finished was encrypted under keys this connection does not
	// have: TLS fails on it, before any proof is read.
	require.Equal(t, ResultTLS, resultOf(err), "%v", err)
	require.ErrorContains(t, err, "bad record MAC")
}

// TestHandshakeMachineInTheMiddle: a relay that terminates the edge's TLS itself and
// opens its own TLS connection to the origin cannot make either proof verify: the edge
// never completes.
func TestHandshakeMachineInTheMiddle(t *testing.T) {
	k := newTestKey(t)
	origin, err := NewServer(ServerConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)
	edge, err := NewClient(ClientConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)

	// The attacker: TLS server towards the edge, TLS client towards the origin, copying
	// the plaintext between them (it can, its TLS ends are its own).
	edgeSide, attackerIn := pipeTCP(t)
	attackerOut, originSide := pipeTCP(t)
	go func() {
		cert, _ := SelfSignedCertificate("mitm")
		in := tls.Server(attackerIn, &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS13})
		out := tls.Client(attackerOut, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if in.Handshake() != nil || out.Handshake() != nil {
			return
		}
		go func() { _, _ = io.Copy(out, in) }()
		_, _ = io.Copy(in, out)
	}()
	originErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, _, err := origin.Handshake(ctx, originSide)
		_ = originSide.Close()
		originErr <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := edge.Handshake(ctx, edgeSide)
	require.Error(t, err, "the edge must not authenticate through a relay")
	require.Nil(t, conn)
	// The relayed edge proof is bound to the edge↔relay exporter, so the origin refuses
	// it, and the relay can only pass the refusal on.
	require.ErrorIs(t, err, ErrKeyRefused)
	require.Equal(t, ResultBadKey, resultOf(<-originErr), "the origin refuses the relayed proof")
}

// TestHandshakeImpostorOrigins: whatever a party without the key answers the edge's
// proof with, the edge refuses to go on.
func TestHandshakeImpostorOrigins(t *testing.T) {
	k, other := newTestKey(t), newTestKey(t)
	edge, err := NewClient(ClientConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)
	otherOrigin, err := NewServer(ServerConfig{Keys: testKeyring(t, other)})
	require.NoError(t, err)
	cert, err := SelfSignedCertificate("impostor")
	require.NoError(t, err)

	// impostor completes TLS with the edge, reads its proof and sends answer(proof).
	impostor := func(answer func(edgeProof []byte) []byte) func(net.Conn) {
		return func(c net.Conn) {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS13})
			b := make([]byte, ProofLen)
			if _, err := io.ReadFull(tc, b); err != nil {
				return
			}
			_, _ = tc.Write(answer(b))
		}
	}
	for name, tc := range map[string]struct {
		origin func(net.Conn)
		want   error  // errors.Is target
		result string // the edge's Error.Result
	}{
		"an origin with another key": {func(c net.Conn) {
			_, _, _ = otherOrigin.Handshake(context.Background(), c)
		}, ErrKeyRefused, ResultBadKey},
		"reflects the edge's proof as the origin's": {impostor(func(p []byte) []byte {
			p[5] = byte(KindOrigin)
			return p
		}), ErrOriginProof, ResultBadKey},
		"sends back the edge's proof unchanged": {impostor(func(p []byte) []byte { return p }), ErrOriginProof, ResultBadKey},
		"an origin proof of its own key": {impostor(func([]byte) []byte {
			return newProof(other, KindOrigin, make([]byte, 32)).Append(nil)
		}), ErrOriginProof, ResultBadKey},
		"the right key id, a guessed MAC": {impostor(func(p []byte) []byte {
			p[5] = byte(KindOrigin)
			copy(p[14:], bytes.Repeat([]byte{0xa5}, 32))
			return p
		}), ErrOriginProof, ResultBadKey},
		"not a proof": {impostor(func([]byte) []byte { return bytes.Repeat([]byte{'x'}, ProofLen) }), ErrMalformedProof, ResultProtocol},
	} {
		t.Run(name, func(t *testing.T) {
			cc, sc := pipeTCP(t)
			done := make(chan struct{})
			go func() {
				defer close(done)
				tc.origin(sc)
				_ = sc.Close()
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, err := edge.Handshake(ctx, cc)
			require.Nil(t, conn, "the edge must not authenticate an impostor")
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, tc.result, resultOf(err), "%v", err)
			<-done
		})
	}
}

func TestUpdateAppliesToNewConnectionsOnly(t *testing.T) {
	k1, k2 := newTestKey(t), newTestKey(t)
	s, err := NewServer(ServerConfig{Keys: testKeyring(t, k1)})
	require.NoError(t, err)
	c1, err := NewClient(ClientConfig{Keys: testKeyring(t, k1)})
	require.NoError(t, err)
	srv, cli := handshake(t, s, c1)
	require.NoError(t, srv.err)
	require.NoError(t, cli.err)

	require.NoError(t, s.Update(ServerConfig{Keys: testKeyring(t, k2)}))
	requireChannel(t, cli.conn, srv.conn) // the authenticated connection lives on
	_, cli2 := handshake(t, s, c1)
	require.ErrorIs(t, cli2.err, ErrKeyRefused, "the retired key no longer gets in")
	c2, err := NewClient(ClientConfig{Keys: testKeyring(t, k2)})
	require.NoError(t, err)
	_, cli3 := handshake(t, s, c2)
	require.NoError(t, cli3.err)

	// The same for the edge: after Update, its next connection proves with the new key.
	require.NoError(t, c1.Update(ClientConfig{Keys: testKeyring(t, k2)}))
	srv4, cli4 := handshake(t, s, c1)
	require.NoError(t, cli4.err)
	require.Contains(t, srv4.who, "key "+k2.ID().String())
	requireChannel(t, cli.conn, srv.conn) // and the first connection still lives on

	require.ErrorContains(t, s.Update(ServerConfig{Insecure: true}), "restart")
	require.ErrorContains(t, c2.Update(ClientConfig{Insecure: true}), "restart")
	insecure, err := NewServer(ServerConfig{Insecure: true})
	require.NoError(t, err)
	require.ErrorContains(t, insecure.Update(ServerConfig{Keys: testKeyring(t, k1)}), "restart")
	require.ErrorContains(t, s.Update(ServerConfig{}), "no way to authenticate edges")
	_, cli5 := handshake(t, s, c1)
	require.NoError(t, cli5.err, "a refused Update leaves the credentials as they were")
}

// TestServerUpdateConcurrently: reloads may overlap; the self-made certificate is made
// once, without a data race (go test -race).
func TestServerUpdateConcurrently(t *testing.T) {
	k := newTestKey(t)
	pki := newTestPKI(t)
	s, err := NewServer(ServerConfig{Keys: testKeyring(t, k), Cert: pki.origin})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { require.NoError(t, s.Update(ServerConfig{Keys: testKeyring(t, k)})) })
	}
	wg.Wait()
	c, err := NewClient(ClientConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)
	srv, cli := handshake(t, s, c)
	require.NoError(t, srv.err)
	require.NoError(t, cli.err)
}

// TestHandshakeLeavesNoDeadline: the ctx bounds the handshake only; connections handed
// out keep working after it has ended.
func TestHandshakeLeavesNoDeadline(t *testing.T) {
	k := newTestKey(t)
	s, err := NewServer(ServerConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)
	c, err := NewClient(ClientConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	srv, cli := handshakeWithin(t, ctx, s, c)
	require.NoError(t, srv.err)
	require.NoError(t, cli.err)
	<-ctx.Done()
	requireChannel(t, cli.conn, srv.conn)
	requireChannel(t, srv.conn, cli.conn)
}

// TestHandshakeFailureLeavesConnOpen: Handshake does not close the connection it was
// given, even when ctx ends in the middle of TLS; the caller does.
func TestHandshakeFailureLeavesConnOpen(t *testing.T) {
	k := newTestKey(t)
	s, err := NewServer(ServerConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)
	c, err := NewClient(ClientConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)

	t.Run("server", func(t *testing.T) {
		cc, sc := pipeTCP(t)
		// A TLS record header announcing 100 bytes, then 3 of them: the origin is inside
		// the TLS handshake when ctx ends.
		_, err := cc.Write([]byte{0x16, 0x03, 0x01, 0, 100, 1, 0, 0})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, _, err = s.Handshake(ctx, sc)
		require.Equal(t, ResultTimeout, resultOf(err), "%v", err)
		requireChannel(t, sc, cc)
	})
	t.Run("client", func(t *testing.T) {
		cc, sc := pipeTCP(t) // an origin that never answers
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := c.Handshake(ctx, cc)
		require.Equal(t, ResultTimeout, resultOf(err), "%v", err)
		got := make([]byte, 5)
		_, err = io.ReadFull(sc, got) // the ClientHello's record header
		require.NoError(t, err)
		require.Equal(t, byte(0x16), got[0])
		_, err = cc.Write([]byte("x"))
		require.NoError(t, err, "the edge's connection is still open")
	})
	t.Run("cancelled", func(t *testing.T) {
		cc, sc := pipeTCP(t) // a silent edge; the origin shuts down
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, _, err := s.Handshake(ctx, sc)
		require.Error(t, err)
		requireChannel(t, sc, cc)
	})
}

// deadlineConn records deadlines. A deadline in the past (what bindDeadline sets when
// ctx ends) blocks in SetDeadline until release is closed.
type deadlineConn struct {
	net.Conn
	entered, release chan struct{}

	mu       sync.Mutex
	deadline time.Time
	inHook   bool
	overlap  bool // a deadline was set while the past one was being set
}

func (c *deadlineConn) SetDeadline(d time.Time) error {
	if !d.IsZero() && d.Before(time.Unix(2, 0)) {
		c.mu.Lock()
		c.inHook = true
		c.mu.Unlock()
		close(c.entered)
		<-c.release
		c.mu.Lock()
		defer c.mu.Unlock()
		c.deadline, c.inHook = d, false
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.overlap = c.overlap || c.inHook
	c.deadline = d
	return nil
}

// TestBindDeadlineStopWaitsForTheHook: when ctx ends just as a handshake succeeds, the
// hook that sets a past deadline runs on its own goroutine; stop must not return before
// it has, or the past deadline would land on a connection handed out as good (its first
// read in the tunnel would time out).
func TestBindDeadlineStopWaitsForTheHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &deadlineConn{entered: make(chan struct{}), release: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		stop := bindDeadline(ctx, c)
		cancel()
		<-c.entered // the hook is setting its past deadline
		stopped := make(chan struct{})
		go func() {
			stop()
			close(stopped)
		}()
		synctest.Wait() // stop has returned, or is blocked for good
		early := false
		select {
		case <-stopped:
			early = true
		default:
		}
		close(c.release)
		<-stopped
		require.False(t, early, "stop returned while the ctx hook was still setting its deadline")
		c.mu.Lock()
		defer c.mu.Unlock()
		require.False(t, c.overlap)
		require.True(t, c.deadline.IsZero(), "no deadline left after stop: %v", c.deadline)
	})
}

// TestHandshakeMutualTLSMismatches: mutual-TLS origins refuse an edge that lacks what
// they require, with the cause.
func TestHandshakeMutualTLSMismatches(t *testing.T) {
	k := newTestKey(t)
	pki := newTestPKI(t)
	mtlsServer, err := NewServer(ServerConfig{Cert: pki.origin, ClientCAs: pki.pool})
	require.NoError(t, err)
	bothServer, err := NewServer(ServerConfig{Keys: testKeyring(t, k), Cert: pki.origin, ClientCAs: pki.pool})
	require.NoError(t, err)
	run := func(s *Server, client func(net.Conn)) error {
		cc, sc := pipeTCP(t)
		done := make(chan struct{})
		go func() {
			defer close(done)
			client(cc)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err := s.Handshake(ctx, sc)
		_ = sc.Close()
		<-done
		return err
	}

	t.Run("no client certificate", func(t *testing.T) {
		// NewClient wants a key or a certificate; a bare TLS client stands in for an edge
		// with neither.
		err := run(mtlsServer, func(c net.Conn) {
			tc := tls.Client(c, &tls.Config{RootCAs: pki.pool, ServerName: "origin.test", MinVersion: tls.VersionTLS13})
			if tc.Handshake() == nil {
				_, _ = tc.Read(make([]byte, 1)) // the origin's alert
			}
		})
		require.Equal(t, ResultTLS, resultOf(err), "%v", err)
		require.ErrorContains(t, err, "didn't provide a certificate")
	})

	t.Run("certificate but no key", func(t *testing.T) {
		c, err := NewClient(ClientConfig{VerifyServer: true, RootCAs: pki.pool, ServerName: "origin.test", Cert: pki.edge})
		require.NoError(t, err)
		err = run(bothServer, func(cc net.Conn) {
			conn, err := c.Handshake(context.Background(), cc)
			if err != nil {
				return
			}
			// What the edge's tunnel sends first: its HELLO frame (type 5), longer than a proof.
			hello := `{"proto":3,"node":"edge-1","codecs":[0,1,2],"max_frame":65536,"window":262144,"max_streams":100}`
			frame := append([]byte{0, 0, byte(len(hello)), 5, 0, 0, 0, 0, 0}, hello...)
			_, _ = conn.Write(frame)
			_, _ = conn.Read(make([]byte, 1))
		})
		require.Equal(t, ResultProtocol, resultOf(err), "%v", err)
		require.ErrorIs(t, err, ErrMalformedProof)
		require.ErrorContains(t, err, "the edge sent no key proof")
	})
}

func TestConfigsThatCannotAuthenticate(t *testing.T) {
	_, err := NewServer(ServerConfig{})
	require.ErrorContains(t, err, "no way to authenticate edges")
	pki := newTestPKI(t)
	_, err = NewServer(ServerConfig{Cert: pki.origin})
	require.ErrorContains(t, err, "no way to authenticate edges", "a certificate alone identifies the origin, not the edges")
	_, err = NewServer(ServerConfig{Insecure: true, Keys: testKeyring(t, newTestKey(t))})
	require.ErrorContains(t, err, "cannot be combined")
	_, err = NewClient(ClientConfig{})
	require.ErrorContains(t, err, "no credentials")
	_, err = NewClient(ClientConfig{Cert: pki.edge})
	require.ErrorContains(t, err, "would talk to anyone")
}

type recordingConn struct {
	net.Conn
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recordingConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.buf.Write(p)
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func (r *recordingConn) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}

// BenchmarkHandshake reports the cost of authenticating one new tunnel connection over
// loopback TCP (both sides in this process: TLS 1.3 with X25519 and ECDSA P-256, plus
// the proofs), for the shared key and for mutual TLS.
func BenchmarkHandshake(b *testing.B) {
	k := newTestKey(b)
	pki := newTestPKI(b)
	for _, bc := range []struct {
		name string
		s    ServerConfig
		c    ClientConfig
	}{
		{"shared-key", ServerConfig{Keys: testKeyring(b, k)}, ClientConfig{Keys: testKeyring(b, k)}},
		{"mutual-tls", ServerConfig{Cert: pki.origin, ClientCAs: pki.pool}, ClientConfig{VerifyServer: true, RootCAs: pki.pool, ServerName: "origin.test", Cert: pki.edge}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := NewServer(bc.s)
			require.NoError(b, err)
			c, err := NewClient(bc.c)
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				srv, cli := handshake(b, s, c)
				if srv.err != nil || cli.err != nil {
					b.Fatal(srv.err, cli.err)
				}
				_ = cli.conn.Close()
				_ = srv.conn.Close()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handshakes/s")
		})
	}
}

// TestMismatchedModesSayWhy: an origin in another mode closes the connection without a
// word; the edge's error says what that likely means instead of a bare EOF or reset.
func TestMismatchedModesSayWhy(t *testing.T) {
	k := newTestKey(t)
	keyServer, err := NewServer(ServerConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)
	insecureServer, err := NewServer(ServerConfig{Insecure: true})
	require.NoError(t, err)
	keyClient, err := NewClient(ClientConfig{Keys: testKeyring(t, k)})
	require.NoError(t, err)
	insecureClient, err := NewClient(ClientConfig{Insecure: true})
	require.NoError(t, err)

	t.Run("secure edge, insecure origin", func(t *testing.T) {
		srv, cli := handshake(t, insecureServer, keyClient)
		require.Equal(t, ResultUnexpectedTLS, resultOf(srv.err))
		require.Equal(t, ResultTLS, resultOf(cli.err))
		require.ErrorContains(t, cli.err, "without answering TLS: if it runs with insecure: true, this peer needs insecure: true too")
	})

	t.Run("insecure edge, secure origin", func(t *testing.T) {
		cc, sc := pipeTCP(t)
		done := make(chan error, 1)
		go func() {
			_, _, err := keyServer.Handshake(context.Background(), sc)
			_ = sc.Close() // as the tunnel server does
			done <- err
		}()
		conn, err := insecureClient.Handshake(context.Background(), cc)
		require.NoError(t, err)
		_, err = conn.Write([]byte{0, 0, 2, 5, 0, 0, 0, 0, 0, '{', '}'}) // stands in for a HELLO
		require.NoError(t, err)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 16))
		require.ErrorContains(t, err, "without answering the plaintext tunnel handshake")
		require.Equal(t, ResultNotTLS, resultOf(<-done))
	})

	t.Run("no hint once the origin spoke", func(t *testing.T) {
		srv, cli := handshake(t, insecureServer, insecureClient)
		require.NoError(t, srv.err)
		require.NoError(t, cli.err)
		_, err := srv.conn.Write([]byte("x"))
		require.NoError(t, err)
		require.NoError(t, srv.conn.Close())
		b := make([]byte, 1)
		_, err = io.ReadFull(cli.conn, b)
		require.NoError(t, err)
		_, err = cli.conn.Read(b)
		require.Equal(t, io.EOF, err, "a close after the handshake is a plain EOF")
	})
}

// TestInsecureConnectionsHalfClose: the connections an insecure origin and edge run their
// tunnel on can half-close, as the tunnel's graceful close needs (a full close with
// unread input sends RST, which can drop the last responses at the peer).
func TestInsecureConnectionsHalfClose(t *testing.T) {
	s, err := NewServer(ServerConfig{Insecure: true})
	require.NoError(t, err)
	c, err := NewClient(ClientConfig{Insecure: true})
	require.NoError(t, err)
	srv, cli := handshake(t, s, c)
	require.NoError(t, srv.err)
	require.NoError(t, cli.err)
	for _, end := range []struct {
		name     string
		from, to net.Conn
	}{{"origin", srv.conn, cli.conn}, {"edge", cli.conn, srv.conn}} {
		cw, ok := end.from.(interface{ CloseWrite() error })
		require.True(t, ok, "the %s's connection (%T) cannot half-close", end.name, end.from)
		_, err := end.from.Write([]byte("last"))
		require.NoError(t, err)
		require.NoError(t, cw.CloseWrite())
		_ = end.to.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(end.to)
		require.NoError(t, err)
		require.Equal(t, "last", string(got))
	}
}

// TestHandshakeConnsReachTheSocket: the connections a handshake returns, in every mode,
// lead through NetConn to the TCP socket, where the tunnel reads TCP_INFO (its keepalive
// counts the peer's acknowledgements: internal/sockopt.BytesAcked).
func TestHandshakeConnsReachTheSocket(t *testing.T) {
	k := newTestKey(t)
	for name, pair := range map[string]struct {
		s ServerConfig
		c ClientConfig
	}{
		"key":      {ServerConfig{Keys: testKeyring(t, k)}, ClientConfig{Keys: testKeyring(t, k)}},
		"insecure": {ServerConfig{Insecure: true}, ClientConfig{Insecure: true}},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := NewServer(pair.s)
			require.NoError(t, err)
			c, err := NewClient(pair.c)
			require.NoError(t, err)
			srv, cli := handshake(t, s, c)
			require.NoError(t, srv.err)
			require.NoError(t, cli.err)
			for _, conn := range []net.Conn{srv.conn, cli.conn} {
				for range 8 {
					nc, ok := conn.(interface{ NetConn() net.Conn })
					if !ok {
						break
					}
					conn = nc.NetConn()
				}
				require.IsType(t, &net.TCPConn{}, conn)
			}
		})
	}
}
