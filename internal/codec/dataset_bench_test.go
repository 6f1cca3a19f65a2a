package codec

import (
	"bytes"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/soapgw/soapgw/internal/trafficgen"
)

// BenchmarkDataSetBrotli compares the token codec with streaming brotli-11 on a long run
// of large DataSet responses (issue 19): the Northwind responses of internal/trafficgen,
// 165-450 KB cuts of one Orders table that changes a little between calls, in order
// through one encoder per pass. brotli is at quality 11 with a 16 MiB window (lgwin 24),
// one writer flushed after each response, so it sees every earlier response as a
// gateway's zstd-stream would. One iteration codes the whole run; B/later-msg is the mean
// payload of the responses after the first (the cold one), the figure to compare; MB/s is
// encode speed over the run. brotli-11 codes a few MB/s: run it with -benchtime 1x.
//
//	go test -run '^$' -bench BenchmarkDataSetBrotli -benchtime 1x ./internal/codec/
//
// northwind-3m's DataSets (2.2-3.5 MB) are above codecs.max_coded_message and travel as
// zstd-streaming; they are here to show where the token codec's history stops predicting.
func BenchmarkDataSetBrotli(b *testing.B) {
	for _, run := range []struct {
		fam string
		n   int // responses
	}{{"northwind", 200}, {"northwind-3m", 10}} {
		var msgs [][]byte
		var raw int
		for _, m := range trafficgen.Family(run.fam, 2*run.n, trafficgen.DefaultSeed) {
			if m.Dir == trafficgen.Response {
				msgs = append(msgs, m.Body)
				raw += len(m.Body)
			}
		}
		report := func(b *testing.B, sizes []int) {
			later := 0
			for _, n := range sizes[1:] {
				later += n
			}
			b.SetBytes(int64(raw))
			b.ReportMetric(float64(sizes[0]), "B/first-msg")
			b.ReportMetric(float64(later)/float64(len(sizes)-1), "B/later-msg")
		}
		b.Run(run.fam+"/token", func(b *testing.B) {
			c, err := NewToken()
			if err != nil {
				b.Fatal(err)
			}
			sizes := make([]int, len(msgs))
			var p []byte
			b.ReportAllocs()
			for b.Loop() {
				e, err := c.NewEncoder()
				if err != nil {
					b.Fatal(err)
				}
				for i, m := range msgs {
					if p, err = e.Encode(p[:0], m); err != nil {
						b.Fatal(err)
					}
					sizes[i] = len(p)
				}
			}
			report(b, sizes)
		})
		b.Run(run.fam+"/brotli-11", func(b *testing.B) {
			sizes := make([]int, len(msgs))
			for b.Loop() {
				var out bytes.Buffer
				w := brotli.NewWriterOptions(&out, brotli.WriterOptions{Quality: 11, LGWin: 24})
				for i, m := range msgs {
					before := out.Len()
					if _, err := w.Write(m); err != nil {
						b.Fatal(err)
					}
					if err := w.Flush(); err != nil {
						b.Fatal(err)
					}
					sizes[i] = out.Len() - before
				}
				w.Close()
			}
			report(b, sizes)
		})
	}
}
