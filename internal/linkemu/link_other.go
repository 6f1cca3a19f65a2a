//go:build !linux

package linkemu

import (
	"context"
	"net"
	"os/exec"
	"time"
)

type linkSys struct{}

// Setup needs Linux; elsewhere it always fails.
func Setup(ctx context.Context, p Profile, o Options) (*Link, error) { return nil, errNotSupported }

// Close does nothing: no Link can exist off Linux.
func (l *Link) Close() error { return nil }

// Command runs name in the current process namespace; off Linux there are
// no others.
func (l *Link) Command(ns string, name string, args ...string) *exec.Cmd {
	return exec.Command(name, args...)
}

// DialContext needs Linux for any namespace other than "".
func (l *Link) DialContext(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	if ns != "" {
		return nil, errNotSupported
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// Listen needs Linux for any namespace other than "".
func (l *Link) Listen(ns, network, addr string) (net.Listener, error) {
	if ns != "" {
		return nil, errNotSupported
	}
	return net.Listen(network, addr)
}

// ListenPacket needs Linux for any namespace other than "".
func (l *Link) ListenPacket(ns, network, addr string) (net.PacketConn, error) {
	if ns != "" {
		return nil, errNotSupported
	}
	return net.ListenPacket(network, addr)
}

func monoNow() (time.Time, int64) { return time.Now(), 0 }
