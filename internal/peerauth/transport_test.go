package peerauth

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// transportPair runs a TLS handshake with the configs a transport gets from TLSConfig (as
// QUIC would), then the key proof over the TLS connection, and returns both results.
func transportPair(t *testing.T, s *Server, c *Client) (who string, srvErr, cliErr error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	_ = b.SetDeadline(time.Now().Add(5 * time.Second))
	type res struct {
		who string
		err error
	}
	srv := make(chan res, 1)
	go func() {
		tc := tls.Server(a, s.TLSConfig("test/1"))
		if err := tc.HandshakeContext(ctx); err != nil {
			srv <- res{err: err}
			return
		}
		require.Equal(t, "test/1", tc.ConnectionState().NegotiatedProtocol)
		w, err := s.VerifyEdge(tc.ConnectionState(), tc)
		srv <- res{w, err}
	}()
	tc := tls.Client(b, c.TLSConfig("test/1"))
	cliErr = tc.HandshakeContext(ctx)
	if cliErr == nil {
		cliErr = c.ProveEdge(tc.ConnectionState(), tc)
	}
	if cliErr != nil {
		_ = b.Close() // unblock the server
	}
	r := <-srv
	return r.who, r.err, cliErr
}

func TestTransportAuthentication(t *testing.T) {
	k1, k2 := newTestKey(t), newTestKey(t)
	pki := newTestPKI(t)
	keyServer, err := NewServer(ServerConfig{Keys: testKeyring(t, k1)})
	require.NoError(t, err)
	good, err := NewClient(ClientConfig{Keys: testKeyring(t, k1)})
	require.NoError(t, err)
	who, srvErr, cliErr := transportPair(t, keyServer, good)
	require.NoError(t, srvErr)
	require.NoError(t, cliErr)
	require.Equal(t, "key "+k1.ID().String(), who)
	require.True(t, good.NeedsProof())

	wrong, err := NewClient(ClientConfig{Keys: testKeyring(t, k2)})
	require.NoError(t, err)
	_, srvErr, cliErr = transportPair(t, keyServer, wrong)
	require.ErrorIs(t, cliErr, ErrKeyRefused)
	require.Equal(t, ResultBadKey, resultOf(srvErr))

	// Mutual TLS alone: TLS verifies the certificate; there is no proof to exchange.
	mtlsServer, err := NewServer(ServerConfig{ClientCAs: pki.pool, Cert: pki.origin})
	require.NoError(t, err)
	mtlsClient, err := NewClient(ClientConfig{Cert: pki.edge, VerifyServer: true, RootCAs: pki.pool, ServerName: "origin.test"})
	require.NoError(t, err)
	require.False(t, mtlsClient.NeedsProof())
	who, srvErr, cliErr = transportPair(t, mtlsServer, mtlsClient)
	require.NoError(t, srvErr)
	require.NoError(t, cliErr)
	require.Contains(t, who, "certificate CN=edge.test")

	// Insecure on both sides: encrypted, nobody verified.
	is, err := NewServer(ServerConfig{Insecure: true})
	require.NoError(t, err)
	ic, err := NewClient(ClientConfig{Insecure: true})
	require.NoError(t, err)
	who, srvErr, cliErr = transportPair(t, is, ic)
	require.NoError(t, srvErr)
	require.NoError(t, cliErr)
	require.Contains(t, who, "insecure")

	// The server's credentials apply per handshake: after Update, the old key is refused.
	require.NoError(t, keyServer.Update(ServerConfig{Keys: testKeyring(t, k2)}))
	_, _, cliErr = transportPair(t, keyServer, good)
	require.ErrorIs(t, cliErr, ErrKeyRefused)
}
