// Package testutil holds helpers shared by tests of several packages: connected pairs of
// transport connections (TCP loopback, TLS), and HTTP servers written byte by byte whose
// behaviour is the point of a test (server.go). It is imported only by _test.go files.
package testutil

import (
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

// TCPPair returns the two ends of a fresh TCP connection over loopback.
func TCPPair(t testing.TB) (client, server net.Conn) {
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

// TLSPair returns the two ends of a TLS connection over loopback TCP, with a fresh
// self-signed certificate for "soapgw.test". The handshake runs on first use.
func TLSPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	c, s := TCPPair(t)
	cert := SelfSigned(t)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	return tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "soapgw.test"}),
		tls.Server(s, &tls.Config{Certificates: []tls.Certificate{cert}})
}

// SelfSigned makes an ECDSA certificate for "soapgw.test" valid for an hour.
func SelfSigned(t testing.TB) tls.Certificate {
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
