package sockopt

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSetRTOMin(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()

	before, err := RTOMin(c)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("kernel without TCP_RTO_MIN_US: %v", err)
	}
	require.NoError(t, err)
	require.Equal(t, 200*time.Millisecond, before, "the kernel default")

	require.NoError(t, SetRTOMin(c, 20*time.Millisecond))
	after, err := RTOMin(c)
	require.NoError(t, err)
	// Rounded up to the timer granularity (a jiffy: 1, 3.3, 4 or 10 ms).
	require.GreaterOrEqual(t, after, 20*time.Millisecond)
	require.Less(t, after, 30*time.Millisecond)
}

func TestSetRTOMinRejects(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Millisecond, 201 * time.Millisecond} {
		require.Error(t, SetRTOMin(nil, d), "%s", d)
	}
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	require.ErrorIs(t, SetRTOMin(p, 20*time.Millisecond), ErrUnsupported, "not a socket")
}

// Set by the dialer before connect, the option holds on the dialled side; the accepted
// side needs SetRTOMin (it does not inherit the listener's, and a listening socket
// refuses it).
func TestRTOMinControl(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var reported []error
	d := net.Dialer{Control: RTOMinControl(20*time.Millisecond, func(err error) { reported = append(reported, err) })}
	c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	require.NoError(t, err)
	defer s.Close()
	if _, err := RTOMin(c); errors.Is(err, ErrUnsupported) {
		t.Skipf("kernel without TCP_RTO_MIN_US: %v", err)
	}
	require.Empty(t, reported)
	got, err := RTOMin(c)
	require.NoError(t, err)
	require.Less(t, got, 30*time.Millisecond, "dialled")

	got, err = RTOMin(s)
	require.NoError(t, err)
	require.Equal(t, MaxRTOMin, got, "accepted: the kernel default until set")
	require.NoError(t, SetRTOMin(s, 20*time.Millisecond))
	got, err = RTOMin(s)
	require.NoError(t, err)
	require.Less(t, got, 30*time.Millisecond, "accepted, after SetRTOMin")
}

func TestSetUDPBuffers(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer c.Close()
	rcv, snd, err := SetUDPBuffers(c, UDPBufferSize)
	require.NoError(t, err)
	require.Positive(t, rcv)
	require.Positive(t, snd)
	if os.Geteuid() == 0 { // the forcing options pass the sysctl caps
		require.GreaterOrEqual(t, rcv, UDPBufferSize)
		require.GreaterOrEqual(t, snd, UDPBufferSize)
	}
}

func TestSetNotSentLowat(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	err = SetNotSentLowat(c, TunnelNotSentLowat)
	if runtime.GOOS != "linux" {
		require.ErrorIs(t, err, ErrUnsupported)
		return
	}
	require.NoError(t, err)
	v, err := NotSentLowat(c)
	require.NoError(t, err)
	require.Equal(t, TunnelNotSentLowat, v)

	_, err = NotSentLowat(pipeConn{})
	require.ErrorIs(t, err, ErrUnsupported, "not a socket")
}

// pipeConn is a net.Conn that is no socket.
type pipeConn struct{ net.Conn }
