package sockopt

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/testutil"
)

// TestBytesAcked: the count follows what the peer's kernel acknowledged, on a plain TCP
// connection and through a TLS connection's socket.
func TestBytesAcked(t *testing.T) {
	for name, pair := range map[string]func(testing.TB) (net.Conn, net.Conn){"tcp": testutil.TCPPair, "tls": testutil.TLSPair} {
		t.Run(name, func(t *testing.T) {
			c, s := pair(t)
			done := make(chan struct{})
			go func() { defer close(done); _, _ = io.Copy(io.Discard, s) }()
			t.Cleanup(func() { _ = s.Close(); <-done }) // before goleak looks
			before, err := BytesAcked(c)
			require.NoError(t, err)
			const n = 256 << 10
			_, err = c.Write(make([]byte, n))
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				after, err := BytesAcked(c)
				return err == nil && after >= before+n
			}, 10*time.Second, time.Millisecond)
			got, ok := PeerAcked(c)
			require.True(t, ok)
			require.GreaterOrEqual(t, got, before+n)

			_, ok = PeerAcked(struct{ net.Conn }{c}) // not a socket
			require.False(t, ok)
		})
	}
}
