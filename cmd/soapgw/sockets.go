package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/soapgw/soapgw/internal/sockopt"
)

// tunnelSockets applies the tunnel's TCP tuning (rto_min, and TCP_NOTSENT_LOWAT so that
// control frames do not queue behind megabytes of unsent bulk data in the kernel) to the
// connections a gateway dials (before they connect, so the handshake's RTT sample
// already counts) and accepts.
// A kernel without the option keeps its defaults; that is said once in the log, not per
// connection.
type tunnelSockets struct {
	log  *slog.Logger
	once sync.Once
}

func (ts *tunnelSockets) report(rtoMin time.Duration) func(error) {
	return func(err error) {
		if errors.Is(err, sockopt.ErrUnsupported) {
			ts.once.Do(func() {
				ts.log.Warn("tunnel sockets keep the kernel's 200 ms minimum RTO: lost packets on lossy links stall longer", "rto_min", rtoMin, "err", err)
			})
			return
		}
		ts.log.Warn("tunnel socket tuning failed", "rto_min", rtoMin, "err", err)
	}
}

// dialer returns a TCP dialer for tunnel connections with rtoMin applied.
func (ts *tunnelSockets) dialer(rtoMin time.Duration) func(ctx context.Context, address string) (net.Conn, error) {
	rto := sockopt.RTOMinControl(rtoMin, ts.report(rtoMin))
	d := &net.Dialer{KeepAlive: 30 * time.Second, Control: func(network, address string, c syscall.RawConn) error {
		if err := sockopt.NotSentLowatRaw(c, sockopt.TunnelNotSentLowat); err != nil && !errors.Is(err, sockopt.ErrUnsupported) {
			ts.log.Warn("tunnel socket tuning failed", "err", err)
		}
		return rto(network, address, c)
	}}
	return func(ctx context.Context, address string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", address)
	}
}

// listen opens the origin's tunnel listener; every connection it accepts gets rtoMin.
// (Linux refuses the option on a listening socket, and accepted sockets do not inherit
// it, so it is set on each accepted connection.)
func (ts *tunnelSockets) listen(address string, rtoMin time.Duration) (net.Listener, error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	report := ts.report(rtoMin)
	return &tunedListener{Listener: ln, tune: func(c net.Conn) {
		if err := sockopt.SetRTOMin(c, rtoMin); err != nil {
			report(err)
		}
		if err := sockopt.SetNotSentLowat(c, sockopt.TunnelNotSentLowat); err != nil && !errors.Is(err, sockopt.ErrUnsupported) {
			ts.log.Warn("tunnel socket tuning failed", "err", err)
		}
	}}, nil
}

type tunedListener struct {
	net.Listener
	tune func(net.Conn)
}

func (l *tunedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.tune(c)
	}
	return c, err
}
