//go:build !unix

package proxy

import "net"

// aliveProbe is unix-only; elsewhere the pool checks with a short read deadline.
type aliveProbe struct{}

func newAliveProbe(net.Conn) *aliveProbe { return nil }

func (p *aliveProbe) check() (alive, known bool) { return false, false }
