package xmltok

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Golden payloads pin the wire format byte for byte, as RFC 7541's
// Appendix C does for HPACK: each vector is a sequence of messages fed
// to one fresh Encoder (and one fresh Decoder) in order, and the exact
// payload of each. FORMAT.md describes the format they follow and walks
// through the first bytes of one of them.
//
// The files, testdata/golden/<name>.hex, hold everything a second
// implementation needs to check itself: the dictionary budget, every
// input message and every payload, in hex. Regenerate them after a
// deliberate format change (which also bumps codec.TokenFormat):
//
//	go test -run TestGoldenPayloads ./internal/codec/xmltok/ -update
var update = flag.Bool("update", false, "rewrite testdata/golden/*.hex from the encoder")

// goldenVector is one entry of the table: messages coded in order on
// one Encoder/Decoder pair built with Options{DictBytes: dict}.
type goldenVector struct {
	name string
	desc string
	dict int
	msgs [][]byte
}

func goldenVectors() []goldenVector {
	const soap11 = `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body>` +
		`<m:GetQuote xmlns:m="urn:example:quotes"><m:Symbol>ACME</m:Symbol></m:GetQuote>` +
		`</soap:Body></soap:Envelope>`
	const soap12 = `<env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope" ` +
		`xmlns:wsa="http://www.w3.org/2005/08/addressing" xmlns:q="urn:example:quotes">` +
		`<env:Header><wsa:Action env:mustUnderstand="true">urn:example:quotes/GetQuoteResponse</wsa:Action>` +
		`<wsa:RelatesTo>urn:uuid:6b29fc40-ca47-1067-b31d-00dd010662da</wsa:RelatesTo></env:Header>` +
		`<env:Body><q:GetQuoteResponse><q:Quote symbol="ACME" currency='USD'>` +
		`<q:Price>101.25</q:Price><q:Time>2026-11-22T10:15:00Z</q:Time>` +
		`</q:Quote></q:GetQuoteResponse></env:Body></env:Envelope>`
	ticks := func(sec int, prices ...string) []byte {
		var b strings.Builder
		b.WriteString(`<Ticks>`)
		for i, p := range prices {
			fmt.Fprintf(&b, `<T at="2026-11-22T10:15:%02dZ">%s</T>`, sec+i, p)
		}
		b.WriteString(`<Volume>1500</Volume><Volume>1520</Volume></Ticks>`)
		return []byte(b.String())
	}
	quote := func(op, sym string) []byte {
		return []byte(`<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body>` +
			`<m:` + op + ` xmlns:m="urn:example:quotes"><m:Symbol>` + sym + `</m:Symbol></m:` + op + `>` +
			`</soap:Body></soap:Envelope>`)
	}
	report := func(t, h int, wind string) []byte {
		return []byte(fmt.Sprintf(`<Report>Temperature %d C, humidity %d%%, wind %s. `+
			`Skies clear over the bay, with fog expected after midnight.</Report>`, t, h, wind))
	}
	secret := func(pw string) []byte {
		return []byte(`<wsse:UsernameToken><wsse:Username>svc</wsse:Username>` +
			`<wsse:Password>` + pw + `</wsse:Password></wsse:UsernameToken>`)
	}
	blob := func(b []byte) []byte {
		return append(append([]byte(`<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><Data>`), b...),
			`</Data></soap:Body></soap:Envelope>`...)
	}
	return []goldenVector{
		{"stored", "a message the model cannot shrink goes out stored (mode 0x01)", 0,
			[][]byte{[]byte("<a/>")}},
		{"tiny", "one markup literal spelled with a static piece on a fresh model (the annotated example of FORMAT.md)", 0,
			[][]byte{[]byte(`<?xml version="1.0"?>`)}},
		{"soap11-request", "a tiny SOAP 1.1 request on a fresh model: markup literals spelled with static pieces", 0,
			[][]byte{[]byte(soap11)}},
		{"soap12-response", "a SOAP 1.2 response with namespaces, both quote styles, a uuid, a number and a time", 0,
			[][]byte{[]byte(soap12)}},
		{"numbers", "number-heavy values: times and prices coded as deltas within and across messages", 0,
			[][]byte{ticks(0, "101.25", "101.30", "101.20"), ticks(3, "101.35", "101.40", "101.45")}},
		{"repeated", "one request, the same again (successors and the match model), then another operation (dictionary references)", 0,
			[][]byte{quote("GetQuote", "ACME"), quote("GetQuote", "ACME"), quote("GetHistory", "ACME")}},
		{"prose", "a long text value with spaces, coded as prose; the second one is predicted slot by slot", 0,
			[][]byte{report(21, 64, "NW"), report(19, 71, "W")}},
		{"secret", "a wsse:Password travels verbatim in the raw section (mode 0x02) and is never learned", 0,
			[][]byte{secret("hunter2"), secret("correct-horse")}},
		{"blob", "a base64 value (a huff0 chunk) and binary junk that runs over markup (a stored chunk), as blobs", 0,
			[][]byte{blob([]byte(base64.StdEncoding.EncodeToString(goldenRandom(240, 1)))), blob(goldenRandom(300, 2))}},
	}
}

// goldenRandom returns n reproducible pseudo-random bytes (SplitMix64),
// so that the blob inputs do not depend on a library's generator.
func goldenRandom(n int, seed uint64) []byte {
	out := make([]byte, 0, n+7)
	for len(out) < n {
		seed += 0x9E3779B97F4A7C15
		z := seed
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		z ^= z >> 31
		for i := 0; i < 8; i++ {
			out = append(out, byte(z>>(8*i)))
		}
	}
	return out[:n]
}

// goldenFile is a parsed testdata/golden/<name>.hex.
type goldenFile struct {
	dict     int
	inputs   [][]byte
	payloads [][]byte
}

// goldenDict is the dictionary budget of a vector as its file states it
// (Options' default when the table leaves it 0).
func goldenDict(v goldenVector) int {
	if v.dict <= 0 {
		return 1 << 20
	}
	return v.dict
}

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name+".hex") }

// encodeGolden codes the vector's messages on one fresh Encoder.
func encodeGolden(v goldenVector) [][]byte {
	enc := NewEncoder(Options{DictBytes: goldenDict(v)})
	out := make([][]byte, len(v.msgs))
	for i, m := range v.msgs {
		out[i] = enc.Encode(nil, m)
	}
	return out
}

// writeGolden formats a vector's file: comments, the budget, and per
// message its input ("in") and payload ("out") in hex, 32 bytes a line.
func writeGolden(v goldenVector, payloads [][]byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# xmltok golden vector %q: %s.\n", v.name, v.desc)
	b.WriteString("# Messages are coded in order on one fresh Encoder; FORMAT.md describes the payloads.\n")
	b.WriteString("# Generated by: go test -run TestGoldenPayloads ./internal/codec/xmltok/ -update\n")
	fmt.Fprintf(&b, "dict %d\n", goldenDict(v))
	modes := map[byte]string{modeCoded: "coded", modeStored: "stored", modeRaw: "raw section + coded"}
	for i, m := range v.msgs {
		p := payloads[i]
		fmt.Fprintf(&b, "\n# message %d: %d bytes -> %d-byte payload, mode 0x%02x (%s)\n", i+1, len(m), len(p), p[0], modes[p[0]])
		writeHexLines(&b, "in  ", m)
		writeHexLines(&b, "out ", p)
	}
	return b.Bytes()
}

func writeHexLines(b *bytes.Buffer, key string, data []byte) {
	if len(data) == 0 {
		b.WriteString(strings.TrimSpace(key) + "\n")
		return
	}
	for len(data) > 0 {
		n := min(len(data), 32)
		b.WriteString(key + hex.EncodeToString(data[:n]) + "\n")
		data = data[n:]
	}
}

// readGolden parses a vector file: "dict N", then per message one or
// more "in HEX" lines followed by one or more "out HEX" lines; '#'
// starts a comment line.
func readGolden(t *testing.T, path string) goldenFile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	defer f.Close()
	var g goldenFile
	last := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, _ := strings.Cut(line, " ")
		val = strings.TrimSpace(val)
		switch key {
		case "dict":
			d, err := strconv.Atoi(val)
			if err != nil {
				t.Fatalf("%s:%d: %v", path, n, err)
			}
			g.dict = d
		case "in", "out":
			b, err := hex.DecodeString(val)
			if err != nil {
				t.Fatalf("%s:%d: %v", path, n, err)
			}
			if key == "in" {
				if last != "in" {
					g.inputs = append(g.inputs, []byte{})
				}
				g.inputs[len(g.inputs)-1] = append(g.inputs[len(g.inputs)-1], b...)
			} else {
				if last == "" {
					t.Fatalf("%s:%d: out before in", path, n)
				}
				if last != "out" {
					g.payloads = append(g.payloads, []byte{})
				}
				g.payloads[len(g.payloads)-1] = append(g.payloads[len(g.payloads)-1], b...)
			}
			last = key
		default:
			t.Fatalf("%s:%d: unknown key %q", path, n, key)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(g.inputs) != len(g.payloads) {
		t.Fatalf("%s: %d inputs, %d payloads", path, len(g.inputs), len(g.payloads))
	}
	return g
}

// TestGoldenPayloads checks every vector both ways: the encoder must
// produce the stored payloads exactly, and a fresh decoder must turn
// them back into the inputs, ending in the encoder's state.
func TestGoldenPayloads(t *testing.T) {
	for _, v := range goldenVectors() {
		t.Run(v.name, func(t *testing.T) {
			path := goldenPath(v.name)
			got := encodeGolden(v)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, writeGolden(v, got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			g := readGolden(t, path)
			if g.dict != goldenDict(v) {
				t.Fatalf("%s: dict %d, the table says %d", path, g.dict, goldenDict(v))
			}
			if len(g.inputs) != len(v.msgs) {
				t.Fatalf("%s holds %d messages, the table %d: run with -update", path, len(g.inputs), len(v.msgs))
			}
			for i, m := range v.msgs {
				if !bytes.Equal(g.inputs[i], m) {
					t.Fatalf("%s: message %d differs from the table's: run with -update", path, i+1)
				}
			}
			// encode(input) == golden
			for i := range got {
				if !bytes.Equal(got[i], g.payloads[i]) {
					t.Errorf("%s: message %d encodes to\n%x\nwant\n%x\n(a deliberate format change: bump codec.TokenFormat and run with -update)",
						path, i+1, got[i], g.payloads[i])
				}
				if len(got[i]) > len(v.msgs[i])+1 {
					t.Errorf("%s: message %d: %d-byte payload for %d bytes", path, i+1, len(got[i]), len(v.msgs[i]))
				}
			}
			// decode(golden) == input, on a decoder built from the file alone
			dec := NewDecoder(Options{DictBytes: g.dict})
			enc := NewEncoder(Options{DictBytes: g.dict})
			for i, p := range g.payloads {
				out, err := dec.Decode(nil, p)
				if err != nil {
					t.Fatalf("%s: message %d: decode: %v", path, i+1, err)
				}
				if !bytes.Equal(out, g.inputs[i]) {
					t.Fatalf("%s: message %d decodes to\n%q\nwant\n%q", path, i+1, out, g.inputs[i])
				}
				enc.Encode(nil, g.inputs[i])
			}
			if e, d := enc.Digest(), dec.Digest(); e != d {
				t.Fatalf("%s: digests differ after the vector: encoder %x, decoder %x", path, e, d)
			}
		})
	}
}

// staticTableSHA256 is the digest FORMAT.md gives for the static table,
// so that a second implementation can check its copy: SHA-256 over
// uvarint(len(s)) and s for every string, in id order.
const staticTableSHA256 = "c51c283acfe9a42c230d8a14b37506a1acf38505e2b6b15c615b9965e7ecfad1"

func TestGoldenStaticTable(t *testing.T) {
	h := sha256.New()
	for _, s := range staticTable {
		h.Write(binary.AppendUvarint(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != staticTableSHA256 || len(staticTable) != 245 {
		t.Fatalf("static table: %d strings, SHA-256 %s; FORMAT.md says 245 and %s (a format change: update both, bump codec.TokenFormat)",
			len(staticTable), got, staticTableSHA256)
	}
}
