package netsim

import (
	"context"
	"math"
	"net"
	"sync"
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
	// The link counts a datagram after writing it, so the echo of the last
	// one can reach the client a moment before the counter moves.
	want := LinkStats{Connections: 1, BytesUp: 80, BytesDown: 80, SegmentsUp: 20, SegmentsDown: 20}
	require.Eventually(t, func() bool { return l.Stats() == want }, 5*time.Second, time.Millisecond, "stats: %+v", l.Stats())
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
	for _, tc := range []struct {
		cfg  UDPLinkConfig
		want string
	}{
		{UDPLinkConfig{Delay: -1}, "UDPLinkConfig.Delay"},
		{UDPLinkConfig{Jitter: -1}, "UDPLinkConfig.Jitter"},
		{UDPLinkConfig{Loss: 1.5}, "UDPLinkConfig.Loss"},
		{UDPLinkConfig{Loss: math.NaN()}, "UDPLinkConfig.Loss"},
		{UDPLinkConfig{Bandwidth: -1}, "UDPLinkConfig.Bandwidth"},
		{UDPLinkConfig{QueueBytes: -1}, "UDPLinkConfig.QueueBytes"},
	} {
		require.ErrorContains(t, tc.cfg.Validate(), tc.want)
	}
	require.NoError(t, UDPLinkConfig{Delay: time.Second, Jitter: time.Millisecond, Loss: 0.02, Bandwidth: 1, QueueBytes: 1}.Validate())
}

// udpSink records the first byte of every datagram it receives, in arrival order.
func udpSink(t *testing.T) (addr string, got func() []byte) {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		seen []byte
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if n > 0 {
				mu.Lock()
				seen = append(seen, buf[0])
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { _ = c.Close(); <-done })
	return c.LocalAddr().String(), func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return append([]byte(nil), seen...)
	}
}

// sendBurst sends n datagrams of size bytes to addr, the first byte numbering them.
func sendBurst(t *testing.T, addr string, n, size int) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	require.NoError(t, err)
	defer c.Close()
	b := make([]byte, size)
	for i := range n {
		b[0] = byte(i)
		_, err := c.Write(b)
		require.NoError(t, err)
	}
}

func TestUDPLinkJitterDoesNotReorder(t *testing.T) {
	target, got := udpSink(t)
	l, err := NewUDPLink(context.Background(), target, UDPLinkConfig{Delay: 2 * time.Millisecond, Jitter: 2 * time.Millisecond, Seed: 1})
	require.NoError(t, err)
	defer l.Close()
	sendBurst(t, l.Addr(), 200, 64)
	require.Eventually(t, func() bool { return len(got()) == 200 }, 5*time.Second, time.Millisecond)
	for i, b := range got() {
		require.Equal(t, byte(i), b, "datagram %d arrived out of order", i)
	}
	require.Zero(t, l.Stats().Dropped)
}

// TestUDPLinkBandwidthQueue: a burst faster than the wire fills the bounded queue and
// the rest is tail-dropped; what passes is serialized at the configured rate.
func TestUDPLinkBandwidthQueue(t *testing.T) {
	const (
		bw    = 10_000 // bytes/s: a 100-byte datagram (128 B with headers) takes 12.8 ms
		queue = 1_000  // about 7 datagrams of backlog
		n     = 50
	)
	target, got := udpSink(t)
	l, err := NewUDPLink(context.Background(), target, UDPLinkConfig{Bandwidth: bw, QueueBytes: queue})
	require.NoError(t, err)
	defer l.Close()
	start := time.Now()
	sendBurst(t, l.Addr(), n, 100)
	require.Eventually(t, func() bool { st := l.Stats(); return st.Dropped+st.SegmentsUp == n }, 5*time.Second, time.Millisecond)
	elapsed := time.Since(start)
	st := l.Stats()
	require.GreaterOrEqual(t, st.Dropped, int64(n/2), "the queue holds about a tenth of the burst")
	require.GreaterOrEqual(t, st.SegmentsUp, int64(2), "an idle wire always takes a datagram, and the queue more")
	require.Equal(t, 100*st.SegmentsUp, st.BytesUp)
	require.Eventually(t, func() bool { return int64(len(got())) == st.SegmentsUp }, 5*time.Second, time.Millisecond)
	// Every datagram that passed occupied the wire for its serialization time.
	require.GreaterOrEqual(t, elapsed, time.Duration(st.SegmentsUp)*128*time.Second/bw)
}

// TestUDPLinkSeedRepeatsLosses: the same seed and datagrams give the same fates.
func TestUDPLinkSeedRepeatsLosses(t *testing.T) {
	run := func() []byte {
		target, got := udpSink(t)
		l, err := NewUDPLink(context.Background(), target, UDPLinkConfig{Loss: 0.5, Seed: 7})
		require.NoError(t, err)
		defer l.Close()
		sendBurst(t, l.Addr(), 200, 16)
		require.Eventually(t, func() bool { st := l.Stats(); return st.Dropped+st.SegmentsUp == 200 }, 5*time.Second, time.Millisecond)
		require.Eventually(t, func() bool { return int64(len(got())) == l.Stats().SegmentsUp }, 5*time.Second, time.Millisecond)
		return got()
	}
	first := run()
	require.Greater(t, len(first), 50)
	require.Less(t, len(first), 150)
	require.Equal(t, first, run())
}

func TestUDPLinkStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l, err := NewUDPLink(ctx, udpEcho(t), UDPLinkConfig{})
	require.NoError(t, err)
	cancel()
	require.NoError(t, l.Close()) // returns once every goroutine stopped (goleak checks the rest)
}
