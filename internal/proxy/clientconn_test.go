package proxy

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server, err = ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// A request's first bytes come in one read of the socket, are handed out by Read before
// the socket is read again, and their buffer goes back once they are read.
func TestClientConnWaitRequest(t *testing.T) {
	client, server := tcpPair(t)
	cc := newClientConn(server)
	require.NotNil(t, cc.raw, "a TCP connection reads through its descriptor")

	_, err := client.Write([]byte("POST / HTTP/1.1\r\n"))
	require.NoError(t, err)
	require.True(t, cc.waitRequest())
	assert.Equal(t, "POST / HTTP/1.1\r\n", string(cc.first), "what had arrived, in one read")
	require.NotNil(t, cc.firstBuf)

	go func() { _, _ = client.Write([]byte("Host: x\r\n")) }()
	p := make([]byte, 5)
	n, err := cc.Read(p)
	require.NoError(t, err)
	assert.Equal(t, "POST ", string(p[:n]), "first bytes before the socket")
	rest := make([]byte, 64)
	n, err = io.ReadAtLeast(cc, rest, len("/ HTTP/1.1\r\nHost: x\r\n"))
	require.NoError(t, err)
	assert.Equal(t, "/ HTTP/1.1\r\nHost: x\r\n", string(rest[:n]))
	assert.Nil(t, cc.firstBuf, "the buffer went back once its bytes were read")

	require.NoError(t, client.Close())
	assert.False(t, cc.waitRequest(), "the client closed")
	assert.Nil(t, cc.firstBuf)
}

// The read deadline ends the wait as it ends a Read (edge.idle_timeout, and Shutdown's
// wake-up of idle connections), holding no buffer.
func TestClientConnWaitRequestDeadline(t *testing.T) {
	_, server := tcpPair(t)
	cc := newClientConn(server)
	require.NoError(t, cc.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	assert.False(t, cc.waitRequest())
	assert.Nil(t, cc.firstBuf)
	assert.Empty(t, cc.first)
}

// A connection without a descriptor waits with a 1-byte read.
func TestClientConnWaitRequestWithoutDescriptor(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	cc := newClientConn(server)
	require.Nil(t, cc.raw)
	go func() { _, _ = client.Write([]byte("GET")) }()
	require.True(t, cc.waitRequest())
	assert.Equal(t, "G", string(cc.first))
	p := make([]byte, 3)
	n, err := io.ReadFull(cc, p)
	require.NoError(t, err)
	assert.Equal(t, "GET", string(p[:n]))
	require.NoError(t, server.Close())
	assert.False(t, cc.waitRequest())
}
