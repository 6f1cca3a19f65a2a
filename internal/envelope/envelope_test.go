package envelope

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
)

// Golden heads, as the package doc's layout defines them: a second implementation must
// produce these bytes.
func TestGoldenHeads(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"request", (&Request{ExchangeID: "x-1", Upstream: "svc", Method: "POST", Target: "/a", ProtoMinor: 1, ContentLength: 5,
			Header: httpwire.Header{{Name: "SOAPAction", Value: `""`}}}).Append(nil),
			"24" + "01" + "51" + "03782d31" + "03737663" + "04504f5354" + "022f61" + "01" + "01" + "05" + "01" + "0a534f4150416374696f6e" + "022222"},
		{"response", (&Response{Status: 200, Reason: "OK", ProtoMinor: 1, ContentLength: -1}).Append(nil),
			"0a" + "01" + "52" + "00c8" + "024f4b" + "01" + "00" + "00"},
		{"error", (&Error{Status: 502, Cause: "c", Message: "m"}).Append(nil),
			"08" + "01" + "45" + "01f6" + "0163" + "016d"},
		{"resume", (&Resume{ExchangeID: "x-1", Offset: 300}).Append(nil),
			"08" + "01" + "55" + "03782d31" + "ac02"},
		{"resume naming the instance", (&Resume{ExchangeID: "x-1", Offset: 0, Instance: "i9.7"}).Append(nil),
			"0c" + "01" + "55" + "03782d31" + "00" + "0469392e37"},
		{"continue", (&Continue{Offset: 0}).Append(nil),
			"03" + "01" + "43" + "00"},
	} {
		require.Equal(t, tc.want, hex.EncodeToString(tc.got), tc.name)
	}
}

func TestResumeRoundTrip(t *testing.T) {
	for _, r := range []Resume{{ExchangeID: "8f3a-17", Offset: 0}, {ExchangeID: "a", Offset: 1 << 40},
		{ExchangeID: "b", Offset: 9, Instance: "3fa2c1d09e8b7a65.120034"}} {
		head, body, err := Split(r.Append(nil))
		require.NoError(t, err)
		require.Empty(t, body)
		got, err := ParseResume(head)
		require.NoError(t, err)
		require.Equal(t, r, *got)
	}
	head, _, err := Split((&Continue{Offset: 77}).Append(nil))
	require.NoError(t, err)
	c, e, err := ParseResumeAnswer(head)
	require.NoError(t, err)
	require.Nil(t, e)
	require.Equal(t, int64(77), c.Offset)

	head, _, err = Split((&Error{Status: 502, Cause: "outcome_unknown", Message: "gone"}).Append(nil))
	require.NoError(t, err)
	c, e, err = ParseResumeAnswer(head)
	require.NoError(t, err)
	require.Nil(t, c)
	require.Equal(t, "outcome_unknown", e.Cause)
}

func TestResumeRejects(t *testing.T) {
	for name, head := range map[string][]byte{
		"empty id":                 {Version, KindResume, 0, 0},
		"trailing bytes":           {Version, KindResume, 1, 'x', 0, 9},
		"short offset":             {Version, KindResume, 1, 'x', 0x80},
		"big offset":               {Version, KindResume, 1, 'x', 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x41},
		"wrong kind":               {Version, KindContinue, 0},
		"wrong version":            {2, KindResume, 1, 'x', 0},
		"empty instance":           {Version, KindResume, 1, 'x', 0, 0},
		"short instance":           {Version, KindResume, 1, 'x', 0, 2, 'i'},
		"bytes after the instance": {Version, KindResume, 1, 'x', 0, 1, 'i', 0},
	} {
		_, err := ParseResume(head)
		require.ErrorIs(t, err, ErrMalformed, name)
	}
	for name, head := range map[string][]byte{
		"request":        {Version, KindRequest},
		"trailing bytes": {Version, KindContinue, 0, 0},
		"no offset":      {Version, KindContinue},
	} {
		_, _, err := ParseResumeAnswer(head)
		require.ErrorIs(t, err, ErrMalformed, name)
	}
}

// FuzzParseHeads: no input makes a parser panic, and whatever parses re-encodes to the
// same head (every byte of a head belongs to a field).
func FuzzParseHeads(f *testing.F) {
	for _, seed := range [][]byte{
		(&Request{ExchangeID: "x", Upstream: "u", Method: "POST", Target: "/", ContentLength: -1}).Append(nil),
		(&Response{Status: 200, ContentLength: 3}).Append(nil),
		(&Error{Status: 503, Cause: "c", Message: "m"}).Append(nil),
		(&Resume{ExchangeID: "x", Offset: 5}).Append(nil),
		(&Resume{ExchangeID: "x", Offset: 5, Instance: "3fa2.12"}).Append(nil),
		(&Continue{Offset: 5}).Append(nil),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		head, _, err := Split(msg)
		if err != nil {
			return
		}
		if q, err := ParseRequest(head); err == nil {
			requireSameHead(t, head, q.Append(nil))
		}
		if r, e, err := ParseResponse(head); err == nil {
			if r != nil {
				requireSameHead(t, head, r.Append(nil))
			} else {
				requireSameHead(t, head, e.Append(nil))
			}
		}
		if u, err := ParseResume(head); err == nil {
			requireSameHead(t, head, u.Append(nil))
		}
		if c, e, err := ParseResumeAnswer(head); err == nil {
			if c != nil {
				requireSameHead(t, head, c.Append(nil))
			} else {
				requireSameHead(t, head, e.Append(nil))
			}
		}
	})
}

func requireSameHead(t *testing.T, head, reencoded []byte) {
	t.Helper()
	h2, _, err := Split(reencoded)
	require.NoError(t, err)
	require.Equal(t, head, h2)
}
