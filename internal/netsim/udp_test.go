package netsim

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// udpEcho answers every datagram with itself.
func udpEcho(t *testing.T) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDP(buf[:n], from)
		}
	}()
	t.Cleanup(func() { _ = c.Close(); <-done })
	return c.LocalAddr().String()
}

func TestUDPLinkDelaysAndCounts(t *testing.T) {
	l, err := NewUDPLink(context.Background(), udpEcho(t), UDPLinkConfig{Delay: 5 * time.Millisecond})
	require.NoError(t, err)
	defer l.Close()
	c, err := net.Dial("udp", l.Addr())
	require.NoError(t, err)
	defer c.Close()
	buf := make([]byte, 64)
	for i := range 20 {
		start := time.Now()
		_, err := c.Write([]byte{byte(i), 1, 2, 3})
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		n, err := c.Read(buf)
		require.NoError(t, err)
		require.Equal(t, []byte{byte(i), 1, 2, 3}, buf[:n])
		require.GreaterOrEqual(t, time.Since(start), 10*time.Millisecond, "one delay each way")
	}
	st := l.Stats()
	require.Equal(t, LinkStats{Connections: 1, BytesUp: 80, BytesDown: 80, SegmentsUp: 20, SegmentsDown: 20}, st)
}

func TestUDPLinkLosesEverythingAtLossOne(t *testing.T) {
	l, err := NewUDPLink(context.Background(), udpEcho(t), UDPLinkConfig{Loss: 1})
	require.NoError(t, err)
	defer l.Close()
	c, err := net.Dial("udp", l.Addr())
	require.NoError(t, err)
	defer c.Close()
	for range 10 {
		_, err := c.Write([]byte("x"))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return l.Stats().Dropped == 10 }, 5*time.Second, time.Millisecond)
	require.Zero(t, l.Stats().SegmentsUp)
}

func TestUDPLinkConfigValidate(t *testing.T) {
	require.Error(t, UDPLinkConfig{Delay: -1}.Validate())
	require.Error(t, UDPLinkConfig{Loss: 1.5}.Validate())
	require.NoError(t, UDPLinkConfig{Delay: time.Second, Loss: 0.02}.Validate())
}

func TestUDPLinkStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l, err := NewUDPLink(ctx, udpEcho(t), UDPLinkConfig{})
	require.NoError(t, err)
	cancel()
	require.NoError(t, l.Close()) // returns once every goroutine stopped (goleak checks the rest)
}
