package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/soapgw/soapgw/internal/sockopt"
)

// tunnelSockets applies the tunnel's TCP tuning (rto_min) to the sockets a gateway dials
// and listens on, before they connect: the handshake's RTT sample already counts, and
// accepted connections inherit the listener's setting. A kernel without the option
// keeps its defaults; that is said once in the log, not per connection.
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
	d := &net.Dialer{KeepAlive: 30 * time.Second, Control: sockopt.RTOMinControl(rtoMin, ts.report(rtoMin))}
	return func(ctx context.Context, address string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", address)
	}
}

// listen opens the origin's tunnel listener with rtoMin applied to every connection it
// accepts. Linux copies the option from the listener, but the accepted socket's RTO
// still follows the kernel's 200 ms until the option is set on it again (measured:
// rto stays at 200+ ms after 40 exchanges), so Accept sets it once more.
func (ts *tunnelSockets) listen(address string, rtoMin time.Duration) (net.Listener, error) {
	report := ts.report(rtoMin)
	lc := net.ListenConfig{Control: sockopt.RTOMinControl(rtoMin, report)}
	ln, err := lc.Listen(context.Background(), "tcp", address)
	if err != nil {
		return nil, err
	}
	return &tunedListener{Listener: ln, tune: func(c net.Conn) {
		if err := sockopt.SetRTOMin(c, rtoMin); err != nil {
			report(err)
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
