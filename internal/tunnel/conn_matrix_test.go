package tunnel

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/testutil"
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

func tcpPair(t *testing.T) (net.Conn, net.Conn) { return testutil.TCPPair(t) }

func tlsPair(t *testing.T) (net.Conn, net.Conn) { return testutil.TLSPair(t) }

// sessionPair runs the handshake on a fresh pair and closes both sessions at test end.
func sessionPair(t *testing.T, pair connPair, ccfg, scfg *Config) (client, server *Session) {
	t.Helper()
	return sessionPairMetrics(t, pair, ccfg, scfg, nil, nil)
}

// sessionPairMetrics is sessionPair with metrics for each side (the client labels its
// peer "test", the server by the client's node name).
func sessionPairMetrics(t *testing.T, pair connPair, ccfg, scfg *Config, cm, sm *Metrics) (client, server *Session) {
	t.Helper()
	c, s := pair(t)
	return sessionsOn(t, c, s, ccfg, scfg, cm, sm)
}

func sessionsOn(t *testing.T, c, s net.Conn, ccfg, scfg *Config, cm, sm *Metrics) (client, server *Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	type res struct {
		s   *Session
		err error
	}
	ch := make(chan res, 1)
	go func() {
		ss, err := ServerSession(ctx, s, scfg, sm)
		ch <- res{ss, err}
	}()
	cs, err := ClientSession(ctx, c, ccfg, cm, "test")
	require.NoError(t, err)
	r := <-ch
	require.NoError(t, r.err)
	t.Cleanup(func() {
		_ = cs.Close()
		_ = r.s.Close()
	})
	return cs, r.s
}
