package proxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// clientConn is a SOAP client's connection to the edge.
type clientConn struct {
	net.Conn
	busy atomic.Bool // a request is being read or answered

	// raw reads the socket's file descriptor, so that a connection waits for its next
	// request holding no buffer and still reads the request's first bytes in one system
	// call (waitRequest); nil when Conn has none, and a 1-byte read stands in.
	raw       syscall.RawConn
	readFirst func(fd uintptr) bool // raw's callback, made once per connection

	// first holds a request's first bytes, read while the connection held no buffers;
	// Read hands them out before reading on (serveConn's goroutine only). firstBuf, from
	// firstPool, backs them.
	first    []byte
	firstBuf *[]byte
	one      [1]byte

	// progress is the clock of the exchange in progress (serveConn's goroutine sets
	// and clears it): bytes moved to or from the client are its progress.
	progress *progressClock

	// linger: a fault that closes the connection was written, maybe with part of the
	// request unread (serveConn's goroutine sets it; lingerClose).
	linger bool

	// affinity is the key its exchange ids carry once it authenticated with NTLM or
	// Negotiate ("": none; connauth.go).
	affinity string
}

// lingerTimeout and maxLingerBytes bound lingerClose: what a client still sends after a
// fault is read and dropped for at most this long, or this much.
const (
	lingerTimeout  = 2 * time.Second
	maxLingerBytes = 64 << 20
)

// lingerClose closes a connection after a fault that may have left part of the request
// unread (a body over the limit, an exchange failed while the client was sending).
// Closing a socket with unread data sends a reset, and many SOAP stacks then report the
// reset from their write and never read the fault: Java's HttpURLConnection, Axis,
// gSOAP, and any client on Windows, whose TCP drops received data on a reset. So, like
// nginx's lingering close, the edge first ends its side (FIN after the fault), then reads
// and drops what the client still sends until it closes, lingerTimeout passes or
// maxLingerBytes are read, and only then closes.
func lingerClose(c net.Conn) {
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(lingerTimeout))
	_, _ = io.CopyN(io.Discard, c, maxLingerBytes)
	_ = c.Close()
}

// firstPool holds the buffers a request's first bytes are read into: 4 KiB takes a
// typical SOAP request whole; the rest of a larger one is read by the connection's
// bufio.Reader. A buffer is held only from the read to the reader's first fill.
var firstPool = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}

func newClientConn(c net.Conn) *clientConn {
	cc := &clientConn{Conn: c}
	cc.attachRaw()
	return cc
}

// waitRequest waits for the next request's first bytes and keeps them for Read. It
// holds no buffer while it waits: the read deadline and Shutdown's wake-up end the wait
// as they end a Read. It reports false when the connection ended (idle timeout, client
// closed, drain, an error).
func (cc *clientConn) waitRequest() bool {
	if cc.raw == nil {
		if n, err := cc.Conn.Read(cc.one[:]); n == 0 || err != nil {
			return false
		}
		cc.first = cc.one[:1]
		return true
	}
	if err := cc.raw.Read(cc.readFirst); err != nil {
		return false
	}
	return len(cc.first) > 0 // none: the client closed, or the read failed
}

// dropFirst gives back a buffer of first bytes that were never read (the connection
// ended first).
func (cc *clientConn) dropFirst() {
	cc.first = nil
	if cc.firstBuf != nil {
		firstPool.Put(cc.firstBuf)
		cc.firstBuf = nil
	}
}

func (cc *clientConn) Read(p []byte) (int, error) {
	if len(cc.first) > 0 && len(p) > 0 {
		n := copy(p, cc.first)
		cc.first = cc.first[n:]
		if len(cc.first) == 0 {
			cc.dropFirst()
		}
		return n, nil
	}
	n, err := cc.Conn.Read(p)
	if n > 0 {
		cc.progress.touch()
	}
	return n, err
}

func (cc *clientConn) Write(p []byte) (int, error) {
	n, err := cc.Conn.Write(p)
	if n > 0 {
		cc.progress.touch()
	}
	return n, err
}
