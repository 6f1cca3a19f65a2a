//go:build !unix

package proxy

// attachRaw leaves raw nil: waitRequest falls back to a 1-byte read.
func (cc *clientConn) attachRaw() {}
