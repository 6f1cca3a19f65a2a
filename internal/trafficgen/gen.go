// Package trafficgen generates deterministic, realistic SOAP traffic modelled on
// the message exchanges described in the research papers under
// /work/shared/seeds (see testdata/README.md). The same family, count and
// seed always give the same bytes, so the committed corpus under
// testdata/corpus can be checked against the generator.
package trafficgen

import (
	"math/rand/v2"
	"strings"
)

// Message is one SOAP message (the HTTP body) of a family, in wire order.
type Message struct {
	Family string // the family name, as passed to Family
	Name   string // the operation or edge case, e.g. "addEntry", "soap11-fault"
	Dir    string // "request" or "response"
	Body   []byte
}

// Directions of a Message.
const (
	Request  = "request"
	Response = "response"
)

// DefaultSeed is the seed of the committed corpus.
const DefaultSeed = 1

// BigName is the Name of the 2 MB array-of-doubles edge case, which the
// committed corpus leaves out (see IsBig).
const BigName = "doubles-2mb"

// Families lists the families of the committed corpus, in corpus order:
// the papers' traffic and the edge cases, which the codecs' dictionaries,
// tests and benchmarks use. Family also knows AttachmentFamilies.
var Families = []string{
	"stress", "deploy", "weather-simple", "weather-detailed",
	"fixml", "northwind", "charging", "wsa", "edge",
}

// AttachmentFamilies are the families of large incompressible responses
// (binary documents inline as base64, about 200 KB and 2 MB), for the
// bench's slow-link scenarios (issue 17). They stay out of Families: in
// the corpus and the codecs' tests they would be megabytes of noise with
// nothing to learn from.
var AttachmentFamilies = []string{"attachment-200k", "attachment-2m"}

// LargeFamilies are XML responses larger than codecs.max_coded_message (1 MiB): Northwind
// DataSets of 2.2-3.5 MB, for the bench (issue 19, "messages over 1 MiB travel uncoded").
// Out of Families for the same reason as the attachments: the corpus would grow by
// megabytes of what northwind already has.
var LargeFamilies = []string{"northwind-3m"}

var generators = map[string]func(n int, r *rand.Rand) []Message{
	"stress":           stress,
	"deploy":           deploy,
	"weather-simple":   weatherSimple,
	"weather-detailed": weatherDetailed,
	"fixml":            fixml,
	"northwind":        northwind,
	"charging":         charging,
	"wsa":              wsa,
	"edge":             edge,
	"attachment-200k":  attachments(200_000),
	"attachment-2m":    attachments(2_000_000),
	"northwind-3m":     northwindLarge,
}

// DefaultN is the number of messages of a family in the committed corpus:
// 40 for most, 4 (two DataSets of 300-830 rows) for northwind, and every
// case for edge (the big one is then left out by the writer, see IsBig).
func DefaultN(family string) int {
	switch family {
	case "northwind":
		return 4
	case "edge":
		return len(edgeCases)
	}
	return 40
}

// Family returns the first n messages of the named family for the seed:
// request/response pairs in wire order (edge: one message per case, in a
// fixed order, the big one last). Unknown families and n <= 0 give nil.
func Family(name string, n int, seed int64) []Message {
	g := generators[name]
	if g == nil || n <= 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(uint64(seed), 0x50a9_6e4e_7261_7466))
	ms := g(n, r)
	if len(ms) > n {
		ms = ms[:n]
	}
	for i := range ms {
		ms[i].Family = name
	}
	return ms
}

// IsBig reports whether m is the 2 MB array of doubles, which is written
// to the corpus only on request (cmd/gen -big).
func IsBig(m Message) bool { return m.Family == "edge" && m.Name == BigName }

// IsXML reports whether m's body is meant to be a well-formed XML document
// (false for the malformed, non-XML and MTOM multipart edge cases).
func IsXML(m Message) bool {
	if m.Family != "edge" {
		return true
	}
	switch m.Name {
	case "malformed-xml", "non-xml", "mtom-multipart":
		return false
	}
	return true
}

// pairs runs one exchange function until n messages are collected.
func pairs(n int, next func(i int) (req, resp Message)) []Message {
	ms := make([]Message, 0, n+1)
	for i := 0; len(ms) < n; i++ {
		q, p := next(i)
		q.Dir, p.Dir = Request, Response
		ms = append(ms, q, p)
	}
	return ms
}

// esc escapes character data the way most SOAP stacks do: only &, < and >.
func esc(s string) string {
	if !strings.ContainsAny(s, "&<>") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }
