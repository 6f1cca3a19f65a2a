// Package codec names the encodings a tunnel message may carry. Every message states its
// codec id in its preamble (see internal/tunnel/frame/SPEC.md), so codecs can be chosen
// per message and both gateways agree without shared configuration.
//
// Only identity is accepted by the configuration today ([ByName]). The message codecs
// themselves (gzip, zstd, zstd-stream; see [Registry] and [Lookup]) exist but are not yet
// wired into the tunnel; the synchronized token cache (id 4) is reserved.
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
	Token      ID = 4 // reserved: synchronized token cache (not implemented)
)

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
	}
	return fmt.Sprintf("codec(%d)", uint8(id))
}

// ByName returns the id for a configuration name and whether this build implements it.
// Until the codecs of [Registry] are wired into the tunnel, only identity is reported.
func ByName(name string) (ID, bool) {
	switch name {
	case "identity":
		return Identity, true
	}
	return 0, false
}
