package sockopt

import "net"

// BytesAcked reports how many bytes the peer of the TCP connection c has acknowledged
// so far (TCP_INFO's bytes_acked, Linux ≥ 4.1). c may wrap the socket (TLS, the tunnel
// authentication's wrappers): the connections below are followed through NetConn. The
// tunnel's keepalive counts a peer alive while this grows (tunnel.Config.PeerAcked).
func BytesAcked(c net.Conn) (uint64, error) {
	for range 8 {
		tc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = tc.NetConn()
	}
	var n uint64
	var serr error
	if err := control(c, "TCP_INFO", func(fd uintptr) { n, serr = bytesAcked(fd) }); err != nil {
		return 0, err
	}
	return n, serr
}

// PeerAcked is BytesAcked in the form tunnel.Config.PeerAcked takes.
func PeerAcked(c net.Conn) (uint64, bool) {
	n, err := BytesAcked(c)
	return n, err == nil
}
