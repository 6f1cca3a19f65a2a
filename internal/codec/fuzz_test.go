package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/soapgw/soapgw/internal/soapdemo"
)

const fuzzMaxMessage = 1 << 20

// fuzzCodec picks a codec from a byte: the registry, plus a dictionary and a small-window
// configuration.
func fuzzCodecs(f *testing.F) []Codec {
	cs := Registry()
	d, err := NewZstd(ZstdDictionary(soapdemo.StressRequest(3)))
	if err != nil {
		f.Fatal(err)
	}
	s, err := NewZstdStream(ZstdLevel(1), ZstdWindow(1<<10))
	if err != nil {
		f.Fatal(err)
	}
	return append(cs, d, s)
}

// splitPayloads cuts data into payloads, each prefixed by a uvarint length; a bad or
// short prefix ends the list with the rest of data.
func splitPayloads(data []byte) [][]byte {
	var ps [][]byte
	for len(data) > 0 && len(ps) < 64 {
		n, k := binary.Uvarint(data)
		if k <= 0 || n > uint64(len(data)-k) {
			break
		}
		ps = append(ps, data[k:k+int(n)])
		data = data[k+int(n):]
	}
	if len(data) > 0 {
		ps = append(ps, data)
	}
	return ps
}

func joinPayloads(ps [][]byte) []byte {
	var b []byte
	for _, p := range ps {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// FuzzDecode feeds hostile payload sequences to each codec's decoder: no panic, no
// message over the limit, and nothing decoded after a stateful decoder failed.
func FuzzDecode(f *testing.F) {
	cs := fuzzCodecs(f)
	msgs := [][]byte{soapdemo.StressRequest(1), soapdemo.StressResponse(1), soapdemo.StressRequest(2), {}, []byte("hello hello hello hello")}
	for i, c := range cs {
		enc, err := c.NewEncoder()
		if err != nil {
			f.Fatal(err)
		}
		var ps [][]byte
		for _, m := range msgs {
			p, err := enc.Encode(nil, m)
			if err != nil {
				f.Fatal(err)
			}
			ps = append(ps, p)
		}
		f.Add(byte(i), joinPayloads(ps))
		f.Add(byte(i), ps[0])
	}
	f.Add(byte(ZstdStream), joinPayloads([][]byte{append(binary.AppendUvarint([]byte{1}, 200), zstdRLEBomb(3)...)}))
	f.Add(byte(Zstd), append([]byte{1}, zstdRLEBomb(3)...))
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		c := cs[int(which)%len(cs)]
		dec, err := c.NewDecoder(Limits{MaxMessage: fuzzMaxMessage})
		if err != nil {
			t.Fatal(err)
		}
		failed := false
		for _, p := range splitPayloads(data) {
			got, err := dec.Decode([]byte("pre"), p)
			if err != nil {
				if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s: error %v is neither ErrTooLarge nor ErrCorrupt", c.Name(), err)
				}
				failed = true
				continue
			}
			if !bytes.HasPrefix(got, []byte("pre")) {
				t.Fatal("dst clobbered")
			}
			if len(got)-3 > fuzzMaxMessage {
				t.Fatalf("%s: decoded %d bytes", c.Name(), len(got)-3)
			}
			if failed && c.ID() == ZstdStream {
				t.Fatalf("zstd-stream decoded after an error")
			}
		}
	})
}

// FuzzRoundTrip encodes message sequences (data split at 0xff bytes, each piece
// optionally repeated) and checks they decode to themselves within MaxExpansion.
func FuzzRoundTrip(f *testing.F) {
	cs := fuzzCodecs(f)
	seed := bytes.Join([][]byte{soapdemo.StressRequest(1), soapdemo.StressResponse(1), soapdemo.StressRequest(2)}, []byte{0xff})
	for i := range cs {
		f.Add(byte(i), uint8(1), seed)
		f.Add(byte(i), uint8(7), []byte("a\xffb\xff\xff<x>yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy</x>"))
		f.Add(byte(i), uint8(0), []byte{})
	}
	// One pair per codec for all inputs (making zstd encoders is costly); stateful ones
	// are restarted for each input.
	type pair struct {
		enc Encoder
		dec Decoder
	}
	var pairs []pair
	for _, c := range cs {
		enc, err := c.NewEncoder()
		if err != nil {
			f.Fatal(err)
		}
		dec, err := c.NewDecoder(Limits{MaxMessage: fuzzMaxMessage})
		if err != nil {
			f.Fatal(err)
		}
		pairs = append(pairs, pair{enc, dec})
	}
	f.Fuzz(func(t *testing.T, which byte, repeat uint8, data []byte) {
		i := int(which) % len(cs)
		c := cs[i]
		enc, dec := pairs[i].enc, pairs[i].dec
		if r, ok := enc.(interface{ reset() }); ok {
			r.reset()
			dec.(interface{ reset() }).reset()
		}
		for _, piece := range bytes.Split(data, []byte{0xff}) {
			m := bytes.Repeat(piece, 1+int(repeat%8))
			p, err := enc.Encode(nil, m)
			if err != nil {
				t.Fatal(err)
			}
			if len(p) > len(m)+MaxExpansion {
				t.Fatalf("%s: %d bytes encode to %d", c.Name(), len(m), len(p))
			}
			got, err := dec.Decode(nil, p)
			if err != nil {
				t.Fatalf("%s: decode: %v", c.Name(), err)
			}
			if !bytes.Equal(got, m) {
				t.Fatalf("%s: round trip differs", c.Name())
			}
		}
	})
}
