package peerauth

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// KeySize is the length of a generated key, and the least accepted: 256 bits, so that a
// proof seen by a wrong peer cannot be turned back into the key by guessing.
const KeySize = 32

// maxKeyBytes bounds one decoded key (a longer key adds nothing to HMAC-SHA256).
const maxKeyBytes = 128

// KeyID names a key without revealing it: the first 8 bytes of a hash of it. It travels
// in proofs so the origin can pick the key among those it accepts, and appears in logs
// so an operator can tell which key an edge used.
type KeyID [8]byte

func (id KeyID) String() string { return hex.EncodeToString(id[:]) }

// Key is one shared tunnel key.
type Key struct {
	secret []byte
	id     KeyID
}

// NewKey wraps secret (at least KeySize bytes) as a Key.
func NewKey(secret []byte) (Key, error) {
	if len(secret) < KeySize {
		return Key{}, fmt.Errorf("key is %d bytes, want at least %d (use `soapgw keygen`)", len(secret), KeySize)
	}
	if len(secret) > maxKeyBytes {
		return Key{}, fmt.Errorf("key is %d bytes, want at most %d", len(secret), maxKeyBytes)
	}
	h := sha256.Sum256(append([]byte("soapgw key id v1\x00"), secret...))
	k := Key{secret: bytes.Clone(secret)}
	copy(k.id[:], h[:])
	return k, nil
}

// ID returns the key's public name.
func (k Key) ID() KeyID { return k.id }

// GenerateKey returns a new random key in the text form ParseKeys reads.
func GenerateKey() (string, error) {
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// Keyring is the set of keys one side holds. The first key proves this side's identity;
// every key is accepted from the other side, so keys can be rotated without a failed
// handshake: add the new key second everywhere, move it first, then drop the old one.
type Keyring struct {
	keys []Key
}

// NewKeyring returns a keyring of keys; the first one is used to prove.
func NewKeyring(keys ...Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("no key")
	}
	seen := map[KeyID]bool{}
	for _, k := range keys {
		if seen[k.id] {
			return nil, fmt.Errorf("key %s listed twice", k.id)
		}
		seen[k.id] = true
	}
	return &Keyring{keys: slices.Clone(keys)}, nil
}

// Primary is the key this side proves with.
func (r *Keyring) Primary() Key { return r.keys[0] }

// Lookup returns the accepted key named id.
func (r *Keyring) Lookup(id KeyID) (Key, bool) {
	for _, k := range r.keys {
		if k.id == id {
			return k, true
		}
	}
	return Key{}, false
}

// IDs lists the key ids, primary first (for logs).
func (r *Keyring) IDs() []string {
	out := make([]string, len(r.keys))
	for i, k := range r.keys {
		out[i] = k.id.String()
	}
	return out
}

// ParseKeys reads a key file: one key per line in standard or URL-safe base64 (padding
// optional) or hex, the first line's key proving this side; blank lines and lines
// starting with # are ignored. Errors carry name:line.
func ParseKeys(name string, data []byte) (*Keyring, error) {
	var keys []Key
	lineOf := map[KeyID]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		secret, err := decodeKey(s)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		k, err := NewKey(secret)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if first, dup := lineOf[k.id]; dup {
			return nil, fmt.Errorf("%s:%d: key %s listed twice (also on line %d)", name, line, k.id, first)
		}
		lineOf[k.id] = line
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no key found (one base64 key per line; make one with `soapgw keygen`)", name)
	}
	r, err := NewKeyring(keys...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

// decodeKey accepts hex (an even number of hex digits) or base64, standard or URL-safe,
// padded or not.
func decodeKey(s string) ([]byte, error) {
	if isHex(s) {
		// An odd number of hex digits is a hex key with one lost in copying, not base64
		// (which it would decode as: a different key, found out only when the peer
		// refuses it). Base64 of a random key made of hex digits alone is too unlikely
		// to matter (below 2^-60 for 32 bytes).
		if len(s)%2 != 0 {
			return nil, fmt.Errorf("%d hex digits: a hex key has an even number", len(s))
		}
		return hex.DecodeString(s)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not a base64 or hex key")
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
