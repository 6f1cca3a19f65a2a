// Package codec names the encodings a tunnel message may carry. Every message states its
// codec id in its preamble (see internal/tunnel/frame/SPEC.md), so codecs can be chosen
// per message and both gateways agree without shared configuration.
//
// Only identity exists today; gzip, zstd and the synchronized token cache are added by the
// codec work (their names are reserved in the configuration and refused until then).
package codec

import "fmt"

// ID is a codec id as carried on the wire.
type ID uint8

// Codec ids. They are part of the wire format: never renumber.
const (
	Identity ID = 0
)

// Name returns the configuration name of an id.
func (id ID) String() string {
	switch id {
	case Identity:
		return "identity"
	}
	return fmt.Sprintf("codec(%d)", uint8(id))
}

// ByName returns the id for a configuration name and whether this build implements it.
func ByName(name string) (ID, bool) {
	switch name {
	case "identity":
		return Identity, true
	}
	return 0, false
}
