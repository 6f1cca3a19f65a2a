package main

import (
	"context"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// intSockopt reads an integer socket option of c.
func intSockopt(t *testing.T, c net.Conn, level, opt int) int {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	var v int
	var gerr error
	require.NoError(t, rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }))
	require.NoError(t, gerr)
	return v
}

// Client connections are accepted without keepalive probes (four socket options per
// connection) and with Nagle off, as the edge's responses need.
func TestClientListenerSocketOptions(t *testing.T) {
	ln, err := listenClients(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer client.Close()
	c, err := ln.Accept()
	require.NoError(t, err)
	defer c.Close()
	assert.Zero(t, intSockopt(t, c, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE), "no keepalive probes")
	assert.Equal(t, 1, intSockopt(t, c, syscall.IPPROTO_TCP, syscall.TCP_NODELAY), "Nagle off")
}
