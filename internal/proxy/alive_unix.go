//go:build unix

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// peekAlive checks a TCP connection without blocking and without a timer: a non-blocking
// MSG_PEEK returns EAGAIN on a healthy idle connection, 0 bytes after the peer's FIN, and
// data if the peer sent something unsolicited.
func peekAlive(c net.Conn) (alive, known bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	alive = true
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(rerr, syscall.EAGAIN):
		case rerr != nil, n >= 0:
			alive = false
		}
		return true // never wait for readiness
	})
	return alive && err == nil, true
}
