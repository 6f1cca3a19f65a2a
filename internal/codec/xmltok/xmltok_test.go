package xmltok

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/soapgw/soapgw/internal/soapdemo"
	"github.com/soapgw/soapgw/internal/trafficgen"
	"github.com/stretchr/testify/require"
)

// pair is one direction of a connection: an Encoder and a Decoder fed
// the same messages in the same order.
type pair struct {
	enc *Encoder
	dec *Decoder
	buf []byte
	out []byte
}

func newPair(o Options) *pair { return &pair{enc: NewEncoder(o), dec: NewDecoder(o)} }

// roundTrip encodes msg, decodes it, and checks the bytes, the expansion
// bound and the digests. It returns the payload size.
func (p *pair) roundTrip(t testing.TB, msg []byte) int {
	t.Helper()
	p.buf = p.enc.Encode(p.buf[:0], msg)
	if len(p.buf) > len(msg)+MaxExpansion {
		t.Fatalf("payload of %d bytes for a %d-byte message", len(p.buf), len(msg))
	}
	var err error
	p.out, err = p.dec.Decode(p.out[:0], p.buf)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !bytes.Equal(p.out, msg) {
		t.Fatalf("round trip differs:\n got %q\nwant %q", trunc(p.out), trunc(msg))
	}
	if e, d := p.enc.Digest(), p.dec.Digest(); e != d {
		t.Fatalf("digests differ: encoder %x decoder %x", e, d)
	}
	return len(p.buf)
}

func trunc(b []byte) []byte {
	if len(b) > 300 {
		return b[:300]
	}
	return b
}

// byDir splits a family's messages into its two directions.
func byDir(ms []trafficgen.Message) map[string][][]byte {
	out := map[string][][]byte{}
	for _, m := range ms {
		out[m.Dir] = append(out[m.Dir], m.Body)
	}
	return out
}

func familyN(name string) int {
	switch name {
	case "northwind":
		return 20
	case "edge":
		return 100
	}
	return 2000
}

func TestRoundTripFamilies(t *testing.T) {
	for _, fam := range trafficgen.Families {
		n := familyN(fam)
		if testing.Short() {
			n = min(n, 200)
		}
		for dir, msgs := range byDir(trafficgen.Family(fam, n, trafficgen.DefaultSeed)) {
			t.Run(fam+"-"+dir, func(t *testing.T) {
				p := newPair(Options{})
				var raw, coded int
				for _, m := range msgs {
					coded += p.roundTrip(t, m)
					raw += len(m)
				}
				t.Logf("%s-%s: %d messages, %.2f%% of raw, %.1f B/msg", fam, dir, len(msgs), 100*float64(coded)/float64(raw), float64(coded)/float64(len(msgs)))
			})
		}
	}
}

// TestRoundTripMixed feeds every family, edge cases included, through
// one pair, so that unrelated traffic shares a model.
func TestRoundTripMixed(t *testing.T) {
	p := newPair(Options{DictBytes: 64 << 10})
	for round := range 2 {
		for _, fam := range trafficgen.Families {
			for _, m := range trafficgen.Family(fam, min(familyN(fam), 40), int64(round+1)) {
				p.roundTrip(t, m.Body)
			}
		}
	}
}

func TestStressPair(t *testing.T) {
	req, resp := newPair(Options{}), newPair(Options{})
	var n int
	for i := range 500 {
		n += req.roundTrip(t, soapdemo.StressRequest(i))
		n += resp.roundTrip(t, soapdemo.StressResponse(i))
	}
	t.Logf("stress: %.1f B/msg", float64(n)/1000)
}

var edgeInputs = [][]byte{
	nil,
	[]byte(""),
	[]byte("x"),
	[]byte("<"),
	[]byte(">"),
	[]byte("\""),
	[]byte("<a"),
	[]byte("<a b=\""),
	[]byte("<a b='"),
	[]byte("<a b=\"1\""),
	[]byte("<!--"),
	[]byte("<!-- x --"),
	[]byte("<![CDATA["),
	[]byte("<![CDATA[x]]"),
	[]byte("<?xml"),
	[]byte("<!DOCTYPE"),
	[]byte("text only"),
	[]byte("   "),
	[]byte("\r\n\r\n"),
	[]byte("<a>  </a>"),
	[]byte("<a/><b />< c  d = 'e'  / >"),
	[]byte("<a x=\"\" y=''></a>"),
	[]byte("<a>&amp;&#10;&#x20AC;</a>"),
	[]byte("<?xml version=\"1.0\"?>\r\n<!DOCTYPE a [<!ENTITY e \"v\">]>\r\n<a>&e;</a>\r\n"),
	[]byte("\xff\xfe\x00<\x00a\x00>"),
	[]byte("<a>2003-02-30T00:00:00Z</a><a>2003-03-01T00:00:00Z</a>"),
	[]byte("<a>-0</a><a>-0.0</a><a>00</a><a>007</a><a>1.</a><a>.5</a><a>9999999999999999999999</a>"),
	[]byte("<a>1</a><a>2</a><a>3</a><a>4</a><a>10</a><a>-3</a>"),
	[]byte("<u>urn:uuid:f47ac10b-58cc-4372-a567-0e02b2c3d479</u><u>F47AC10B-58CC-4372-A567-0E02B2C3D479</u><u>f47ac10b-58cc-4372-A567-0e02b2c3d479</u>"),
	[]byte("<wsse:Password>secret</wsse:Password><Password/>after<x Password=\"pw\" y=\"z\"/>"),
	[]byte("<wsse:Password><![CDATA[s3cr3t]]><!-- </wsse:Password> -->more</wsse:Password>"),
	bytes.Repeat([]byte("<!-- long comment "), 200),
	bytes.Repeat([]byte("<a>"), 2000),
	bytes.Repeat([]byte{0}, 5000),
	bytes.Repeat([]byte("word "), 100),
	[]byte("<t>Weather 12 and 13.5 degrees 000123 then 99999999999999999999999999 and more text here to be long</t>"),
}

func TestRoundTripEdgeInputs(t *testing.T) {
	for _, o := range []Options{{}, {DictBytes: 1}, {DictBytes: 200}} {
		t.Run(fmt.Sprint(o.DictBytes), func(t *testing.T) {
			p := newPair(o)
			for range 3 {
				for _, in := range edgeInputs {
					p.roundTrip(t, in)
				}
			}
		})
	}
}

func TestShapesRoundTrip(t *testing.T) {
	for _, s := range []string{"2003-01-01T00:30:00Z", "2002-11-25T10:00:01.000", "10:00:01.123", "1996-07-04T00:00:00+05:30",
		"2005-01-01", "2005-01-01Z", "Room A123", "T068225", "27.10", "-5", "B-6000", "00000", "0.5", "1.2.3"} {
		sh := parseShape([]byte(s))
		require.NotEqual(t, uint8(shNone), sh.kind, s)
		got := recon(nil, []byte(s), sh, sh.v)
		require.Equal(t, s, string(got))
	}
}

// TestFuzzRegressions replays the inputs the fuzzers found. 234de6ce:
// a word of a long text value was sent as a dictionary reference to an
// entry with the same bytes but another end state (a word cut at
// maxWord), so the decoder continued in the wrong state.
func TestFuzzRegressions(t *testing.T) {
	words := bytes.Repeat([]byte("A"), 300) // cut at maxWord
	msg := []byte("<a>" + string(words) + " x " + string(words[:45]) + "0 y</a>")
	long := []byte(`<m x="AAAAAAAAAAAAAAAAA A AAAAAAAAAAAAA AAAAAAAAAAAAA AA0AAAAAA0AAA"><n>AAA0000000000000 00000000000000000000000 0000 0 00000000 0000000 0000000000 0000000000000000 00000000000000000000000000000000000 0000000000000</n></m>`)
	for _, o := range []Options{{}, {DictBytes: 300}} {
		p := newPair(o)
		for range 3 {
			p.roundTrip(t, msg)
			p.roundTrip(t, long)
		}
	}
}
