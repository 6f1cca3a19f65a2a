package peerauth

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseKeys(t *testing.T) {
	// 0xfb 0xff encode to "+/" in standard base64 and "-_" in the URL-safe alphabet, so
	// the two encodings of raw differ and each is really parsed in its own alphabet.
	raw := make([]byte, 32)
	for i := range raw {
		raw[i] = []byte{0xfb, 0xff, 0xbe}[i%3]
	}
	std := base64.StdEncoding.EncodeToString(raw)
	url := base64.URLEncoding.EncodeToString(raw)
	require.True(t, strings.ContainsAny(std, "+/"), std)
	require.True(t, strings.ContainsAny(url, "-_"), url)
	require.Contains(t, std, "=", "32 bytes encode with padding")
	other := make([]byte, 40)
	for name, tc := range map[string]struct {
		file string
		ids  int    // keys parsed, 0 for an error
		err  string // substring of the error
	}{
		"std base64":            {std + "\n", 1, ""},
		"std base64, unpadded":  {base64.RawStdEncoding.EncodeToString(raw), 1, ""},
		"url base64":            {url, 1, ""},
		"url base64, unpadded":  {base64.RawURLEncoding.EncodeToString(raw), 1, ""},
		"hex":                   {hex.EncodeToString(raw), 1, ""},
		"hex, upper case":       {strings.ToUpper(hex.EncodeToString(raw)), 1, ""},
		"CRLF line ends":        {"# windows\r\n" + std + "\r\n", 1, ""},
		"comments and blanks":   {"# rotated 2026-11\n\n  " + std + "  \n# old:\n\t\n" + hex.EncodeToString(other) + "\n", 2, ""},
		"short key, with line":  {"# c\n\n" + base64.StdEncoding.EncodeToString(raw[:16]) + "\n", 0, "k.key:3: key is 16 bytes, want at least 32"},
		"31 bytes":              {hex.EncodeToString(raw[:31]), 0, "k.key:1: key is 31 bytes, want at least 32"},
		"long key":              {base64.StdEncoding.EncodeToString(append(raw, make([]byte, 97)...)), 0, "k.key:1: key is 129 bytes, want at most 128"},
		"longest key":           {base64.StdEncoding.EncodeToString(append(raw, make([]byte, 96)...)), 1, ""},
		"not a key":             {"correct horse battery staple", 0, "k.key:1: not a base64 or hex key"},
		"odd hex":               {hex.EncodeToString(raw)[1:], 0, "k.key:1: 63 hex digits: a hex key has an even number"},
		"trailing comment":      {std + " # mine", 0, "k.key:1: not a base64 or hex key"},
		"the same key twice":    {std + "\n# again\n" + hex.EncodeToString(raw) + "\n", 0, "k.key:3: key " + mustKey(t, raw).ID().String() + " listed twice (also on line 1)"},
		"empty file":            {"", 0, "k.key: no key found"},
		"only comments":         {"# nothing\n\n", 0, "k.key: no key found"},
		"line longer than 64 K": {strings.Repeat("A", 70<<10), 0, "k.key: bufio.Scanner: token too long"},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := ParseKeys("k.key", []byte(tc.file))
			if tc.ids == 0 {
				require.ErrorContains(t, err, tc.err)
				require.Nil(t, r)
				return
			}
			require.NoError(t, err)
			require.Len(t, r.IDs(), tc.ids)
			require.Equal(t, raw, r.Primary().secret[:len(raw)], "the first key proves this side")
		})
	}
}

func mustKey(t testing.TB, secret []byte) Key {
	t.Helper()
	k, err := NewKey(secret)
	require.NoError(t, err)
	return k
}

func TestNewKey(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, KeySize)
	k := mustKey(t, secret)
	secret[0] = 8
	require.Equal(t, byte(7), k.secret[0], "NewKey keeps its own copy")
	require.NotEqual(t, k.ID(), mustKey(t, secret).ID())
	_, err := NewKey(secret[:KeySize-1])
	require.ErrorContains(t, err, "want at least 32")
	_, err = NewKey(make([]byte, maxKeyBytes+1))
	require.ErrorContains(t, err, "want at most 128")
}

func TestKeyring(t *testing.T) {
	a, b, c := newTestKey(t), newTestKey(t), newTestKey(t)
	keys := []Key{a, b}
	r, err := NewKeyring(keys...)
	require.NoError(t, err)
	keys[0] = c // the keyring keeps its own list
	require.Equal(t, a.ID(), r.Primary().ID())
	require.Equal(t, []string{a.ID().String(), b.ID().String()}, r.IDs(), "primary first")
	for _, k := range []Key{a, b} {
		got, ok := r.Lookup(k.ID())
		require.True(t, ok)
		require.Equal(t, k, got)
	}
	_, ok := r.Lookup(c.ID())
	require.False(t, ok)
	_, ok = r.Lookup(KeyID{})
	require.False(t, ok)

	_, err = NewKeyring()
	require.ErrorContains(t, err, "no key")
	_, err = NewKeyring(a, b, a)
	require.ErrorContains(t, err, "key "+a.ID().String()+" listed twice")
}

func TestGenerateKey(t *testing.T) {
	a, err := GenerateKey()
	require.NoError(t, err)
	b, err := GenerateKey()
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	r, err := ParseKeys("generated", []byte(a))
	require.NoError(t, err)
	require.Len(t, r.Primary().secret, KeySize)
	_, ok := r.Lookup(KeyID{})
	require.False(t, ok)
}

func FuzzParseKeys(f *testing.F) {
	k, _ := GenerateKey()
	f.Add([]byte(k))
	f.Add([]byte("# c\n" + k + "\n" + strings.Repeat("ab", 32)))
	f.Add([]byte("c2hvcnQ="))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseKeys("f", b)
		if err != nil {
			return
		}
		for _, id := range r.IDs() {
			var kid KeyID
			raw, _ := hex.DecodeString(id)
			copy(kid[:], raw)
			key, ok := r.Lookup(kid)
			require.True(t, ok)
			require.GreaterOrEqual(t, len(key.secret), KeySize, "a parsed key is never short")
		}
	})
}
