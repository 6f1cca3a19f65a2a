package sockopt

import (
	"fmt"
	"net"
	"syscall"
)

// TunnelNotSentLowat is the most unsent data a tunnel socket holds in the kernel. A
// tunnel multiplexes exchanges and control frames (PING, window updates, GOAWAY) on one
// connection; its writer already puts control frames first, but whatever sits unsent in
// the socket buffer is ahead of them, and with autotuned buffers that is megabytes: at
// 40 kbit/s a PING would wait minutes behind a bulk response. Capped at 32 KiB, a control
// frame waits for at most 32 KiB plus one write. Data in flight (sent, not yet
// acknowledged) is not limited, so throughput is unchanged; only the writer wakes more
// often on a fast link with a large message.
const TunnelNotSentLowat = 32 << 10

// SetNotSentLowat sets TCP_NOTSENT_LOWAT on the TCP connection c.
func SetNotSentLowat(c net.Conn, bytes int) error {
	var serr error
	if err := control(c, "TCP_NOTSENT_LOWAT", func(fd uintptr) { serr = setNotSentLowat(fd, bytes) }); err != nil {
		return err
	}
	return serr
}

// NotSentLowatRaw sets TCP_NOTSENT_LOWAT on a raw socket (a net.Dialer's Control).
func NotSentLowatRaw(raw syscall.RawConn, bytes int) error {
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = setNotSentLowat(fd, bytes) }); err != nil {
		return fmt.Errorf("TCP_NOTSENT_LOWAT: %w", err)
	}
	return serr
}

// NotSentLowat reports the TCP_NOTSENT_LOWAT of c (0: the system default).
func NotSentLowat(c net.Conn) (int, error) {
	var v int
	var serr error
	if err := control(c, "TCP_NOTSENT_LOWAT", func(fd uintptr) { v, serr = notSentLowat(fd) }); err != nil {
		return 0, err
	}
	return v, serr
}
