package peerauth

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
)

// Results of a failed handshake, as [Error.Result] and the handshake metric's label.
const (
	ResultTimeout        = "timeout"         // the peer did not finish within the deadline
	ResultNotTLS         = "not_tls"         // plaintext (an insecure edge?) or garbage where TLS was expected
	ResultUnexpectedTLS  = "unexpected_tls"  // TLS where an insecure origin expected plaintext
	ResultTLS            = "tls_failed"      // TLS handshake failed (no client certificate, a replayed or corrupt record...)
	ResultBadCertificate = "bad_certificate" // a certificate did not verify
	ResultBadKey         = "bad_key"         // unknown key, or a proof that does not verify
	ResultProtocol       = "protocol_error"  // not a proof message
	ResultIO             = "io_error"        // the connection broke
)

// Error is a failed authentication. Result names the cause in a few fixed words.
type Error struct {
	Result string
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("peer authentication failed (%s): %v", e.Result, e.Err)
}
func (e *Error) Unwrap() error { return e.Err }

// HandshakeResult is the cause label the tunnel server counts handshakes by.
func (e *Error) HandshakeResult() string { return e.Result }

// ErrKeyRefused is the edge-side error when the origin does not accept the edge's key.
var ErrKeyRefused = errors.New("the origin refused this edge's key: its key file lacks this key id (rotate keys on the origin first)")

// ErrOriginProof is the edge-side error when the origin's proof does not verify: the
// other end does not hold the key, so it is not the configured origin.
var ErrOriginProof = errors.New("the origin's proof does not verify: it does not hold our key (wrong key, or a machine in the middle)")

// fail classifies err into an *Error, keeping the cause given unless a timeout or a
// certificate failure is the real reason.
func fail(result string, err error) error {
	var ne net.Error
	var cv *tls.CertificateVerificationError
	switch {
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		result = ResultTimeout
	case errors.As(err, &cv):
		result = ResultBadCertificate
	}
	return &Error{Result: result, Err: err}
}
