package xmltok

import (
	"bytes"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/soapgw/soapgw/testdata/gen"
)

// benchSets returns, per family and direction, the messages of one
// direction in wire order: what one Encoder/Decoder pair sees.
func benchSets() (names []string, sets [][][]byte) {
	for _, fam := range gen.Families {
		if fam == "edge" {
			continue
		}
		d := byDir(gen.Family(fam, familyN(fam), gen.DefaultSeed))
		for _, dir := range []string{gen.Request, gen.Response} {
			names = append(names, fam+"-"+dir)
			sets = append(sets, d[dir])
		}
	}
	return names, sets
}

// BenchmarkXMLTok measures payload size and speed per family and
// direction. One b.N iteration is one message; the messages of the
// family are fed in order, cycling, through one pair that has first seen
// them all once (steady state). B/msg and %raw are over one full pass.
//
//	go test -run '^$' -bench BenchmarkXMLTok -benchtime 2000x ./internal/codec/xmltok/
func BenchmarkXMLTok(b *testing.B) {
	names, sets := benchSets()
	for i, msgs := range sets {
		benchMessages(b, names[i], msgs)
	}
}

// benchMessages runs one direction's messages, cycling, through one pair:
// a cold pass gives the size figures, then encode and decode are timed
// in steady state.
func benchMessages(b *testing.B, name string, msgs [][]byte) {
	var raw int
	for _, m := range msgs {
		raw += len(m)
	}
	enc, dec := NewEncoder(Options{}), NewDecoder(Options{})
	var coded int
	for j, m := range msgs {
		p := enc.Encode(nil, m)
		coded += len(p)
		if out, err := dec.Decode(nil, p); err != nil || !bytes.Equal(out, m) {
			b.Fatalf("%s message %d does not round-trip: %v", name, j, err)
		}
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(coded)/float64(len(msgs)), "B/msg")
		b.ReportMetric(100*float64(coded)/float64(raw), "%raw")
	}
	b.Run(name+"/encode", func(b *testing.B) {
		enc := NewEncoder(Options{})
		var buf []byte
		for _, m := range msgs {
			buf = enc.Encode(buf[:0], m)
		}
		b.SetBytes(int64(raw / len(msgs)))
		b.ReportAllocs()
		b.ResetTimer()
		for n := 0; n < b.N; n++ {
			buf = enc.Encode(buf[:0], msgs[n%len(msgs)])
		}
		report(b)
	})
	b.Run(name+"/decode", func(b *testing.B) {
		enc, dec := NewEncoder(Options{}), NewDecoder(Options{})
		var out, all []byte
		for _, m := range msgs {
			p := enc.Encode(nil, m)
			if out, _ = dec.Decode(out[:0], p); !bytes.Equal(out, m) {
				b.Fatal("warm-up does not round-trip")
			}
		}
		ends := make([]int, b.N)
		for n := range b.N {
			all = enc.Encode(all, msgs[n%len(msgs)])
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
		report(b)
	})
}

// BenchmarkZstdStream is the baseline: klauspost zstd at its best level
// with the window kept across the messages of a direction (one frame,
// flushed after every message), as codec's zstd-stream does.
func BenchmarkZstdStream(b *testing.B) {
	names, sets := benchSets()
	for i, msgs := range sets {
		b.Run(names[i], func(b *testing.B) {
			var raw, coded int
			for n := 0; n < b.N; n++ {
				var out bytes.Buffer
				w, _ := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithWindowSize(1<<22), zstd.WithEncoderConcurrency(1))
				raw, coded = 0, 0
				for _, m := range msgs {
					before := out.Len()
					w.Write(m)
					w.Flush()
					coded += out.Len() - before
					raw += len(m)
				}
				w.Close()
			}
			b.ReportMetric(float64(coded)/float64(len(msgs)), "B/msg")
			b.ReportMetric(100*float64(coded)/float64(raw), "%raw")
		})
	}
}
