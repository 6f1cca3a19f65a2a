package codec

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
)

// headMsg is a tunnel message: an envelope head and a body.
func headMsg(h interface{ Append([]byte) []byte }, body string) []byte {
	return append(h.Append(nil), body...)
}

func reqHead(id int, op string, cl int64, extra ...httpwire.Field) *envelope.Request {
	h := httpwire.Header{
		{Name: "Host", Value: "billing.example.com:8080"},
		{Name: "Content-Type", Value: `text/xml; charset="utf-8"`},
		{Name: "SOAPAction", Value: `"urn:Charging#` + op + `"`},
		{Name: "User-Agent", Value: "Axis/1.0"},
		{Name: "Content-Length", Value: strconv.FormatInt(cl, 10)},
	}
	return &envelope.Request{
		ExchangeID: fmt.Sprintf("9f3a1c2e-%d", id), Upstream: "billing", Method: "POST", Target: "/axis/services/Charging",
		ProtoMinor: 0, ContentLength: cl, Header: append(h, extra...),
	}
}

func respHead(cl int64, date string) *envelope.Response {
	return &envelope.Response{Status: 200, Reason: "OK", ProtoMinor: 1, ContentLength: cl, Header: httpwire.Header{
		{Name: "Content-Type", Value: "text/xml;charset=utf-8"},
		{Name: "Date", Value: date},
		{Name: "Server", Value: "Apache-Coyote/1.1"},
		{Name: "Content-Length", Value: strconv.FormatInt(cl, 10)},
	}}
}

// headRoundTrip codes heads in order through one model per side and checks each rebuilds
// byte for byte and both models stay identical; it returns the coded size of each.
func headRoundTrip(t *testing.T, msgs [][]byte) []int {
	t.Helper()
	enc, dec := newHeadModel(), newHeadModel()
	var sizes []int
	for i, msg := range msgs {
		kind, list, fixed, body, ok := enc.splitHead(msg)
		require.True(t, ok, "message %d has a canonical head", i)
		coded, ref := enc.encode(nil, kind, list, fixed)
		enc.commit(kind, list, fixed)
		got, gotRef, rest, err := dec.decode(coded, kind, 1<<20)
		require.NoError(t, err, "message %d", i)
		require.Empty(t, rest)
		require.Equal(t, ref, gotRef)
		out, ok := appendHead(nil, kind, got)
		require.True(t, ok)
		dec.commit(kind, got, fixedFields(kind))
		require.Equal(t, msg[:len(msg)-len(body)], out, "message %d head rebuilt byte for byte", i)
		require.Equal(t, enc.digest(), dec.digest(), "message %d: models differ", i)
		sizes = append(sizes, len(coded))
	}
	return sizes
}

func TestHeadModelRoundTrip(t *testing.T) {
	var msgs [][]byte
	ops := []string{"credit", "confirm", "reserve", "confirm", "debit"}
	for i := range 200 {
		op := ops[i%len(ops)]
		cl := int64(600 + i%37)
		msgs = append(msgs, headMsg(reqHead(1000+i, op, cl), "<x/>"))
		msgs = append(msgs, headMsg(respHead(int64(400+i%11), fmt.Sprintf("Sun, 22 Nov 2026 10:%02d:%02d GMT", i/60, i%60)), "<y/>"))
	}
	msgs = append(msgs,
		headMsg(&envelope.Error{Status: 502, Cause: "upstream_down", Message: "soapgw: upstream refused"}, ""),
		headMsg(&envelope.Error{Status: 504, Cause: "upstream_timeout", Message: "soapgw: upstream timed out"}, ""),
		headMsg(&envelope.Request{ExchangeID: "x", Upstream: "u", Method: "GET", Target: "/svc?wsdl", ContentLength: -1, Expect: true}, ""),
		headMsg(&envelope.Response{Status: 599, ContentLength: -1}, "chunked body"),
	)
	sizes := headRoundTrip(t, msgs)
	// Steady state: a request head costs its reference byte and, for the operation
	// that interleaves unevenly (confirm), its exchange id step; a response head its
	// length's delta (the header's Content-Length follows the envelope's, the Date its
	// step) and a few run bytes.
	var total int
	for _, n := range sizes[100:400] {
		total += n
	}
	mean := float64(total) / 300
	t.Logf("mean coded head: %.1f bytes (raw request head %d, response head %d)", mean, len(reqHead(1, "credit", 600).Append(nil)), len(respHead(400, "Sun, 22 Nov 2026 10:00:00 GMT").Append(nil)))
	require.Less(t, mean, 4.0)
}

// Credentials are coded literally every time and never kept in the model.
func TestHeadModelSensitiveNeverStored(t *testing.T) {
	secret := "Basic c29hcDpzM2NyM3Q="
	auth := httpwire.Field{Name: "Authorization", Value: secret}
	m1 := headMsg(reqHead(1, "credit", 10, auth), "")
	m2 := headMsg(reqHead(2, "credit", 10, auth), "")
	enc := newHeadModel()
	for _, m := range [][]byte{m1, m2} {
		kind, list, fixed, _, ok := enc.splitHead(m)
		require.True(t, ok)
		coded, _ := enc.encode(nil, kind, list, fixed)
		require.Contains(t, string(coded), secret, "a credential is sent literally, even when unchanged")
		enc.commit(kind, list, fixed)
	}
	for _, refs := range enc.refs {
		for _, r := range refs {
			for _, s := range append(r.val, r.pred...) {
				require.NotContains(t, s, "c29hcD", "a credential must not stay in the model")
			}
		}
	}
	headRoundTrip(t, [][]byte{m1, m2})
}

// Hostile payloads: errors wrapping ErrCorrupt or ErrTooLarge, never a panic.
func TestHeadModelHostile(t *testing.T) {
	dec := newHeadModel()
	m := headMsg(reqHead(1, "credit", 10), "")
	kind, list, fixed, _, _ := dec.splitHead(m)
	dec.commit(kind, list, fixed)
	cases := map[string][]byte{
		"empty":               {},
		"reference too high":  {5, 1, 0},
		"huge count":          {noRef, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"same-run beyond ref": {0, 40, 0x3f},
		"delta without ref":   {noRef, 1, opDelta, 2},
		"delta on non-number": {0, 1, opDelta, 2},
		"edit out of bounds":  {0, 1, opEdit, 100, 0, 0},
		"literal too long":    {noRef, 1, opLiteral, 0x7f, 'a'},
		"unknown op":          {noRef, 1, 0x7e},
		"sensitive on plain":  {noRef, 1, opSensitive, 1, 'a'},
		"ops end early":       {0, 3, 0},
		"unknown ref flag":    {0x20, 1, 0},
		"both ref flags":      {refSameCount | refPredicted},
		"predicted beyond":    {refSameCount, opPredMax},
		"predicted no ref":    {noRef, 1, opPredicted},
		"skip beyond ref":     {0, 40, 16, opSkip, 0},
		"skip to unknown op":  {0, 3, opSkip | 7},
		"skip past count":     {0, 1, opSkip | opDelta - opLiteral, 2},
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, _, err := dec.decode(p, envelope.KindRequest, 1<<20)
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
	// Output bounded: a run of the reference's strings past maxBytes is refused.
	for _, p := range [][]byte{{0, byte(len(list)), byte(len(list) - 1)}, {refPredicted}, {refSameCount, opPredicted + byte(len(list)-1)}} {
		_, _, _, err := dec.decode(p, envelope.KindRequest, 10)
		require.ErrorIs(t, err, ErrTooLarge)
	}
}

// A head that does not rebuild byte for byte from its fields (here: a non-minimal length
// prefix) is not head-coded: the whole message goes to the body coder.
func TestSplitHeadNonCanonical(t *testing.T) {
	m := headMsg(reqHead(1, "credit", 10), "<x/>")
	_, _, _, _, ok := newHeadModel().splitHead(m)
	require.True(t, ok)
	head, body, err := envelope.Split(m)
	require.NoError(t, err)
	odd := append([]byte{byte(len(head)) | 0x80, 0}, head...) // same length, two-byte uvarint
	odd = append(odd, body...)
	_, _, _, _, ok = newHeadModel().splitHead(odd)
	require.False(t, ok)
	_, _, _, _, ok = newHeadModel().splitHead([]byte("<not-an-envelope/>"))
	require.False(t, ok)
	require.False(t, bytes.Equal(odd, m))
}

func FuzzHeadModelDecode(f *testing.F) {
	f.Add([]byte{0, 3, 0, opLiteral, 1, 'x'}, byte(envelope.KindRequest))
	f.Add([]byte{refPredicted}, byte(envelope.KindRequest))
	f.Add([]byte{refPredicted}, byte(envelope.KindResponse))
	f.Add([]byte{refSameCount, opSkip | 3<<3 | opTailDelta - opLiteral, 2, opPredicted + 11}, byte(envelope.KindRequest))
	f.Add([]byte{noRef, 4, opLiteral, 3, '2', '0', '0', opLiteral, 0, opLiteral, 1, '1', opLiteral, 2, '-', '1'}, byte(envelope.KindResponse))
	f.Fuzz(func(t *testing.T, p []byte, kind byte) {
		dec := newHeadModel()
		m := headMsg(reqHead(1, "credit", 10), "")
		k, list, fixed, _, _ := dec.splitHead(m)
		dec.commit(k, list, fixed)
		// Heads with steps (ids, lengths, dates) and links to predict from.
		for _, m := range [][]byte{
			headMsg(reqHead(2, "credit", 12), ""),
			headMsg(respHead(400, "Sun, 22 Nov 2026 10:00:00 GMT"), ""),
			headMsg(respHead(410, "Sun, 22 Nov 2026 10:00:01 GMT"), ""),
		} {
			k, list, fixed, _, _ := dec.splitHead(m)
			dec.commit(k, list, fixed)
		}
		got, _, _, err := dec.decode(p, kind, 1<<16)
		if err != nil {
			return
		}
		total := 0
		for _, s := range got {
			total += len(s)
		}
		require.LessOrEqual(t, total, 1<<16)
		_, _ = appendHead(nil, kind, got) // must not panic on any list
	})
}

// legacyHead is the request head of a legacy client (Axis 1.0, nine header fields) whose
// exchange id and X-Bench-Call counter both advance by one per message, for a body of n
// bytes.
func legacyHead(i, n int) *envelope.Request {
	return &envelope.Request{ExchangeID: "5e1f00a2-" + strconv.Itoa(i), Upstream: "svc", Method: "POST",
		Target: "/axis/services/Calendar", ContentLength: int64(n), Header: httpwire.Header{
			{Name: "Content-Type", Value: "text/xml; charset=utf-8"},
			{Name: "Accept", Value: "application/soap+xml, application/dime, multipart/related, text/*"},
			{Name: "User-Agent", Value: "Axis/1.0"},
			{Name: "Host", Value: "10.77.0.2:8080"},
			{Name: "Cache-Control", Value: "no-cache"},
			{Name: "Pragma", Value: "no-cache"},
			{Name: "SOAPAction", Value: `""`},
			{Name: "Content-Length", Value: strconv.Itoa(n)},
			{Name: "X-Bench-Call", Value: "stress/" + strconv.Itoa(i)},
		}}
}

// oddHead carries values that look numeric but do not round-trip through a number.
func oddHead(i int) *envelope.Request {
	return &envelope.Request{ExchangeID: fmt.Sprintf("id-%03d", i), Upstream: "svc", Method: "POST",
		Target: "/svc", ContentLength: int64(100 + i), Header: httpwire.Header{
			{Name: "X-Zero-Padded", Value: fmt.Sprintf("%03d", i)},             // 007, 008...
			{Name: "X-Neg-Zero", Value: []string{"-0", "0", "-0", "-1"}[i%4]},  // "-0" is not canonical
			{Name: "X-Huge", Value: fmt.Sprintf("1844674407370955161%d", 5+i)}, // beyond int64
			{Name: "X-Max", Value: strconv.FormatInt(math.MaxInt64-int64(i), 10)},
			{Name: "X-Eighteen", Value: strconv.FormatInt(999999999999999990+int64(i), 10)}, // crosses 18 digits
			{Name: "X-Plus", Value: "+" + strconv.Itoa(i)},
			{Name: "X-Cross", Value: strconv.Itoa(i - 12)}, // -2, -1, 0, 1...
			{Name: "Content-Length", Value: strconv.Itoa(100 + i)},
		}}
}

// TestHeadModelSteadyCost shows what a head costs once the model has seen a few of its
// kind (the head model's part of the payload; the token codec adds its flags and kind
// bytes). Before predictions (same/delta/edit ops against the reference only), the
// cases cost, mean/max: 7/7, 7.95/11, 6.97/10, 42.2/44 and 32/32 bytes.
func TestHeadModelSteadyCost(t *testing.T) {
	dates := func(i int) string { // advancing by 0 or 1 s, one tick every third response
		return time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC).Add(time.Duration(i/3) * time.Second).Format(httpDate)
	}
	lengths := []int64{412, 398, 431, 431, 2205, 404, 398, 417}
	ops := []string{"credit", "confirm", "reserve", "confirm", "debit"}
	for _, tc := range []struct {
		name     string
		msg      func(i int) []byte
		max      float64 // mean steady bytes per head
		maxEvery int     // no steady head costs more
	}{
		// Everything as predicted: the reference byte alone.
		{"legacy request, ids +1", func(i int) []byte { return headMsg(legacyHead(1000+i, 431), "") }, 1, 1},
		// The length's delta in an op byte that also covers the status, reason and
		// protocol, and a run for the rest (the header's Content-Length follows the
		// envelope's); the Date's tick, when a reference does not predict it, costs 2.
		{"response, date +0/+1 s, length varying", func(i int) []byte {
			return headMsg(respHead(lengths[i%len(lengths)]+int64(i%3), dates(i)), "")
		}, 5, 6},
		// Each operation codes against its own last head. confirm comes back after 2
		// and 3 heads alternately: its exchange id step is not the predicted one.
		{"interleaved kinds and operations", func(i int) []byte {
			if i%2 == 1 {
				return headMsg(respHead(400+int64(i%11), dates(i)), "")
			}
			return headMsg(reqHead(1000+i/2, ops[i/2%len(ops)], 600), "")
		}, 3.5, 5},
		// "007", "-0", numbers beyond int64 or 18 digits: never stepped as numbers, but
		// coded exactly (edits), and the canonical ones around them still predicted.
		{"numeric-looking values that do not round-trip", func(i int) []byte { return headMsg(oddHead(i), "") }, 34, 36},
		// A credential travels literally every time (the rest is predicted around it).
		{"credential", func(i int) []byte {
			h := legacyHead(1000+i, 431)
			h.Header = append(h.Header, httpwire.Field{Name: "Authorization", Value: "Basic c29hcDpzM2NyM3Q="})
			return headMsg(h, "")
		}, 28, 28},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs [][]byte
			for i := range 60 {
				msgs = append(msgs, tc.msg(i))
			}
			sizes := headRoundTrip(t, msgs)
			steady := sizes[20:]
			total, worst := 0, 0
			for _, n := range steady {
				total += n
				worst = max(worst, n)
			}
			mean := float64(total) / float64(len(steady))
			t.Logf("steady head: mean %.2f B, max %d B (raw head %d B; sizes %v)", mean, worst, len(msgs[len(msgs)-1]), steady[:12])
			require.LessOrEqual(t, mean, tc.max)
			require.LessOrEqual(t, worst, tc.maxEvery)
		})
	}
}

// randomHeads returns heads whose values step, jump, lose or gain leading zeros and
// signs, cross int64 and date ranges, and whose header lists grow and shrink.
func randomHeads(seed uint64, n int) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 2))
	values := []func(prev string) string{
		func(string) string { return strconv.Itoa(rng.IntN(3) - 1) },
		func(string) string { return []string{"-0", "00", "007", "+1", "1e3", "0x10", " 1", "1 "}[rng.IntN(8)] },
		func(prev string) string { // steps of a trailing number, sometimes zero-padded
			n, _ := strconv.Atoi(strings.TrimLeft(prev[strings.LastIndexAny(prev, "-/")+1:], "0"))
			n += []int{1, 1, 1, 2, -1, 0, 1000}[rng.IntN(7)]
			if rng.IntN(5) == 0 {
				return fmt.Sprintf("call/%05d", n)
			}
			return "call/" + strconv.Itoa(n)
		},
		func(string) string {
			return []string{"9223372036854775807", "-9223372036854775808", "99999999999999999", "999999999999999999",
				"1000000000000000000", "18446744073709551616"}[rng.IntN(6)]
		},
		func(string) string {
			s := int64([]int{0, 1, 1, 2, 3600, -1}[rng.IntN(6)])
			return time.Date(9999, 12, 31, 23, 59, 58, 0, time.UTC).Add(time.Duration(s) * time.Second).Format(httpDate)
		},
		func(string) string { return "Basic " + strconv.Itoa(rng.IntN(100)) },
	}
	names := []string{"X-Small", "X-Odd", "X-Call", "X-Big", "Date", "Authorization"}
	var msgs [][]byte
	cur := make([]string, len(names))
	for i := range cur {
		cur[i] = values[i]("call/1")
	}
	cl := int64(100)
	for i := range n {
		for j := range cur {
			if rng.IntN(3) == 0 {
				cur[j] = values[j](cur[j])
			}
		}
		if rng.IntN(4) == 0 {
			cl = max(-1, cl+int64(rng.IntN(21)-10))
		}
		var h httpwire.Header
		for j, name := range names {
			if rng.IntN(8) != 0 {
				h = append(h, httpwire.Field{Name: name, Value: cur[j]})
			}
		}
		h = append(h, httpwire.Field{Name: "Content-Length", Value: strconv.FormatInt(cl+int64(rng.IntN(2)), 10)})
		if i%3 == 2 {
			msgs = append(msgs, headMsg(&envelope.Response{Status: 200 + rng.IntN(2), Reason: "OK", ProtoMinor: 1, ContentLength: cl, Header: h}, ""))
			continue
		}
		msgs = append(msgs, headMsg(&envelope.Request{ExchangeID: "ex-" + strconv.Itoa(i/2+rng.IntN(2)), Upstream: "svc", Method: "POST",
			Target: "/svc", ContentLength: cl, Header: h}, ""))
	}
	return msgs
}

// Random heads (randomHeads) rebuild byte for byte and both models stay identical.
func TestHeadModelRandomRoundTrip(t *testing.T) {
	headRoundTrip(t, randomHeads(1, 3000))
}

// TestHeadModelOutputPinned fails when the head model codes any of a varied set of heads
// differently: numbers that do and do not round-trip, dates near the ends of 4-digit
// years, credentials, interleaved kinds, errors. (TestTokenFormatPinned covers the
// generated traffic; this covers the odd values.) A change here is a wire format change:
// bump TokenFormat.
func TestHeadModelOutputPinned(t *testing.T) {
	const pinned = "44a0cc6663eb0176c70359f7b3f58e2f"
	var msgs [][]byte
	msgs = append(msgs, randomHeads(7, 2000)...)
	for i := range 60 {
		msgs = append(msgs, headMsg(oddHead(i), ""))
		h := legacyHead(1000+i, 431+i%3)
		h.Header = append(h.Header, httpwire.Field{Name: "Authorization", Value: "Basic c29hcDpzM2NyM3Q="})
		msgs = append(msgs, headMsg(h, ""))
		date := time.Date(1969, 12, 31, 23, 59, 50, 0, time.UTC).Add(time.Duration(i*i) * time.Second).Format(httpDate)
		msgs = append(msgs, headMsg(respHead(int64(90+i*7), date), ""))
		date = time.Date(0, 1, 1, 0, 0, 10, 0, time.UTC).Add(-time.Duration(i) * time.Second).Format(httpDate)
		msgs = append(msgs, headMsg(respHead(int64(i), date), ""))
		msgs = append(msgs, headMsg(&envelope.Error{Status: 502 + i%3, Cause: "upstream_down", Message: "soapgw: upstream refused " + strconv.Itoa(i)}, ""))
	}
	enc := newHeadModel()
	h := sha256.New()
	for _, msg := range msgs {
		kind, list, fixed, _, ok := enc.splitHead(msg)
		if !ok {
			h.Write([]byte{0})
			continue
		}
		coded, _ := enc.encode(nil, kind, list, fixed)
		enc.commit(kind, list, fixed)
		h.Write(binary.AppendUvarint(nil, uint64(len(coded))))
		h.Write(coded)
	}
	got := hex.EncodeToString(h.Sum(nil))[:32]
	require.Equal(t, pinned, got, "the head model's output changed: a wire format change")
}

// In steady state (the model has remembered headRefs heads of each kind) the head model
// allocates nothing: splitting, coding and remembering a head, and decoding, rebuilding
// and remembering it, on every family direction.
func TestHeadModelZeroAllocs(t *testing.T) {
	for _, set := range headBenchSets(true) {
		t.Run(set.name, func(t *testing.T) {
			msgs := set.msgs
			enc, dec := newHeadModel(), newHeadModel()
			var p, out []byte
			warm := max(len(msgs), 2*headRefs) // a pass, and headRefs heads at least
			for i := range warm {
				m := msgs[i%len(msgs)]
				var kind byte
				var err error
				p, kind = encodeHead(enc, p[:0], m)
				out, err = decodeHead(dec, out[:0], p, kind)
				require.NoError(t, err, "message %d", i)
				require.Equal(t, headOf(t, m), out, "message %d", i)
			}
			runs := min(len(msgs), 200)
			// The decoder's payloads, coded ahead by a second encoder in step with the first.
			ahead := newHeadModel()
			for i := range warm {
				p, _ = encodeHead(ahead, p[:0], msgs[i%len(msgs)])
			}
			payloads := make([][]byte, runs+1)
			kinds := make([]byte, runs+1)
			for i := range payloads {
				payloads[i], kinds[i] = encodeHead(ahead, nil, msgs[(warm+i)%len(msgs)])
			}

			i := warm
			allocs := testing.AllocsPerRun(runs, func() {
				p, _ = encodeHead(enc, p[:0], msgs[i%len(msgs)])
				i++
			})
			require.Zero(t, allocs, "allocations per head encoded")
			require.Equal(t, ahead.digest(), enc.digest(), "the encoders went out of step")

			i = 0
			var err error
			allocs = testing.AllocsPerRun(runs, func() {
				out, err = decodeHead(dec, out[:0], payloads[i], kinds[i])
				i++
			})
			require.NoError(t, err)
			require.Equal(t, headOf(t, msgs[(warm+runs)%len(msgs)]), out)
			require.Zero(t, allocs, "allocations per head decoded")
			require.Equal(t, enc.digest(), dec.digest())
		})
	}
}

// FuzzHeadModelRoundTrip codes message sequences whose heads the fuzzer changes (data
// split at 0xfe bytes; seeds are real heads, credentials and odd values included)
// through one token pair: every message decodes to itself, and both ends' models stay
// identical, whatever mix of coded heads, heads in the body and no heads.
func FuzzHeadModelRoundTrip(f *testing.F) {
	var seq [][]byte
	for i := range 12 {
		seq = append(seq, headMsg(legacyHead(1000+i, 300), "<x/>"), headMsg(respHead(int64(400+i%3), "Sun, 22 Nov 2026 10:00:0"+strconv.Itoa(i%10)+" GMT"), "<y/>"))
		seq = append(seq, headMsg(oddHead(i), ""))
	}
	f.Add(bytes.Join(seq, []byte{0xfe}))
	f.Add(bytes.Join(randomHeads(21, 30), []byte{0xfe}))
	c, err := NewToken()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		enc, err := c.NewEncoder()
		require.NoError(t, err)
		dec, err := c.NewDecoder(Limits{})
		require.NoError(t, err)
		var p, out []byte
		for i, m := range bytes.Split(data, []byte{0xfe}) {
			p, err = enc.Encode(p[:0], m)
			require.NoError(t, err)
			out, err = dec.Decode(out[:0], p)
			require.NoError(t, err, "message %d", i)
			require.True(t, bytes.Equal(m, out), "message %d: %q decoded as %q", i, m, out)
			require.Equal(t, enc.(*TokenEncoder).Digest(), dec.(*TokenDecoder).Digest(), "message %d", i)
		}
	})
}
