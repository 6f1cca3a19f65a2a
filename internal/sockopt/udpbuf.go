package sockopt

import (
	"fmt"
	"net"
)

// UDPBufferSize is the socket buffer size quic-go asks for (7 MiB, see
// https://github.com/quic-go/quic-go/wiki/UDP-Buffer-Sizes): a QUIC connection sending at
// hundreds of Mbit/s loses packets in a default 208 KiB receive buffer.
const UDPBufferSize = 7 << 20

// SetUDPBuffers raises c's receive and send buffers to size. It first tries the forcing
// options (SO_RCVBUFFORCE, SO_SNDBUFFORCE: root or CAP_NET_ADMIN, above
// net.core.rmem_max), then the ordinary ones (capped by the sysctls). It returns the sizes
// the kernel granted (Linux reports twice what was asked: its bookkeeping overhead); below
// size, the caller should say which sysctl to raise.
func SetUDPBuffers(c *net.UDPConn, size int) (rcv, snd int, err error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, fmt.Errorf("udp buffers: %w", err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { rcv, snd, serr = setUDPBuffers(fd, size) }); err != nil {
		return 0, 0, fmt.Errorf("udp buffers: %w", err)
	}
	if serr != nil {
		// Without the forcing options, what SetReadBuffer gets is capped by the sysctls.
		_ = c.SetReadBuffer(size)
		_ = c.SetWriteBuffer(size)
		rcv, snd, _ = udpBuffers(raw)
	}
	return rcv, snd, nil
}
