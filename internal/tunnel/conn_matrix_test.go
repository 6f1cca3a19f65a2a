package tunnel

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// connPair makes a connected pair of transport connections.
type connPair func(t *testing.T) (client, server net.Conn)

// testConnTypes runs f over each transport the tunnel must work on (after yamux's
// testConnTypes): a synchronous in-memory pipe, TCP loopback and TLS over TCP.
func testConnTypes(t *testing.T, f func(t *testing.T, pair connPair)) {
	t.Run("pipe", func(t *testing.T) {
		f(t, func(t *testing.T) (net.Conn, net.Conn) { return net.Pipe() })
	})
	t.Run("tcp", func(t *testing.T) { f(t, tcpPair) })
	t.Run("tls", func(t *testing.T) { f(t, tlsPair) })
}

func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- nil
			return
		}
		ch <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	s := <-ch
	require.NotNil(t, s)
	return c, s
}

func tlsPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	c, s := tcpPair(t)
	cert := selfSigned(t)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "soapgw.test"})
	ts := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{cert}})
	return tc, ts
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		DNSNames:     []string{"soapgw.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// sessionPair runs the handshake on a fresh pair and closes both sessions at test end.
func sessionPair(t *testing.T, pair connPair, ccfg, scfg *Config) (client, server *Session) {
	t.Helper()
	c, s := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	type res struct {
		s   *Session
		err error
	}
	ch := make(chan res, 1)
	go func() {
		ss, err := ServerSession(ctx, s, scfg, nil)
		ch <- res{ss, err}
	}()
	cs, err := ClientSession(ctx, c, ccfg, nil, "test")
	require.NoError(t, err)
	r := <-ch
	require.NoError(t, r.err)
	t.Cleanup(func() {
		_ = cs.Close()
		_ = r.s.Close()
	})
	return cs, r.s
}
