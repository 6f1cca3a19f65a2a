// Package sockopt tunes the TCP sockets that carry tunnels for lossy links.
//
// A tunnel carries one SOAP exchange in one or two segments each way. When such a
// segment is the last one in flight and is lost, nothing triggers fast retransmit:
// Linux waits for its tail-loss probe, which for a single outstanding segment is
// 2×SRTT + the minimum RTO, and the minimum RTO is 200 ms by default. One lost packet
// in a hundred then puts 200+ ms on the p99 latency of every persistent-connection
// proxy (measured on the routed-wlan profile: nginx pair p99 234 ms at 13.8 ms RTT).
// Lowering the minimum RTO on the tunnel's own sockets, both ends, brings the stall
// down to a few RTTs; it also caps the delayed-ACK timer below the peer's probe
// timeout (the kernel bounds the delayed ACK by the minimum RTO), so a slow upstream
// costs an early pure ACK rather than a spurious retransmission.
//
// Linux ≥ 6.14 has the per-socket option (TCP_RTO_MIN_US). Elsewhere SetRTOMin
// reports [ErrUnsupported] and the kernel default stays.
package sockopt

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// ErrUnsupported means the platform or kernel has no per-socket minimum RTO.
var ErrUnsupported = errors.New("per-socket minimum RTO not supported by this kernel")

// MaxRTOMin is the largest minimum RTO accepted; the kernel default is 200 ms.
const MaxRTOMin = 200 * time.Millisecond

// SetRTOMin sets the minimum retransmission timeout of the TCP connection c. d is
// rounded up by the kernel to its timer granularity (a jiffy, 1–10 ms).
func SetRTOMin(c net.Conn, d time.Duration) error {
	if d <= 0 || d > MaxRTOMin {
		return fmt.Errorf("minimum RTO %s out of range (0, %s]", d, MaxRTOMin)
	}
	var serr error
	if err := control(c, "minimum RTO", func(fd uintptr) { serr = setRTOMin(fd, d) }); err != nil {
		return err
	}
	return serr
}

// control runs f on c's socket; what names the option, for errors.
func control(c net.Conn, what string, f func(fd uintptr)) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("%w: %T is not a socket", ErrUnsupported, c)
	}
	raw, err := sc.SyscallConn()
	if err == nil {
		err = raw.Control(f)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// RTOMinControl returns a net.Dialer Control function that sets the minimum RTO before
// the socket connects, so that the handshake's RTT sample already uses it (set
// afterwards, the kernel's 200 ms lingers in the RTT variance for many round trips).
// ErrUnsupported is not an error here: the socket keeps the kernel default and report is
// called with it. It is for dialers only: Linux refuses the option on a socket that is
// about to listen (ENOPROTOOPT), and accepted connections do not inherit it from their
// listener, so a server sets it on each accepted connection with SetRTOMin.
func RTOMinControl(d time.Duration, report func(error)) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = setRTOMin(fd, d) }); err != nil {
			return fmt.Errorf("minimum RTO: %w", err)
		}
		if serr != nil && report != nil {
			report(serr)
		}
		if errors.Is(serr, ErrUnsupported) {
			return nil
		}
		return serr
	}
}

// RTOMin reports the minimum RTO the kernel applies to c.
func RTOMin(c net.Conn) (time.Duration, error) {
	var (
		d    time.Duration
		gerr error
	)
	if err := control(c, "minimum RTO", func(fd uintptr) { d, gerr = rtoMin(fd) }); err != nil {
		return 0, err
	}
	return d, gerr
}
