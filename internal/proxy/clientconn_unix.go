//go:build unix

package proxy

import (
	"errors"
	"syscall"
)

// attachRaw lets waitRequest read the socket's descriptor (see clientConn.raw).
func (cc *clientConn) attachRaw() {
	if sc, ok := cc.Conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			cc.raw = raw
			cc.readFirst = cc.readFirstFrom
		}
	}
}

// readFirstFrom is raw.Read's callback: it takes a buffer only for the read itself and
// keeps it if bytes came. Returning false makes raw.Read wait until the socket is
// readable and call it again, as a blocking Read does after EAGAIN.
func (cc *clientConn) readFirstFrom(fd uintptr) bool {
	buf := firstPool.Get().(*[]byte)
	for {
		n, err := syscall.Read(int(fd), *buf)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			firstPool.Put(buf)
			return false
		case err != nil || n <= 0:
			firstPool.Put(buf)
			return true
		}
		cc.first, cc.firstBuf = (*buf)[:n], buf
		return true
	}
}
