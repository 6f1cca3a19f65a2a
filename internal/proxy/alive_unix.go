//go:build unix

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// aliveProbe checks an idle TCP connection without blocking and without a timer: a
// non-blocking MSG_PEEK returns EAGAIN on a healthy idle connection, 0 bytes after the
// peer's FIN, and data if the peer sent something unsolicited. One is made per pooled
// connection, so a check allocates nothing; one goroutine at a time uses it (the one
// that took the connection from the pool).
type aliveProbe struct {
	rc    syscall.RawConn
	peek  func(fd uintptr) bool // p.peekFD, bound once
	alive bool
}

// newAliveProbe returns nil when c has no file descriptor to peek at (TLS).
func newAliveProbe(c net.Conn) *aliveProbe {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	p := &aliveProbe{rc: rc}
	p.peek = p.peekFD
	return p
}

func (p *aliveProbe) peekFD(fd uintptr) bool {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case errors.Is(err, syscall.EAGAIN):
		p.alive = true
	case err != nil, n >= 0:
		p.alive = false
	}
	return true // never wait for readiness
}

// check reports whether the connection is open; known is false without a probe.
func (p *aliveProbe) check() (alive, known bool) {
	if p == nil {
		return false, false
	}
	p.alive = false
	err := p.rc.Read(p.peek)
	return p.alive && err == nil, true
}
