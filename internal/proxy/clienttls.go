package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"time"
)

// tlsHandshakeTimeout bounds a client's TLS handshake on an HTTPS listener: a client
// that connects and stalls holds a connection slot no longer than this.
const tlsHandshakeTimeout = 10 * time.Second

// handshaker is a client connection that speaks TLS (the listener was wrapped by the
// command that wires the edge; the edge itself holds no certificate).
type handshaker interface {
	HandshakeContext(context.Context) error
}

// clientHandshake completes a TLS client connection's handshake before its first
// request, so that a failure is seen here, counted and logged (rate-limited) with its
// cause, instead of as a connection that closed without a request. A client that spoke
// plain HTTP to the HTTPS listener gets a 400 Fault saying so, in plain HTTP. It reports
// whether the connection may serve requests; a connection without TLS always may.
func (e *Edge) clientHandshake(cc *clientConn, listener string) bool {
	hs, ok := cc.Conn.(handshaker)
	if !ok {
		return true
	}
	_ = cc.SetDeadline(time.Now().Add(tlsHandshakeTimeout))
	err := hs.HandshakeContext(context.Background()) // bounded by the deadline; Shutdown's abort closes it
	if err == nil {
		_ = cc.SetDeadline(time.Time{})
		return true
	}
	reason := "refused"
	var re tls.RecordHeaderError
	switch {
	case errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader):
		reason = "plain_http"
		e.m.gatewayErrors.WithLabelValues("edge", causeBadRequest).Inc()
		e.faultAndClose(re.Conn, &gatewayError{Status: 400, Cause: causeBadRequest,
			Message: "soapgw: this listener speaks HTTPS (TLS) and the client sent plain HTTP: use an https URL"})
	case errors.Is(err, os.ErrDeadlineExceeded):
		reason = "timeout"
	case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
		reason = "closed"
	}
	e.m.tlsFailures.WithLabelValues(listener, reason).Inc()
	if reason != "closed" {
		e.warn.Warn("tls_"+reason, "client TLS handshake failed", "listener", listener, "client", cc.RemoteAddr().String(), "reason", reason, "err", err)
	}
	return false
}

// looksLikeHTTP reports whether the first five bytes of a connection are the start of an
// HTTP request rather than a TLS record (as net/http checks).
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "PATCH":
		return true
	}
	return false
}
