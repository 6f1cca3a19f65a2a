package xmltok

import (
	"bytes"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/soapgw/soapgw/internal/trafficgen"
)

// benchSets returns, per family and direction, the messages of one
// direction in wire order: what one Encoder/Decoder pair sees.
func benchSets() (names []string, sets [][][]byte) {
	for _, fam := range trafficgen.Families {
		if fam == "edge" {
			continue
		}
		d := byDir(trafficgen.Family(fam, familyN(fam), trafficgen.DefaultSeed))
		for _, dir := range []string{trafficgen.Request, trafficgen.Response} {
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

// BenchmarkXMLTokCorpus measures speed over the whole corpus, the way
// the codec target is stated: one b.N iteration is one pass over every
// family direction's messages, each direction through its own warmed
// pair, so MB/s is the corpus's bytes over the time to code all of them.
// Large messages (Northwind DataSets) weigh by their bytes, as on a
// link; BenchmarkXMLTok gives every direction on its own. The pairs first
// see the corpus corpusWarm times: the match history grows its rings as
// they fill, up to 1 MiB each, and what is measured is a connection
// past that.
//
//	go test -run '^$' -bench BenchmarkXMLTokCorpus -benchtime 20x ./internal/codec/xmltok/
func BenchmarkXMLTokCorpus(b *testing.B) {
	const corpusWarm = 4
	_, sets := benchSets()
	var raw int
	for _, msgs := range sets {
		for _, m := range msgs {
			raw += len(m)
		}
	}
	b.Run("encode", func(b *testing.B) {
		encs := make([]*Encoder, len(sets))
		var buf []byte
		for i, msgs := range sets {
			encs[i] = NewEncoder(Options{})
			for range corpusWarm {
				for _, m := range msgs {
					buf = encs[i].Encode(buf[:0], m)
				}
			}
		}
		b.SetBytes(int64(raw))
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			for i, msgs := range sets {
				for _, m := range msgs {
					buf = encs[i].Encode(buf[:0], m)
				}
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		decs := make([]*Decoder, len(sets))
		payloads := make([][][]byte, len(sets))
		var out []byte
		for i, msgs := range sets {
			enc := NewEncoder(Options{})
			decs[i] = NewDecoder(Options{})
			for range corpusWarm {
				for _, m := range msgs {
					out, _ = decs[i].Decode(out[:0], enc.Encode(nil, m))
				}
			}
			// Payloads of later passes differ from the first (the
			// model keeps learning); b.N passes of the same ones would
			// fail their checks, so each pass gets its own.
			payloads[i] = make([][]byte, 0, b.N*len(msgs))
			for range b.N {
				for _, m := range msgs {
					payloads[i] = append(payloads[i], enc.Encode(nil, m))
				}
			}
		}
		b.SetBytes(int64(raw))
		b.ReportAllocs()
		b.ResetTimer()
		for n := range b.N {
			for i, msgs := range sets {
				for j := range msgs {
					var err error
					if out, err = decs[i].Decode(out[:0], payloads[i][n*len(msgs)+j]); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
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
