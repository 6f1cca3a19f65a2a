package tunnel

import (
	"errors"
	"fmt"
	"net"

	"github.com/soapgw/soapgw/internal/tunnel/frame"
)

// Sentinel errors. Callers classify with errors.Is, never by message text.
var (
	// ErrSessionClosed is returned by operations on a closed session; it unwraps to
	// net.ErrClosed so generic network code treats it like a closed connection.
	ErrSessionClosed = fmt.Errorf("tunnel: session closed: %w", net.ErrClosed)
	// ErrGoAway is returned by OpenStream after the peer announced it will take no more streams.
	ErrGoAway = errors.New("tunnel: peer is going away")
	// ErrStreamLimit is returned by OpenStream when the peer's max_streams are in use.
	ErrStreamLimit = errors.New("tunnel: peer stream limit reached")
	// ErrKeepaliveTimeout closes a session whose peer stopped answering.
	ErrKeepaliveTimeout = errors.New("tunnel: keepalive timeout")
	// ErrHandshake wraps every failure to establish a session.
	ErrHandshake = errors.New("tunnel: handshake failed")
	// ErrWriteClosed is returned by Write after CloseWrite.
	ErrWriteClosed = errors.New("tunnel: write after end of message")
	// ErrNoPeer is returned by Peer.OpenStream when no session to the peer is up.
	ErrNoPeer = errors.New("tunnel: peer unavailable")
)

// connectionEndedError is the cause of a stream handler's context when the stream's
// tunnel connection ended (Server), as opposed to the server's own shutdown.
type connectionEndedError struct{}

func (connectionEndedError) Error() string        { return "tunnel: the stream's connection ended" }
func (connectionEndedError) ConnectionLost() bool { return true }

var errConnectionEnded error = connectionEndedError{}

// StreamError is a stream reset, sent or received. Refused streams were never processed
// by the peer and may be retried elsewhere (see Retryable).
type StreamError struct {
	Code   frame.Code
	Reason string
	Remote bool // the peer reset the stream
}

func (e *StreamError) Error() string {
	who := "local"
	if e.Remote {
		who = "peer"
	}
	if e.Reason == "" {
		return fmt.Sprintf("tunnel: stream reset by %s: %s", who, e.Code)
	}
	return fmt.Sprintf("tunnel: stream reset by %s: %s: %s", who, e.Code, e.Reason)
}

// Retryable reports whether the peer provably did not process the stream.
func (e *StreamError) Retryable() bool { return e.Code == frame.CodeRefused }

// ResetByPeer reports whether the peer reset the stream: it abandoned the exchange (a
// refusal is not that: the peer never took it).
func (e *StreamError) ResetByPeer() bool { return e.Remote && e.Code != frame.CodeRefused }

// ChecksumError reports a message whose bytes did not match the CRC-32C its sender computed.
type ChecksumError struct{ Want, Got uint32 }

// Corrupted marks the error as a message damaged on the way: it is not resumed (part of
// it may have been passed on already).
func (e *ChecksumError) Corrupted() bool { return true }

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("tunnel: message checksum mismatch: sender 0x%08x, received 0x%08x", e.Want, e.Got)
}

// refusedError wraps an error on a stream that never reached the peer, so the caller may
// retry it on another session.
type refusedError struct{ err error }

func (e *refusedError) Error() string   { return e.err.Error() + " (not sent, safe to retry)" }
func (e *refusedError) Unwrap() error   { return e.err }
func (e *refusedError) Retryable() bool { return true }

// timeoutError is returned when a stream deadline passes. It is a net.Error so net/http
// and friends treat it as a timeout.
type timeoutError struct{}

func (timeoutError) Error() string   { return "tunnel: i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

var _ net.Error = timeoutError{}

// ErrTimeout is the deadline error; errors.Is(err, ErrTimeout) works on every stream timeout.
var ErrTimeout error = timeoutError{}
