package xmltok

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// proseMsg wraps a text value in an element, as a SOAP body would.
func proseMsg(text string) []byte {
	return []byte("<r><report>" + text + "</report></r>")
}

// report is a template report with figures from r.
func report(r *rand.Rand) string {
	return fmt.Sprintf("Conditions at %02d:%02d: temperature %d.%d C, humidity %d%%, wind %s at %d km/h. "+
		"Rain since 9am %d.%d mm. Sunrise %02d:%02d.",
		r.IntN(24), r.IntN(60), 10+r.IntN(25), r.IntN(10), 20+r.IntN(80), []string{"N", "SW", "E"}[r.IntN(3)],
		r.IntN(60), r.IntN(20), r.IntN(10), 5+r.IntN(2), r.IntN(60))
}

func TestProseRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	long := strings.Repeat("word ", 400) + "and 123 then"
	manyNumbers := strings.Repeat("a 1 b 22 c 333 ", 200)
	tests := []struct {
		name  string
		texts []string
	}{
		{"template with changing figures", []string{report(r), report(r), report(r), report(r)}},
		{"leading zeros and widths", []string{
			"at 05 past 007 then 0 and 00 and 000000000000000001 of the runs here",
			"at 16 past 7 then 10 and 00 and 1 of the runs here today, with more",
			"at 00 past 0007 then 0 and 5 and 999999999999999999 of the runs here",
		}},
		{"digit runs past 18 digits", []string{
			"the id is 1234567890123456789012345678901234567890 and the key is 00000000000000000000000 at the end",
			"the id is 9234567890123456789012345678901234567891 and the key is 10000000000000000000000 at the end",
		}},
		{"starts and ends with numbers", []string{
			"12 items were shipped to the customer on day 3 of 7 in week 44",
			"13 items were shipped to the customer on day 4 of 7 in week 45",
		}},
		{"sentence inserted and removed", []string{
			"Wind 10 km/h. Rain 2 mm. Sun 5 hours. Cloud 3 octas. Fog none at all today.",
			"Wind 11 km/h. Hail 4 cm, damage 17 cars. Rain 2 mm. Sun 5 hours. Cloud 3 octas. Fog none.",
			"Wind 12 km/h. Rain 3 mm. Sun 6 hours. Cloud 1 octas. Fog none at all today.",
		}},
		{"word past maxWord", []string{strings.Repeat("x y ", 100) + "7 " + strings.Repeat("z ", 200), strings.Repeat("x y ", 100) + "8 " + strings.Repeat("z ", 200)}},
		{"more tokens than slots", []string{long, long, manyNumbers, manyNumbers}},
		{"non-ASCII and controls", []string{"Température 21 °C, humidité 40 %, vent 12 km/h \x01\x02 ok and done", "Température 22 °C, humidité 41 %, vent 13 km/h \x01\x02 ok and done"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, o := range []Options{{}, {DictBytes: 300}} {
				p := newPair(o)
				for i, text := range tc.texts {
					require.True(t, isProse([]byte(text)), "text %d is not prose", i)
					p.roundTrip(t, proseMsg(text))
				}
				checkProseBudget(t, p.enc.m)
				checkProseBudget(t, p.dec.m)
			}
		})
	}
}

// A report whose template repeats costs its figures, and an unchanged
// report next to nothing.
func TestProseTemplateCost(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	p := newPair(Options{})
	var cold, warm int
	const n = 400
	for i := range n {
		size := p.roundTrip(t, proseMsg(report(r)))
		switch {
		case i == 0:
			cold = size
		case i >= n/2:
			warm += size
		}
	}
	warm /= n / 2
	t.Logf("cold %d bytes, warm %d bytes", cold, warm)
	// The figures of a report are about 47 random bits (6 bytes).
	require.Less(t, warm, 10, "a warm report costs more than its figures")
	require.Less(t, warm*3, cold)
	same := proseMsg(report(r))
	p.roundTrip(t, same)
	require.LessOrEqual(t, p.roundTrip(t, same), 12, "an unchanged report")
}

// The slot budgets hold however many prose fields a stream has, and a
// field whose context slot is reused gives its slots back.
func TestProseSlotBudget(t *testing.T) {
	p := newPair(Options{})
	for i := range 300 {
		// A new element name per message: a new value context, so a new
		// prose field, until contexts collide and fields are dropped.
		msg := fmt.Appendf(nil, "<f%d>%s</f%d>", i, strings.Repeat(fmt.Sprintf("w%d %d ", i, i), 60), i)
		p.roundTrip(t, msg)
	}
	for _, m := range []*model{p.enc.m, p.dec.m} {
		checkProseBudget(t, m)
		require.Equal(t, maxProseTotal, m.proseSlots, "the total budget was never reached")
	}
}

func checkProseBudget(t *testing.T, m *model) {
	t.Helper()
	total := 0
	for _, x := range m.ctx {
		if x != nil && x.prose != nil {
			require.LessOrEqual(t, len(x.prose.slots), maxProseSlots)
			total += len(x.prose.slots)
		}
	}
	require.Equal(t, total, m.proseSlots, "slot count out of step with the fields")
	require.LessOrEqual(t, total, maxProseTotal)
}

// reportStream returns n generated reports in messages and their
// payloads from one encoder, in order.
func reportStream(seed uint64, n int) (msgs, payloads [][]byte) {
	r := rand.New(rand.NewPCG(seed, seed+1))
	enc := NewEncoder(Options{})
	for range n {
		m := proseMsg(report(r))
		msgs = append(msgs, m)
		payloads = append(payloads, enc.Encode(nil, m))
	}
	return msgs, payloads
}

// warmDecoder returns a decoder that has decoded all but the last of
// payloads, checking each against msgs.
func warmDecoder(t *testing.T, msgs, payloads [][]byte) *Decoder {
	dec := NewDecoder(Options{})
	for j, pl := range payloads[:len(payloads)-1] {
		out, err := dec.Decode(nil, pl)
		require.NoError(t, err)
		require.Equal(t, msgs[j], out)
	}
	return dec
}

// Payloads that name impossible prose tokens fail with ErrCorrupt.
func TestProseCorruptPayloads(t *testing.T) {
	msgs, payloads := reportStream(5, 20)
	last := payloads[len(payloads)-1]
	failed := 0
	for i := 1; i < len(last); i++ {
		for _, flip := range []byte{0x01, 0x80, 0xFF} {
			dec := warmDecoder(t, msgs, payloads)
			bad := bytes.Clone(last)
			bad[i] ^= flip
			out, err := dec.Decode(nil, bad)
			if err == nil {
				// A flip may decode to another valid message; the
				// tunnel's checksum catches it. It must still be bounded.
				require.LessOrEqual(t, len(out), defaultMaxMessage)
				continue
			}
			require.ErrorIs(t, err, ErrCorrupt)
			failed++
		}
	}
	require.Positive(t, failed, "no corruption was detected")
}

// TestProseTruncatedPayloads: every truncation of a report's payload
// fails with ErrCorrupt or decodes to something else, never the report,
// and never panics. The prose decoder checks for reading past the
// payload once, after a report's text, not per token.
func TestProseTruncatedPayloads(t *testing.T) {
	msgs, payloads := reportStream(7, 10)
	last := payloads[len(payloads)-1]
	failed := 0
	for n := 1; n < len(last); n++ {
		out, err := warmDecoder(t, msgs, payloads).Decode(nil, last[:n])
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			failed++
			continue
		}
		require.NotEqual(t, msgs[len(msgs)-1], out, "truncated at %d of %d bytes", n, len(last))
	}
	require.Positive(t, failed, "no truncation was detected")
}
