package codec

import (
	"testing"

	"github.com/soapgw/soapgw/internal/soapdemo"
	"github.com/soapgw/soapgw/internal/trafficgen"
)

// benchFamily is a sequence of messages of one direction, in order.
type benchFamily struct {
	name string
	// msg returns message i; ok false ends a pass (the pair is then renewed, so that a
	// short corpus is not compressed against its own earlier passes).
	msg func(i int) (m []byte, ok bool)
}

func benchFamilies(b *testing.B) []benchFamily {
	fams := []benchFamily{
		{"stress-request", func(i int) ([]byte, bool) { return soapdemo.StressRequest(i), true }},
		{"stress-response", func(i int) ([]byte, bool) { return soapdemo.StressResponse(i), true }},
	}
	// The generated traffic of internal/trafficgen (the committed corpus's generator, a longer
	// run): one family per direction, in wire order, as one connection direction sees it.
	for _, name := range trafficgen.Families {
		byDir := map[string][][]byte{}
		for _, m := range trafficgen.Family(name, familyRun(name), trafficgen.DefaultSeed) {
			byDir[m.Dir] = append(byDir[m.Dir], m.Body)
		}
		for _, dir := range []string{trafficgen.Request, trafficgen.Response} {
			msgs := byDir[dir]
			if len(msgs) == 0 {
				continue
			}
			fams = append(fams, benchFamily{name + "-" + dir, func(i int) ([]byte, bool) {
				if i >= len(msgs) {
					return nil, false
				}
				return msgs[i], true
			}})
		}
	}
	return fams
}

// benchCodecs are the registry's codecs plus a reference: zstd at its best level with
// context across messages, the strongest general compressor the targets compare with.
func benchCodecs(b *testing.B) []Codec {
	cs, err := Set(Options{})
	if err != nil {
		b.Fatal(err)
	}
	best, err := NewZstdStream(ZstdLevel(19))
	if err != nil {
		b.Fatal(err)
	}
	return append(cs, namedCodec{best, "zstd-stream-best"})
}

type namedCodec struct {
	Codec
	name string
}

func (c namedCodec) Name() string { return c.name }

// BenchmarkCodecs runs the messages of each family, in order, through one encoder and
// decoder pair per codec; an op is one message encoded and decoded.
func BenchmarkCodecs(b *testing.B) {
	for _, fam := range benchFamilies(b) {
		for _, c := range benchCodecs(b) {
			b.Run(fam.name+"/"+c.Name(), func(b *testing.B) { benchCodec(b, c, fam) })
		}
	}
}

// familyRun is how many messages of a trafficgen family the benchmarks and the state
// test code: a long run, but 20 of the large Northwind DataSets, and every edge case but
// the 2 MB array of doubles.
func familyRun(name string) int {
	switch name {
	case "northwind":
		return 20
	case "edge":
		return trafficgen.DefaultN(name) - 1
	}
	return 2000
}

// codecPair is a fresh encoder and decoder of c.
func codecPair(tb testing.TB, c Codec) (Encoder, Decoder) {
	tb.Helper()
	enc, err := c.NewEncoder()
	if err != nil {
		tb.Fatal(err)
	}
	dec, err := c.NewDecoder(Limits{})
	if err != nil {
		tb.Fatal(err)
	}
	return enc, dec
}

func benchCodec(b *testing.B, c Codec, fam benchFamily) {
	const batch = 4096
	newPair := func() (Encoder, Decoder) { return codecPair(b, c) }
	// renew restarts a pair for a new pass: stateful codecs are reset in place (a new
	// pair's allocations would otherwise be paid for by the GC in timed code).
	renew := func(enc Encoder, dec Decoder) (Encoder, Decoder) {
		type resetter interface{ reset() }
		re, ok1 := enc.(resetter)
		rd, ok2 := dec.(resetter)
		if ok1 && ok2 {
			re.reset()
			rd.reset()
			return enc, dec
		}
		if ok1 || ok2 {
			return newPair()
		}
		return enc, dec // stateless
	}
	// Size the op from the first batch (or the whole corpus).
	var raw int64
	var n int
	for ; n < batch; n++ {
		m, ok := fam.msg(n)
		if !ok {
			break
		}
		raw += int64(len(m))
	}
	if n == 0 {
		b.Skip("no messages")
	}
	b.SetBytes(raw / int64(n))
	b.ReportAllocs()

	enc, dec := newPair()
	var msgs [][]byte
	var next, pos int // next message index of the pass; position in msgs
	var payload, out []byte
	var totalRaw, totalCoded int64
	b.ResetTimer()
	for range b.N {
		if pos == len(msgs) {
			b.StopTimer()
			msgs, pos = msgs[:0], 0
			for len(msgs) < batch {
				m, ok := fam.msg(next)
				if !ok {
					if len(msgs) == 0 { // a new pass: restart the pair
						enc, dec = renew(enc, dec)
						next = 0
						continue
					}
					break
				}
				msgs = append(msgs, m)
				next++
			}
			b.StartTimer()
		}
		m := msgs[pos]
		pos++
		var err error
		payload, err = enc.Encode(payload[:0], m)
		if err != nil {
			b.Fatal(err)
		}
		out, err = dec.Decode(out[:0], payload)
		if err != nil {
			b.Fatal(err)
		}
		if len(out) != len(m) {
			b.Fatal("round trip differs")
		}
		totalRaw += int64(len(m))
		totalCoded += int64(len(payload))
	}
	b.StopTimer()
	b.ReportMetric(float64(totalCoded)/float64(b.N), "bytes/msg")
	b.ReportMetric(100*float64(totalCoded)/float64(max(totalRaw, 1)), "%raw")
}
