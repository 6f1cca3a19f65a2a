//go:build unix

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// resetWaiter returns a function that blocks until c has something to read, or its read
// deadline passes, and reports whether that something is an error such as ECONNRESET
// (true) rather than data or a FIN (false). It peeks and consumes nothing. nil: c is not
// a socket this can wait on.
func resetWaiter(c net.Conn) func() (reset bool) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS: watch the socket below
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return func() bool {
		var sockErr error
		err := rc.Read(func(fd uintptr) bool {
			var b [1]byte
			for {
				_, _, e := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
				switch {
				case errors.Is(e, syscall.EINTR):
					continue
				case errors.Is(e, syscall.EAGAIN):
					return false // nothing yet: wait until readable (or the deadline)
				default:
					sockErr = e // nil: data or a FIN
					return true
				}
			}
		})
		return err == nil && sockErr != nil
	}
}
