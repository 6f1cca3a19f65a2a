package codec

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/trafficgen"
)

// tunnelMessages turns generated traffic into tunnel messages as the gateways send them:
// an envelope head (request or response) followed by the body.
func tunnelMessages(fam string, n int) (reqs, resps [][]byte) {
	for i, m := range trafficgen.Family(fam, n, trafficgen.DefaultSeed) {
		cl := int64(len(m.Body))
		if m.Dir == trafficgen.Request {
			h := &envelope.Request{ExchangeID: "5e1f00a2-" + strconv.Itoa(i+1), Upstream: "svc", Method: "POST",
				Target: "/services/" + fam, ProtoMinor: 0, ContentLength: cl, Header: httpwire.Header{
					{Name: "Content-Type", Value: "text/xml; charset=utf-8"},
					{Name: "SOAPAction", Value: `"` + m.Name + `"`},
					{Name: "Host", Value: "svc.example.com:8080"},
					{Name: "Content-Length", Value: strconv.FormatInt(cl, 10)},
				}}
			reqs = append(reqs, append(h.Append(nil), m.Body...))
			continue
		}
		h := &envelope.Response{Status: 200, Reason: "OK", ProtoMinor: 1, ContentLength: cl, Header: httpwire.Header{
			{Name: "Content-Type", Value: "text/xml;charset=utf-8"},
			{Name: "Date", Value: fmt.Sprintf("Sun, 22 Nov 2026 10:%02d:%02d GMT", i/120%60, i/2%60)},
			{Name: "Content-Length", Value: strconv.FormatInt(cl, 10)},
		}}
		resps = append(resps, append(h.Append(nil), m.Body...))
	}
	return reqs, resps
}

// Whole tunnel messages of every family round-trip byte for byte through one token pair
// per direction, both ends' state stays identical, and no payload exceeds the message by
// more than MaxExpansion.
func TestTokenRoundTrip(t *testing.T) {
	c, err := NewToken(TokenDictionary(64 << 10))
	require.NoError(t, err)
	for _, fam := range trafficgen.Families {
		reqs, resps := tunnelMessages(fam, 120)
		for dir, msgs := range map[string][][]byte{"request": reqs, "response": resps} {
			t.Run(fam+"-"+dir, func(t *testing.T) {
				e, err := c.NewEncoder()
				require.NoError(t, err)
				d, err := c.NewDecoder(Limits{})
				require.NoError(t, err)
				var raw, coded int
				for i, m := range msgs {
					p, err := e.Encode(nil, m)
					require.NoError(t, err)
					require.LessOrEqual(t, len(p), len(m)+MaxExpansion, "message %d", i)
					out, err := d.Decode(nil, p)
					require.NoError(t, err, "message %d", i)
					require.Equal(t, m, out, "message %d", i)
					require.Equal(t, e.(*TokenEncoder).Digest(), d.(*TokenDecoder).Digest(), "message %d", i)
					raw += len(m)
					coded += len(p)
				}
				t.Logf("%d messages, %.2f %% of raw, %.1f B/msg", len(msgs), 100*float64(coded)/float64(max(raw, 1)), float64(coded)/float64(max(len(msgs), 1)))
			})
		}
	}
}

func TestTokenAnnouncement(t *testing.T) {
	c, err := NewToken()
	require.NoError(t, err)
	e, _ := c.NewEncoder()
	msg := []byte("<a>1</a>")
	first, err := e.Encode(nil, msg)
	require.NoError(t, err)
	second, err := e.Encode(nil, msg)
	require.NoError(t, err)
	require.NotZero(t, first[0]&tokenAnnounce, "the first payload announces the dictionary budget")
	require.Zero(t, second[0]&tokenAnnounce)

	d, _ := c.NewDecoder(Limits{})
	_, err = d.Decode(nil, second)
	require.ErrorIs(t, err, ErrCorrupt, "a payload before the announcement")

	d, _ = c.NewDecoder(Limits{})
	_, err = d.Decode(nil, first)
	require.NoError(t, err)
	_, err = d.Decode(nil, first)
	require.ErrorIs(t, err, ErrCorrupt, "a second announcement")

	huge := append([]byte{tokenAnnounce}, binary.AppendUvarint(nil, 1<<40)...)
	d, _ = c.NewDecoder(Limits{})
	_, err = d.Decode(nil, huge)
	require.ErrorIs(t, err, ErrCorrupt, "a budget over 64 MiB is refused")

	for _, p := range [][]byte{{}, {0x42}, {tokenAnnounce}} {
		d, _ = c.NewDecoder(Limits{})
		_, err = d.Decode(nil, p)
		require.ErrorIs(t, err, ErrCorrupt)
	}
}

// The decoder's cap holds for the head and the body together.
func TestTokenLimit(t *testing.T) {
	c, _ := NewToken()
	e, _ := c.NewEncoder()
	msg := make([]byte, 5000)
	for i := range msg {
		msg[i] = "<a>bcd</a>"[i%10]
	}
	p, err := e.Encode(nil, msg)
	require.NoError(t, err)
	d, _ := c.NewDecoder(Limits{MaxMessage: 4999})
	_, err = d.Decode(nil, p)
	require.ErrorIs(t, err, ErrTooLarge)
}

func TestPolicy(t *testing.T) {
	all := func(uint8) bool { return true }
	none := func(id uint8) bool { return id == 0 }
	only := func(ids ...ID) func(uint8) bool {
		return func(id uint8) bool {
			for _, x := range ids {
				if uint8(x) == id {
					return true
				}
			}
			return id == 0
		}
	}
	xml := append((&envelope.Request{Method: "POST", Target: "/", ContentLength: 4}).Append(nil), " <a/>"...)
	mtom := append((&envelope.Request{Method: "POST", Target: "/", ContentLength: 4}).Append(nil), "--uuid:1\r\n"...)
	empty := (&envelope.Request{Method: "GET", Target: "/?wsdl", ContentLength: -1}).Append(nil)
	for _, tc := range []struct {
		policy string
		min    int
		msg    []byte
		peer   func(uint8) bool
		want   ID
	}{
		{"auto", 0, xml, all, Token},
		{"auto", 0, []byte("\xef\xbb\xbf<?xml?><a/>"), all, Token},
		{"auto", 0, empty, all, Token},
		{"auto", 0, mtom, all, ZstdStream},
		{"auto", 0, []byte{0, 1, 2}, all, ZstdStream},
		{"auto", 1000, xml, all, Identity},
		{"auto", 0, xml, only(Gzip), Gzip},
		{"auto", 0, xml, none, Identity},
		{"gzip", 0, xml, all, Gzip},
		{"zstd", 0, mtom, all, Zstd},
		{"token", 0, xml, only(Zstd, Gzip), Zstd},
		{"identity", 0, xml, all, Identity},
	} {
		p, err := NewPolicy(tc.policy, tc.min)
		require.NoError(t, err)
		require.Equal(t, uint8(tc.want), p.Choose(tc.msg, tc.peer), "%s on %q", tc.policy, tc.msg)
	}
	_, err := NewPolicy("brotli", 0)
	require.Error(t, err)
}

// A head whose first, reference-less coding is longer than the head itself travels
// inside the body; both ends must still remember it, or no later head ever gets a
// reference. (Regression: a legacy client's nine header fields made every request head
// travel as text, ~90 B instead of ~10.)
func TestTokenHeadLearnedFromUncodedHead(t *testing.T) {
	c, err := NewToken()
	require.NoError(t, err)
	e, _ := c.NewEncoder()
	d, _ := c.NewDecoder(Limits{})
	body := []byte(`<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><ping/></soapenv:Body></soapenv:Envelope>`)
	for i := 1; i <= 5; i++ {
		h := legacyHead(i, len(body))
		m := append(h.Append(nil), body...)
		p, err := e.Encode(nil, m)
		require.NoError(t, err)
		out, err := d.Decode(nil, p)
		require.NoError(t, err)
		require.Equal(t, m, out)
		require.Equal(t, e.(*TokenEncoder).Digest(), d.(*TokenDecoder).Digest(), "message %d", i)
		if i == 1 {
			require.Zero(t, p[0]&tokenHead, "the first head costs more coded than as text")
			continue
		}
		require.NotZero(t, p[0]&tokenHead, "message %d: the head is coded against the first", i)
		require.Less(t, len(p), 24, "message %d: only the id, the call number and the body's tokens travel", i)
	}
}

// TestTokenFormatPinned fails when the token codec's output changes: a change to the head
// model, xmltok, their static tables or any modelling decision. Gateways of two releases
// announce TokenFormat in their handshake and use token together only if it is equal, so
// a format change must come with a new TokenFormat. When this fails on purpose, bump
// TokenFormat and set tokenFormatDigest to the digest the failure prints.
//
// Besides 20 messages per family direction it codes a run of 60 Northwind responses: the
// match history's value arena fills and evicts only after about 36 DataSets, and how it
// does is part of the format (TokenFormat 6 changed only that).
func TestTokenFormatPinned(t *testing.T) {
	const (
		pinnedFormat      = 6
		tokenFormatDigest = "b844178dfce178aafc46950287271088"
	)
	c, err := NewToken()
	require.NoError(t, err)
	h := sha256.New()
	type run struct {
		fam string
		n   int
	}
	var runs []run
	for _, fam := range trafficgen.Families {
		runs = append(runs, run{fam, 40})
	}
	runs = append(runs, run{"northwind", 120})
	for _, r := range runs {
		reqs, resps := tunnelMessages(r.fam, r.n)
		for _, msgs := range [][][]byte{reqs, resps} {
			e, err := c.NewEncoder()
			require.NoError(t, err)
			for _, m := range msgs {
				p, err := e.Encode(nil, m)
				require.NoError(t, err)
				h.Write(binary.AppendUvarint(nil, uint64(len(p))))
				h.Write(p)
			}
		}
	}
	got := hex.EncodeToString(h.Sum(nil))[:32]
	if got != tokenFormatDigest || TokenFormat != pinnedFormat {
		t.Fatalf("the token codec's wire format changed (digest %s, pinned %s; TokenFormat %d, pinned %d): "+
			"bump TokenFormat and pin the new digest and format here", got, tokenFormatDigest, TokenFormat, pinnedFormat)
	}
}

// A zstd dictionary is part of the zstd formats: gateways with different dictionaries
// (or one without) do not use zstd together.
func TestZstdFormatNamesTheDictionary(t *testing.T) {
	plain, err := NewZstd()
	require.NoError(t, err)
	a, err := NewZstd(ZstdDictionary([]byte("<soap:Envelope>one</soap:Envelope>")))
	require.NoError(t, err)
	b, err := NewZstdStream(ZstdDictionary([]byte("<soap:Envelope>two</soap:Envelope>")))
	require.NoError(t, err)
	a2, err := NewZstdStream(ZstdDictionary([]byte("<soap:Envelope>one</soap:Envelope>")))
	require.NoError(t, err)
	require.Equal(t, uint32(1), plain.Format())
	require.NotEqual(t, plain.Format(), a.Format())
	require.NotEqual(t, a.Format(), b.Format())
	require.Equal(t, a.Format(), a2.Format())
}
