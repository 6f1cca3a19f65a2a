package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/soapgw/soapgw/internal/soapdemo"
	"github.com/stretchr/testify/require"
)

// testCodecs returns the registry plus non-default configurations.
func testCodecs(t testing.TB) []Codec {
	t.Helper()
	cs := Registry()
	dict := bytes.Repeat(soapdemo.StressRequest(7), 2)
	for _, mk := range []func() (Codec, error){
		func() (Codec, error) { return NewGzip(GzipLevel(gzip.BestSpeed)) },
		func() (Codec, error) { return NewGzip(GzipLevel(gzip.BestCompression)) },
		func() (Codec, error) { return NewZstd(ZstdLevel(7), ZstdDictionary(dict)) },
		func() (Codec, error) { return NewZstdStream(ZstdLevel(1), ZstdWindow(64<<10)) },
		func() (Codec, error) { return NewZstdStream(ZstdDictionary(dict)) },
	} {
		c, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs
}

func codecLabel(i int, c Codec) string { return fmt.Sprintf("%d-%s", i, c.Name()) }

func testMessages() [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	msgs := [][]byte{{}, []byte("x"), []byte("<a/>")}
	for i := range 40 {
		msgs = append(msgs, soapdemo.StressRequest(i), soapdemo.StressResponse(i))
	}
	msgs = append(msgs,
		random(1), random(17), random(1000), random(300<<10), // incompressible
		soapdemo.StressRequest(1000),
		bytes.Repeat([]byte("<item>abc</item>"), 50000), // 800 KB, very compressible
		[]byte{}, soapdemo.StressResponse(1000), random(70<<10), soapdemo.StressRequest(1001))
	return msgs
}

func TestLookupRegistry(t *testing.T) {
	want := map[ID]string{Identity: "identity", Gzip: "gzip", Zstd: "zstd", ZstdStream: "zstd-stream", Token: "token"}
	reg := Registry()
	if len(reg) != len(want) {
		t.Fatalf("Registry has %d codecs", len(reg))
	}
	for _, c := range reg {
		if want[c.ID()] != c.Name() || c.ID().String() != c.Name() {
			t.Errorf("codec %d named %q", c.ID(), c.Name())
		}
		if l, ok := Lookup(c.ID()); !ok || l != c {
			t.Errorf("Lookup(%v) = %v, %v", c.ID(), l, ok)
		}
	}
	if _, ok := Lookup(ID(9)); ok {
		t.Error("Lookup(9) found a codec")
	}
	if Token.String() != "token" || ID(9).String() != "codec(9)" {
		t.Error("String")
	}
	for _, n := range Names {
		if _, ok := ByName(n); !ok && n != "auto" {
			t.Errorf("ByName(%q) not implemented", n)
		}
	}
	if _, err := NewGzip(GzipLevel(10)); err == nil {
		t.Error("gzip level 10 accepted")
	}
	if _, err := NewZstd(ZstdLevel(0)); err == nil {
		t.Error("zstd level 0 accepted")
	}
	if _, err := NewZstdStream(ZstdWindow(3000)); err == nil {
		t.Error("zstd window 3000 accepted")
	}
}

func TestRoundTrip(t *testing.T) {
	msgs := testMessages()
	for i, c := range testCodecs(t) {
		t.Run(codecLabel(i, c), func(t *testing.T) {
			enc, err := c.NewEncoder()
			if err != nil {
				t.Fatal(err)
			}
			dec, err := c.NewDecoder(Limits{MaxMessage: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			var raw, coded int
			prefix := []byte("prefix")
			for j, m := range msgs {
				p, err := enc.Encode(bytes.Clone(prefix), m)
				if err != nil {
					t.Fatalf("msg %d: encode: %v", j, err)
				}
				if !bytes.HasPrefix(p, prefix) {
					t.Fatalf("msg %d: encode clobbered dst", j)
				}
				p = p[len(prefix):]
				if len(p) > len(m)+MaxExpansion {
					t.Errorf("msg %d: %d bytes encode to %d", j, len(m), len(p))
				}
				raw, coded = raw+len(m), coded+len(p)
				got, err := dec.Decode(bytes.Clone(prefix), p)
				if err != nil {
					t.Fatalf("msg %d (%d bytes): decode: %v", j, len(m), err)
				}
				if !bytes.Equal(got[len(prefix):], m) || !bytes.HasPrefix(got, prefix) {
					t.Fatalf("msg %d: round trip differs", j)
				}
			}
			t.Logf("%d -> %d bytes", raw, coded)
		})
	}
}

// TestBuffersAreTheCallers checks that a codec keeps no view of the buffers it was
// given or returned: the tunnel decodes into pooled frame buffers and reuses them once the
// message is read, and encodes from buffers it reuses. Every buffer is scribbled over
// after each call; a model that kept a view of one would then code or decode the next
// messages differently from a fresh pair given fresh buffers.
func TestBuffersAreTheCallers(t *testing.T) {
	msgs := testMessages()
	scribble := func(b []byte) {
		b = b[:cap(b)]
		for i := range b {
			b[i] = 0xA5
		}
	}
	for i, c := range testCodecs(t) {
		t.Run(codecLabel(i, c), func(t *testing.T) {
			enc, err := c.NewEncoder()
			require.NoError(t, err)
			dec, err := c.NewDecoder(Limits{MaxMessage: 1 << 20})
			require.NoError(t, err)
			refEnc, err := c.NewEncoder()
			require.NoError(t, err)
			refDec, err := c.NewDecoder(Limits{MaxMessage: 1 << 20})
			require.NoError(t, err)
			in := make([]byte, 0, 64<<10)
			var coded, out []byte
			for round := range 2 {
				for j, m := range msgs {
					in = append(in[:0], m...)
					coded, err = enc.Encode(coded[:0], in)
					require.NoError(t, err)
					want, err := refEnc.Encode(nil, bytes.Clone(m))
					require.NoError(t, err)
					require.Truef(t, bytes.Equal(want, coded), "round %d msg %d: encoding differs from a fresh-buffer encoder's", round, j)
					scribble(in)
					out, err = dec.Decode(out[:0], coded)
					require.NoError(t, err, "round %d msg %d", round, j)
					require.Truef(t, bytes.Equal(m, out), "round %d msg %d: decoded message differs", round, j)
					_, err = refDec.Decode(nil, bytes.Clone(want))
					require.NoError(t, err)
					scribble(coded)
					scribble(out)
				}
			}
		})
	}
}

// TestIncompressible checks that random data never grows by more than the mode byte
// (per-message codecs) or MaxExpansion (all).
func TestIncompressible(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i, c := range testCodecs(t) {
		enc, err := c.NewEncoder()
		if err != nil {
			t.Fatal(err)
		}
		dec, _ := c.NewDecoder(Limits{})
		for _, n := range []int{0, 1, 2, 15, 16, 17, 100, 1 << 20, 4096, 128 << 10, 5} {
			m := make([]byte, n)
			for k := range m {
				m[k] = byte(rng.Uint32())
			}
			p, err := enc.Encode(nil, m)
			if err != nil {
				t.Fatal(err)
			}
			limit := len(m) + MaxExpansion
			if c.ID() == Gzip || c.ID() == Zstd {
				limit = len(m) + 1
			}
			if len(p) > limit {
				t.Errorf("%s: %d random bytes encode to %d", codecLabel(i, c), n, len(p))
			}
			if c.ID() == ZstdStream && n == 1<<20 && p[0] != modeStored {
				t.Errorf("%s: 1 MiB random stays compressed in %d bytes", codecLabel(i, c), len(p))
			}
			got, err := dec.Decode(nil, p)
			if err != nil || !bytes.Equal(got, m) {
				t.Fatalf("%s: %d random bytes: decode %v", codecLabel(i, c), n, err)
			}
		}
	}
}

// zstdRLEBomb is a zstd frame (without content size) of n RLE blocks of 128 KiB each:
// 4n+6 bytes decoding to n*128 KiB.
func zstdRLEBomb(n int) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 7 << 3} // magic, descriptor, 128 KiB window
	for i := range n {
		h := uint32(128<<10)<<3 | 1<<1
		if i == n-1 {
			h |= 1
		}
		b = append(b, byte(h), byte(h>>8), byte(h>>16), 'A')
	}
	return b
}

func gzipBomb(t testing.TB, n int) []byte {
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	w.Write(make([]byte, n))
	w.Close()
	return buf.Bytes()
}

func TestBomb(t *testing.T) {
	const limit = 256 << 10
	zb := zstdRLEBomb(250) // 1006 bytes -> 31.25 MiB
	// Single-segment frame claiming 2^40 bytes of content.
	fcs := append([]byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0}, binary.LittleEndian.AppendUint64(nil, 1<<40)...)
	fcs = append(fcs, zb[6:]...)
	gb := gzipBomb(t, 8<<20) // ~8 KB -> 8 MiB
	huge := binary.AppendUvarint([]byte{modeCompressed}, 1<<40)
	cases := []struct {
		id      ID
		name    string
		payload []byte
		tooBig  bool // must be ErrTooLarge (else any error)
	}{
		{Identity, "identity", make([]byte, limit+1), true},
		{Gzip, "stored", append([]byte{modeStored}, make([]byte, limit+1)...), true},
		{Gzip, "bomb", append([]byte{modeCompressed}, gb...), true},
		{Zstd, "stored", append([]byte{modeStored}, make([]byte, limit+1)...), true},
		{Zstd, "rle", append([]byte{modeCompressed}, zb...), true},
		{Zstd, "fcs", append([]byte{modeCompressed}, fcs...), true},
		{ZstdStream, "stored", append([]byte{modeStored}, make([]byte, limit+1)...), true},
		{ZstdStream, "length", huge, true},
		{ZstdStream, "rle-lying-length", append(binary.AppendUvarint([]byte{modeCompressed}, 100), zb...), false},
		{ZstdStream, "rle-max-length", append(binary.AppendUvarint([]byte{modeCompressed}, limit), zb...), false},
	}
	for _, tc := range cases {
		t.Run(tc.id.String()+"-"+tc.name, func(t *testing.T) {
			c, _ := Lookup(tc.id)
			dec, err := c.NewDecoder(Limits{MaxMessage: limit})
			if err != nil {
				t.Fatal(err)
			}
			// Warm up the decoder's own buffers.
			enc, _ := c.NewEncoder()
			p, _ := enc.Encode(nil, soapdemo.StressRequest(1))
			if _, err := dec.Decode(nil, p); err != nil {
				t.Fatal(err)
			}
			if tc.id == ZstdStream { // the stream decoder is now past message 1
				dec, _ = c.NewDecoder(Limits{MaxMessage: limit})
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, err := dec.Decode(nil, tc.payload)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatalf("decoded %d bytes", len(got))
			}
			if tc.tooBig && !errors.Is(err, ErrTooLarge) {
				t.Errorf("err = %v, want ErrTooLarge", err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
				t.Errorf("allocated %d bytes for a %d-byte payload", alloc, len(tc.payload))
			}
			t.Logf("%d-byte payload: %v", len(tc.payload), err)
		})
	}
}

func TestGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	msgs := testMessages()
	for i, c := range testCodecs(t) {
		if c.ID() == Identity || c.ID() == Token {
			continue // token has its own layout: token_test.go
		}
		enc, _ := c.NewEncoder()
		var payloads [][]byte
		for _, m := range msgs[3:12] {
			p, err := enc.Encode(nil, m)
			if err != nil {
				t.Fatal(err)
			}
			payloads = append(payloads, p)
		}
		// Truncated, extended, bit-flipped and random payloads all fail (a flip may
		// occasionally survive for a stored payload; those are all compressed here).
		for j, p := range payloads {
			if p[0] != modeCompressed {
				t.Fatalf("%s: payload %d stored", codecLabel(i, c), j)
			}
			bad := map[string][]byte{
				"empty":     {},
				"mode":      append([]byte{7}, p[1:]...),
				"truncated": p[:len(p)-1],
				"half":      p[:len(p)/2],
				"extended":  append(bytes.Clone(p), 0),
				"random":    append([]byte{modeCompressed}, randBytes(rng, len(p))...),
			}
			for name, b := range bad {
				dec, _ := c.NewDecoder(Limits{})
				for _, q := range payloads[:j] {
					if _, err := dec.Decode(nil, q); err != nil {
						t.Fatal(err)
					}
				}
				if got, err := dec.Decode(nil, b); err == nil {
					t.Errorf("%s: payload %d %s: decoded %d bytes", codecLabel(i, c), j, name, len(got))
				}
			}
		}
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestStreamGain checks that zstd-stream uses the earlier messages.
func TestStreamGain(t *testing.T) {
	size := func(c Codec) int {
		enc, _ := c.NewEncoder()
		n := 0
		for i := range 200 {
			p, _ := enc.Encode(nil, soapdemo.StressRequest(i))
			n += len(p)
		}
		return n
	}
	z, _ := Lookup(Zstd)
	s, _ := Lookup(ZstdStream)
	zn, sn := size(z), size(s)
	t.Logf("200 Stress requests: zstd %d bytes, zstd-stream %d bytes", zn, sn)
	if sn*2 > zn {
		t.Errorf("zstd-stream %d bytes, not under half of zstd's %d", sn, zn)
	}
}
