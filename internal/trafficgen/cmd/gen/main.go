// Command gen writes the deterministic SOAP traffic corpus of package
// internal/trafficgen:
//
//	go run ./internal/trafficgen/cmd/gen -out testdata/corpus [-n N] [-seed S] [-big]
//
// Without -n each family gets its default count (trafficgen.DefaultN), which is
// what is committed; -big adds the 2 MB array of doubles to edge.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/soapgw/soapgw/internal/trafficgen"
)

func main() {
	out := flag.String("out", "testdata/corpus", "output directory")
	n := flag.Int("n", 0, "messages per family (0: the committed defaults)")
	seed := flag.Int64("seed", trafficgen.DefaultSeed, "random seed")
	big := flag.Bool("big", false, "also write the 2 MB array-of-doubles edge case")
	flag.Parse()
	files := trafficgen.Corpus(*n, *seed, *big)
	if err := trafficgen.WriteCorpus(*out, files); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	total := 0
	for _, b := range files {
		total += len(b)
	}
	fmt.Printf("wrote %d files, %d bytes, to %s\n", len(files), total, *out)
}
