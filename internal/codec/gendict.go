//go:build ignore

// gendict trains the zstd dictionary shipped in the binary (zstd_dict.bin) on the
// generated SOAP traffic of internal/trafficgen, so that per-message zstd starts every message
// with the vocabulary of SOAP envelopes already known. Run from the repository root:
//
//	go run ./internal/codec/gendict.go
package main

import (
	"log"
	"os"

	"github.com/klauspost/compress/zstd"

	"github.com/soapgw/soapgw/internal/trafficgen"
)

func main() {
	var history, sample []byte
	var contents [][]byte
	for _, fam := range trafficgen.Families {
		// A different seed than the committed corpus, so the benchmarks on the corpus do
		// not measure the dictionary against its own training data.
		ms := trafficgen.Family(fam, 60, 7)
		seen := map[string]bool{}
		for _, m := range ms {
			if trafficgen.IsBig(m) || len(m.Body) > 8<<10 {
				continue
			}
			contents = append(contents, m.Body)
			// History: the first message of every operation and direction.
			if k := m.Dir + m.Name; !seen[k] {
				seen[k] = true
				sample = append(sample, m.Body...)
			}
		}
	}
	// zstd uses the end of the history most: keep it within 64 KiB.
	if len(sample) > 64<<10 {
		sample = sample[len(sample)-64<<10:]
	}
	history = sample
	dict, err := zstd.BuildDict(zstd.BuildDictOptions{
		ID:       0x50a96e01,
		Contents: contents,
		History:  history,
		Offsets:  [3]int{1, 4, 8},
		Level:    zstd.SpeedDefault,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("internal/codec/zstd_dict.bin", dict, 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote internal/codec/zstd_dict.bin: %d bytes from %d messages", len(dict), len(contents))
}
