//go:build !unix

package proxy

import "net"

func resetWaiter(net.Conn) func() (reset bool) { return nil }
