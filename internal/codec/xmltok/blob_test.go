package xmltok

import (
	"bytes"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// blobMessages returns n SOAP messages of one direction whose body is a
// payload of 0..12 KB random bytes: base64 text (a base64Binary field)
// or, for "binary", the raw bytes themselves (non-UTF-8 junk inside an
// element). Message i is seeded by i alone.
func blobMessages(kind string, n int) [][]byte {
	const pre = `<?xml version="1.0" encoding="UTF-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><call client="1" n="2">`
	const post = `</call></soap:Body></soap:Envelope>`
	msgs := make([][]byte, n)
	for i := range msgs {
		r := rand.New(rand.NewPCG(uint64(i), 0x5eed))
		raw := make([]byte, r.IntN(12<<10+1))
		for j := range raw {
			raw[j] = byte(r.Uint32())
		}
		payload := raw
		if kind == "base64" {
			payload = []byte(base64.StdEncoding.EncodeToString(raw))
		}
		msgs[i] = append(append([]byte(pre), payload...), post...)
	}
	return msgs
}

var blobKinds = []string{"base64", "binary"}

// BenchmarkXMLTokBlob is BenchmarkXMLTok for long high-entropy payloads.
//
//	go test -run '^$' -bench BenchmarkXMLTokBlob -benchtime 400x ./internal/codec/xmltok/
func BenchmarkXMLTokBlob(b *testing.B) {
	for _, kind := range blobKinds {
		benchMessages(b, kind, blobMessages(kind, 200))
	}
}

// TestRoundTripBlobs: base64 and binary payloads round-trip through one
// pair, within MaxExpansion of raw, with equal digests.
func TestRoundTripBlobs(t *testing.T) {
	for _, kind := range blobKinds {
		for _, o := range []Options{{}, {DictBytes: 300}} {
			t.Run(kind, func(t *testing.T) {
				p := newPair(o)
				msgs := blobMessages(kind, 60)
				var raw, coded int
				for _, m := range msgs {
					coded += p.roundTrip(t, m)
					raw += len(m)
				}
				t.Logf("%s: %.2f%% of raw", kind, 100*float64(coded)/float64(raw))
			})
		}
	}
}

func TestNamesSecret(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"\x80\x81 BinarySecurityToken=\"x\"", true},
		{"\x80\x81 XBinarySecurityToken=\"x\"", false},
		{"BinarySecurityToken=", true},
		{"a:Nonce =", true},
		{"aNonce=", false},
		{"\xff<wsse:Password>", true},
		{"\xff</password>", true},
		{"\xff<Passwords>", false},
		{"\xff<x y=1>", false},
	} {
		require.Equal(t, c.want, namesSecret([]byte(c.s), 0, len(c.s)), c.s)
	}
	for i := range 300 {
		b := make([]byte, i)
		for j := range b {
			b[j] = byte(j*7 + i)
		}
		n := 0
		for _, c := range b {
			if isJunk(c) {
				n++
			}
		}
		require.Equal(t, n, junkCount(b))
	}
}

// blobEdgeInputs exercise the blob path: dense values in every value
// state, junk that runs over markup, into secrets and to the end of the
// message, and blobs of several chunks.
func blobEdgeInputs() [][]byte {
	r := rand.New(rand.NewPCG(7, 7))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(rnd(n)) }
	cat := func(parts ...any) []byte {
		var out []byte
		for _, p := range parts {
			switch p := p.(type) {
			case string:
				out = append(out, p...)
			case []byte:
				out = append(out, p...)
			}
		}
		return out
	}
	zeros := make([]byte, 3000)
	return [][]byte{
		cat("<a>", b64(600), "</a>"),
		cat("<a x=\"", b64(600), "\" y='", b64(400), "'/>"),
		cat("<a><![CDATA[", b64(900), "]]></a>"),
		cat("<a>", b64(190), "</a>"), // below blobMin
		cat("<a>", b64(192), "</a>"), // exactly 256 characters
		cat(b64(3000)),
		cat("<a>", b64(200<<10), "</a>"), // several chunks
		cat("<a>", rnd(300<<10), "</a>"),
		cat("<a>", rnd(5000)),
		cat("<a>", rnd(5000), "<b>clean text after the junk, long enough to stay</b></a>"),
		cat("<a>", rnd(2000), "<wsse:Password>s3cr3t</wsse:Password>", rnd(2000), "</a>"),
		cat("<a>", rnd(2000), " Password=\"s3cr3t\" ", rnd(2000), "</a>"),
		cat("<wsse:Password>", rnd(2000), "</wsse:Password><b>", b64(900), "</b>"),
		cat("<a x=\"", rnd(3000), "\">", rnd(100), "</a>"),
		cat("<a>", rnd(1000), zeros, rnd(1000), "</a>"),
		cat("<a>", zeros, "</a>"),
		cat("<a>", bytes.Repeat([]byte("0123456789abcdef"), 100), "</a>"),
		cat("<a>", rnd(10), "<", rnd(400), "</a>"),
		cat("<a>", []byte("\xe4\xb8\xad\xe6\x96\x87"), bytes.Repeat([]byte("\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97"), 80), "</a>"),
		cat("<a>x</a>\r\n<b>&amp;", b64(700), "&#10;</b>\r\n"),
		cat("<a>", cjk(r, 400), "</a>"),
	}
}

// cjk returns n random characters of the CJK block, as UTF-8.
func cjk(r *rand.Rand, n int) []byte {
	var b []byte
	for range n {
		b = utf8.AppendRune(b, rune(0x4E00+r.IntN(2000)))
	}
	return b
}

// TestBlobPlan checks which values go as blobs.
func TestBlobPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 3000)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	hex := bytes.Repeat([]byte("0123456789abcdef"), 64)
	r.Shuffle(len(hex), func(i, j int) { hex[i], hex[j] = hex[j], hex[i] })
	prose := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog "), 20)
	for _, c := range []struct {
		name string
		v    []byte
		want bool
	}{
		{"base64", []byte(base64.StdEncoding.EncodeToString(raw)), true},
		{"binary", raw, true},
		{"hex", hex, false},
		{"prose", prose, false},
		{"cjk", cjk(r, 400), false},
		{"zeros", make([]byte, 1000), false},
	} {
		m := newModel(Options{})
		m.msg = append(append([]byte("<a>"), c.v...), "</a>"...)
		end := scanValue(m.msg, 3, stValText)
		_, _, got := m.blobPlan(3, end, stValText)
		require.Equal(t, c.want, got, c.name)
	}
}

func TestRoundTripBlobEdges(t *testing.T) {
	in := blobEdgeInputs()
	for _, o := range []Options{{}, {DictBytes: 1}, {DictBytes: 300}} {
		p := newPair(o)
		for range 2 {
			for i, m := range in {
				n := p.roundTrip(t, m)
				t.Logf("input %d: %d -> %d bytes (%.1f%%)", i, len(m), n, 100*float64(n)/float64(len(m)))
			}
		}
	}
}

// TestBlobCorrupt: every single-byte change and every truncation of
// payloads that carry blobs fails cleanly or decodes to something within
// the limit; none panics or allocates past MaxMessage.
func TestBlobCorrupt(t *testing.T) {
	msgs := append(blobMessages("base64", 3), blobMessages("binary", 3)...)
	msgs = append(msgs, blobEdgeInputs()[:3]...)
	enc := NewEncoder(Options{})
	for i, m := range msgs {
		p := enc.Encode(nil, m)
		check := func(q []byte) {
			dec := NewDecoder(Options{MaxMessage: 1 << 20})
			for _, w := range msgs[:i] {
				// The decoder must be in step: replay what the encoder saw.
				if _, err := dec.Decode(nil, NewEncoder(Options{}).Encode(nil, w)); err != nil {
					break
				}
			}
			out, err := dec.Decode(nil, q)
			if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("message %d: error %v", i, err)
			}
			if cap(out) > 1<<20+4096 {
				t.Fatalf("message %d: allocated %d bytes", i, cap(out))
			}
		}
		step := max(1, len(p)/200)
		for j := 0; j < len(p); j += step {
			q := bytes.Clone(p)
			q[j] ^= 0x5a
			check(q)
			check(p[:j])
		}
	}
}
