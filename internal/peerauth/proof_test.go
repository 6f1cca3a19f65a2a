package peerauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// Golden vectors (SPEC.md, "Golden vectors"): key = bytes 0x00..0x1f, exporter secret =
// bytes 0x20..0x3f. They pin the wire format and the MAC input. They were computed from
// SPEC.md alone with Python's hmac module, and goldenMAC recomputes each MAC from the
// spec's formula with crypto/hmac, so the test checks the spec, not the code against itself.
const (
	goldenKeyID  = "162f02b156163cc1"
	goldenEdge   = "5347574101" + "01" + goldenKeyID + "508a88d97d558d8eee8254d33b48f3bb89561ff5fcfe3920cc430b4903c8de56"
	goldenOrigin = "5347574101" + "02" + goldenKeyID + "a4ba0ec665429762220415fe523039ffcb454ef3a21757d5051f276cbe2d6a69"
	goldenRefuse = "5347574101" + "03" + goldenKeyID + "0000000000000000000000000000000000000000000000000000000000000000"
)

func goldenInputs(t testing.TB) (Key, []byte) {
	t.Helper()
	secret, exp := make([]byte, 32), make([]byte, 32)
	for i := range secret {
		secret[i], exp[i] = byte(i), byte(0x20+i)
	}
	k, err := NewKey(secret)
	require.NoError(t, err)
	return k, exp
}

// goldenMAC is SPEC.md's formula: HMAC-SHA256(K, "soapgw tunnel auth v1" || 0x00 || kind || E).
func goldenMAC(secret []byte, kind byte, exp []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("soapgw tunnel auth v1\x00"))
	h.Write([]byte{kind})
	h.Write(exp)
	return h.Sum(nil)
}

func TestProofGoldenVectors(t *testing.T) {
	k, exp := goldenInputs(t)
	id := sha256.Sum256(append([]byte("soapgw key id v1\x00"), k.secret...))
	require.Equal(t, hex.EncodeToString(id[:8]), k.ID().String(), "key id per SPEC.md")
	require.Equal(t, goldenKeyID, k.ID().String())

	for _, tc := range []struct {
		kind Kind
		want string
	}{{KindEdge, goldenEdge}, {KindOrigin, goldenOrigin}} {
		p := newProof(k, tc.kind, exp)
		got := hex.EncodeToString(p.Append(nil))
		require.Equal(t, tc.want, got, "%s proof", tc.kind)
		require.Equal(t, hex.EncodeToString(goldenMAC(k.secret, byte(tc.kind), exp)), got[28:], "MAC per SPEC.md")
		back, err := ParseProof(p.Append(nil))
		require.NoError(t, err)
		require.Equal(t, p, back)
		require.True(t, back.verify(k, exp))
		exp2 := append([]byte(nil), exp...)
		exp2[0] ^= 1
		require.False(t, back.verify(k, exp2), "a proof is bound to its connection's exporter")
	}
	require.Equal(t, goldenRefuse, hex.EncodeToString(Proof{Kind: KindRefused, KeyID: k.ID()}.Append(nil)))
	refusal, err := hex.DecodeString(goldenRefuse)
	require.NoError(t, err)
	p, err := ParseProof(refusal)
	require.NoError(t, err)
	require.Equal(t, Proof{Kind: KindRefused, KeyID: k.ID()}, p)
	require.Len(t, Proof{}.Append(nil), ProofLen)
	require.Equal(t, []byte("prefix"), Proof{}.Append([]byte("prefix"))[:6], "Append appends")
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindEdge: "edge", KindOrigin: "origin", KindRefused: "refused", 0: "kind(0)", 200: "kind(200)"} {
		require.Equal(t, want, k.String())
	}
}

func TestParseProofErrors(t *testing.T) {
	k, exp := goldenInputs(t)
	valid := newProof(k, KindEdge, exp).Append(nil)
	mutate := func(i int, b byte) []byte {
		out := append([]byte(nil), valid...)
		out[i] = b
		return out
	}
	for name, b := range map[string][]byte{
		"empty":       nil,
		"short":       valid[:ProofLen-1],
		"long":        append(append([]byte(nil), valid...), 0),
		"bad magic":   mutate(0, 'X'),
		"version 0":   mutate(4, 0),
		"version 2":   mutate(4, 2),
		"kind 0":      mutate(5, 0),
		"kind 4":      mutate(5, 4),
		"a TLS alert": append([]byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28}, make([]byte, ProofLen-7)...),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseProof(b)
			require.ErrorIs(t, err, ErrMalformedProof)
		})
	}
}

func FuzzParseProof(f *testing.F) {
	k, exp := goldenInputs(f)
	for _, kind := range []Kind{KindEdge, KindOrigin, KindRefused} {
		f.Add(newProof(k, kind, exp).Append(nil))
	}
	f.Add([]byte("SGWA"))
	f.Add(make([]byte, ProofLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseProof(b)
		if err != nil {
			return
		}
		// Whatever parses encodes back to the same bytes: the format has one encoding.
		require.Equal(t, b, p.Append(nil))
		// verify checks the MAC only (the key id selects the key; callers compare it), so
		// a proof verifies exactly when its MAC is the one the key makes for its kind.
		if p.Kind != KindRefused {
			require.Equal(t, p.MAC == newProof(k, p.Kind, exp).MAC, p.verify(k, exp))
		}
	})
}
