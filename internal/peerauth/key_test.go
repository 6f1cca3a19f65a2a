package peerauth

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseKeys(t *testing.T) {
	raw := make([]byte, 32)
	for i := range raw {
		raw[i] = byte(200 + i)
	}
	other := make([]byte, 40)
	std := base64.StdEncoding.EncodeToString(raw)
	for name, tc := range map[string]struct {
		file string
		ids  int    // keys parsed, 0 for an error
		err  string // substring of the error
	}{
		"std base64":            {std + "\n", 1, ""},
		"url base64, unpadded":  {base64.RawURLEncoding.EncodeToString(raw), 1, ""},
		"hex":                   {hex.EncodeToString(raw), 1, ""},
		"comments and blanks":   {"# rotated 2026-11\n\n  " + std + "  \n# old:\n" + hex.EncodeToString(other) + "\n", 2, ""},
		"short key, with line":  {"# c\n\n" + base64.StdEncoding.EncodeToString(raw[:16]) + "\n", 0, "k.key:3: key is 16 bytes, want at least 32"},
		"long key":              {base64.StdEncoding.EncodeToString(append(raw, make([]byte, 97)...)), 0, "k.key:1: key is 129 bytes, want at most 128"},
		"not a key":             {"correct horse battery staple", 0, "k.key:1: not a base64 or hex key"},
		"the same key twice":    {std + "\n" + hex.EncodeToString(raw) + "\n", 0, "listed twice"},
		"empty file":            {"", 0, "k.key: no key found"},
		"only comments":         {"# nothing\n", 0, "no key found"},
		"line longer than 64 K": {strings.Repeat("A", 70<<10), 0, "k.key"},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := ParseKeys("k.key", []byte(tc.file))
			if tc.ids == 0 {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Len(t, r.IDs(), tc.ids)
			k, ok := r.Lookup(r.Primary().ID())
			require.True(t, ok)
			require.Equal(t, raw, k.secret, "the first key proves this side")
		})
	}
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
