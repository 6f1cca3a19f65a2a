// Package codec holds the encodings a tunnel message may carry: identity, gzip, zstd
// (with a dictionary trained on SOAP traffic), zstd-stream (zstd with context across the
// messages of a connection direction) and token, the synchronized token cache (envelope
// heads by headmodel.go, XML bodies by the xmltok subpackage). Every message states its
// codec id in its preamble (internal/tunnel/frame/SPEC.md), so a [Policy] can choose per
// message ("auto") and both gateways agree without shared configuration.
//
// The stateful codecs (zstd-stream, token) need every message of a direction, in wire
// order, on both ends: the tunnel session runs them in its single writer and reader and
// starts them afresh (a new epoch) after any decoding failure.
package codec

import "fmt"

// ID is a codec id as carried on the wire.
type ID uint8

// Codec ids. They are part of the wire format: never renumber.
const (
	Identity   ID = 0
	Gzip       ID = 1 // per-message gzip
	Zstd       ID = 2 // per-message zstd, optional dictionary
	ZstdStream ID = 3 // zstd with context kept across the messages of one direction
	Token      ID = 4 // synchronized token cache (head model + xmltok)
	// ZstdStreaming codes one message as it is written (messages too large to be coded
	// whole, or flushed before their end): streaming.go. Not a configurable codec.
	ZstdStreaming ID = 5
)

// Stateless reports whether every message of this codec is coded on its own, so its
// payloads decode in any order (the UDP tunnel codes such messages concurrently).
func (id ID) Stateless() bool { return id == Identity || id == Gzip || id == Zstd }

// Name returns the configuration name of an id.
func (id ID) String() string {
	switch id {
	case Identity:
		return "identity"
	case Gzip:
		return "gzip"
	case Zstd:
		return "zstd"
	case ZstdStream:
		return "zstd-stream"
	case Token:
		return "token"
	case ZstdStreaming:
		return "zstd-streaming"
	}
	return fmt.Sprintf("codec(%d)", uint8(id))
}
