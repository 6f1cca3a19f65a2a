package peerauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
)

// ProofLen is the size of every proof message.
const ProofLen = 4 + 1 + 1 + 8 + sha256.Size

// proofVersion is the version byte of the proof format in SPEC.md.
const proofVersion = 1

// exporterLabel names the TLS exporter secret the proofs are bound to (RFC 8446 §7.5).
const exporterLabel = "EXPORTER-soapgw-tunnel-auth-v1"

// macContext is prefixed to the exporter secret in every MAC, so a soapgw key used
// elsewhere could not be made to sign a soapgw proof.
const macContext = "soapgw tunnel auth v1\x00"

var proofMagic = [4]byte{'S', 'G', 'W', 'A'}

// Kind says who sent a proof message.
type Kind uint8

// Proof kinds.
const (
	KindEdge    Kind = 1 // the dialling side proves it holds the key
	KindOrigin  Kind = 2 // the accepting side answers with its own proof
	KindRefused Kind = 3 // the accepting side does not know the key, or the proof is wrong
)

func (k Kind) String() string {
	switch k {
	case KindEdge:
		return "edge"
	case KindOrigin:
		return "origin"
	case KindRefused:
		return "refused"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Proof is one proof message.
type Proof struct {
	Kind  Kind
	KeyID KeyID
	MAC   [sha256.Size]byte // zero in a refusal
}

// ErrMalformedProof is returned by ParseProof for bytes that are not a proof message.
var ErrMalformedProof = errors.New("peerauth: malformed proof message")

// Append appends the proof's wire form to dst.
func (p Proof) Append(dst []byte) []byte {
	dst = append(dst, proofMagic[:]...)
	dst = append(dst, proofVersion, byte(p.Kind))
	dst = append(dst, p.KeyID[:]...)
	return append(dst, p.MAC[:]...)
}

// ParseProof parses exactly one proof message.
func ParseProof(b []byte) (Proof, error) {
	var p Proof
	if len(b) != ProofLen {
		return p, fmt.Errorf("%w: %d bytes, want %d", ErrMalformedProof, len(b), ProofLen)
	}
	if [4]byte(b[:4]) != proofMagic {
		return p, fmt.Errorf("%w: bad magic %q", ErrMalformedProof, b[:4])
	}
	if b[4] != proofVersion {
		return p, fmt.Errorf("%w: version %d, want %d", ErrMalformedProof, b[4], proofVersion)
	}
	p.Kind = Kind(b[5])
	if p.Kind < KindEdge || p.Kind > KindRefused {
		return p, fmt.Errorf("%w: unknown kind %d", ErrMalformedProof, b[5])
	}
	copy(p.KeyID[:], b[6:14])
	copy(p.MAC[:], b[14:])
	return p, nil
}

// mac computes the proof MAC of kind over a connection's exporter secret.
func mac(k Key, kind Kind, exporter []byte) [sha256.Size]byte {
	h := hmac.New(sha256.New, k.secret)
	h.Write([]byte(macContext))
	h.Write([]byte{byte(kind)})
	h.Write(exporter)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// newProof returns kind's proof with key k for a connection whose exporter secret is
// exporter.
func newProof(k Key, kind Kind, exporter []byte) Proof {
	return Proof{Kind: kind, KeyID: k.id, MAC: mac(k, kind, exporter)}
}

// verify reports whether p is a valid proof of its kind with key k for exporter, in
// constant time.
func (p Proof) verify(k Key, exporter []byte) bool {
	want := mac(k, p.Kind, exporter)
	return hmac.Equal(want[:], p.MAC[:])
}
