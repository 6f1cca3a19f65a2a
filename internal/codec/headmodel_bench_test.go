package codec

import (
	"bytes"
	"testing"

	"github.com/soapgw/soapgw/internal/trafficgen"
)

// headBenchSet is one family direction's tunnel messages (envelope head and body), in
// wire order: what one token encoder/decoder pair sees.
type headBenchSet struct {
	name string
	msgs [][]byte
}

// headBenchSets returns every family direction of docs/codecs.md as tunnel messages
// (tunnelMessages: the heads the gateways send in front of the generated bodies).
func headBenchSets(withEdge bool) []headBenchSet {
	var sets []headBenchSet
	for _, fam := range trafficgen.Families {
		if fam == "edge" && !withEdge {
			continue
		}
		reqs, resps := tunnelMessages(fam, familyRun(fam))
		sets = append(sets, headBenchSet{fam + "-request", reqs}, headBenchSet{fam + "-response", resps})
	}
	return sets
}

// headOf returns the length-prefixed head msg starts with.
func headOf(tb testing.TB, msg []byte) []byte {
	_, _, _, body, ok := new(headModel).splitHead(msg)
	if !ok {
		tb.Fatal("a tunnel message without a canonical head")
	}
	return msg[:len(msg)-len(body)]
}

// encodeHead is what the token encoder does with a message's head: split it into its
// list, code the list, remember it.
func encodeHead(m *headModel, dst, msg []byte) ([]byte, byte) {
	kind, list, fixed, _, ok := m.splitHead(msg)
	if !ok {
		return dst, 0
	}
	dst, _ = m.encode(dst, kind, list, fixed)
	m.commit(kind, list, fixed)
	return dst, kind
}

// decodeHead is what the token decoder does with a coded head: decode the list, rebuild
// the head, remember the list.
func decodeHead(m *headModel, dst, p []byte, kind byte) ([]byte, error) {
	list, _, _, err := m.decode(p, kind, 1<<20)
	if err != nil {
		return dst, err
	}
	dst, ok := appendHead(dst, kind, list)
	if !ok {
		return dst, ErrCorrupt
	}
	m.commit(kind, list, fixedFields(kind))
	return dst, nil
}

// BenchmarkHeadModel measures the head model alone, per family direction, in steady
// state: one op is one head (encode: split, code, remember; decode: decode, rebuild,
// remember), cycling through the direction's heads after a warm-up pass. MB/s counts
// head bytes (the length-prefixed envelope head, not the body).
//
//	go test -run '^$' -bench BenchmarkHeadModel -benchtime 20000x ./internal/codec/
func BenchmarkHeadModel(b *testing.B) {
	for _, set := range headBenchSets(true) {
		heads := make([][]byte, len(set.msgs))
		raw := 0
		for i, m := range set.msgs {
			heads[i] = headOf(b, m)
			raw += len(heads[i])
		}
		b.Run(set.name+"/encode", func(b *testing.B) {
			m := newHeadModel()
			var dst []byte
			for _, h := range heads {
				dst, _ = encodeHead(m, dst[:0], h)
			}
			b.SetBytes(int64(raw / len(heads)))
			b.ReportAllocs()
			b.ResetTimer()
			for n := range b.N {
				dst, _ = encodeHead(m, dst[:0], heads[n%len(heads)])
			}
		})
		b.Run(set.name+"/decode", func(b *testing.B) {
			enc, dec := newHeadModel(), newHeadModel()
			var p, out []byte
			for _, h := range heads {
				var kind byte
				var err error
				p, kind = encodeHead(enc, p[:0], h)
				if out, err = decodeHead(dec, out[:0], p, kind); err != nil || !bytes.Equal(out, h) {
					b.Fatalf("warm-up does not round-trip: %v", err)
				}
			}
			var all []byte
			ends := make([]int, b.N)
			kinds := make([]byte, b.N)
			for n := range b.N {
				all, kinds[n] = encodeHead(enc, all, heads[n%len(heads)])
				ends[n] = len(all)
			}
			b.SetBytes(int64(raw / len(heads)))
			b.ReportAllocs()
			b.ResetTimer()
			start := 0
			for n := range b.N {
				var err error
				if out, err = decodeHead(dec, out[:0], all[start:ends[n]], kinds[n]); err != nil {
					b.Fatal(err)
				}
				start = ends[n]
			}
			b.StopTimer()
			if !bytes.Equal(out, heads[(b.N-1)%len(heads)]) {
				b.Fatal("the last head does not round-trip")
			}
		})
	}
}

// BenchmarkTokenHeads measures the whole token codec on tunnel messages (envelope head
// and body, as the gateways code them), per family direction, in steady state: one op is
// one message, cycling through the direction's messages after a warm-up pass. MB/s
// counts whole messages. BenchmarkCodecs codes the bodies alone.
//
//	go test -run '^$' -bench BenchmarkTokenHeads -benchtime 4000x ./internal/codec/
func BenchmarkTokenHeads(b *testing.B) {
	c, err := NewToken()
	if err != nil {
		b.Fatal(err)
	}
	for _, set := range headBenchSets(false) {
		msgs := set.msgs
		raw := 0
		for _, m := range msgs {
			raw += len(m)
		}
		pair := func(b *testing.B) (Encoder, Decoder) {
			enc, dec := codecPair(b, c)
			var out []byte
			for _, m := range msgs {
				p, err := enc.Encode(nil, m)
				if err != nil {
					b.Fatal(err)
				}
				if out, err = dec.Decode(out[:0], p); err != nil || !bytes.Equal(out, m) {
					b.Fatalf("warm-up does not round-trip: %v", err)
				}
			}
			return enc, dec
		}
		b.Run(set.name+"/encode", func(b *testing.B) {
			enc, _ := pair(b)
			var buf []byte
			b.SetBytes(int64(raw / len(msgs)))
			b.ReportAllocs()
			b.ResetTimer()
			for n := range b.N {
				var err error
				if buf, err = enc.Encode(buf[:0], msgs[n%len(msgs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(set.name+"/decode", func(b *testing.B) {
			enc, dec := pair(b)
			var all, out []byte
			ends := make([]int, b.N)
			for n := range b.N {
				var err error
				if all, err = enc.Encode(all, msgs[n%len(msgs)]); err != nil {
					b.Fatal(err)
				}
				ends[n] = len(all)
			}
			b.SetBytes(int64(raw / len(msgs)))
			b.ReportAllocs()
			b.ResetTimer()
			start := 0
			for n := range b.N {
				var err error
				if out, err = dec.Decode(out[:0], all[start:ends[n]]); err != nil {
					b.Fatal(err)
				}
				start = ends[n]
			}
			b.StopTimer()
			if !bytes.Equal(out, msgs[(b.N-1)%len(msgs)]) {
				b.Fatal("the last message does not round-trip")
			}
		})
	}
}
