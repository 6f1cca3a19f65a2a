package codec

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

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
		kind, list, fixed, body, ok := splitHead(msg)
		require.True(t, ok, "message %d has a canonical head", i)
		coded, ref := enc.encode(nil, kind, list, fixed)
		enc.commit(kind, list, fixed)
		got, gotRef, rest, err := dec.decode(coded, kind, 1<<20)
		require.NoError(t, err, "message %d", i)
		require.Empty(t, rest)
		require.Equal(t, ref, gotRef)
		dec.commit(kind, got, fixedFields(kind))
		out, ok := appendHead(nil, kind, got)
		require.True(t, ok)
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
	// Steady state: a request head costs its exchange id delta, its Content-Length
	// deltas and a few run bytes; a response head its Date edit and lengths.
	var total int
	for _, n := range sizes[100:400] {
		total += n
	}
	mean := float64(total) / 300
	t.Logf("mean coded head: %.1f bytes (raw request head %d, response head %d)", mean, len(reqHead(1, "credit", 600).Append(nil)), len(respHead(400, "Sun, 22 Nov 2026 10:00:00 GMT").Append(nil)))
	require.Less(t, mean, 12.0)
}

// Credentials are coded literally every time and never kept in the model.
func TestHeadModelSensitiveNeverStored(t *testing.T) {
	secret := "Basic c29hcDpzM2NyM3Q="
	auth := httpwire.Field{Name: "Authorization", Value: secret}
	m1 := headMsg(reqHead(1, "credit", 10, auth), "")
	m2 := headMsg(reqHead(2, "credit", 10, auth), "")
	enc := newHeadModel()
	for _, m := range [][]byte{m1, m2} {
		kind, list, fixed, _, ok := splitHead(m)
		require.True(t, ok)
		coded, _ := enc.encode(nil, kind, list, fixed)
		require.Contains(t, string(coded), secret, "a credential is sent literally, even when unchanged")
		enc.commit(kind, list, fixed)
	}
	for _, refs := range enc.refs {
		for _, r := range refs {
			for _, s := range r {
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
	kind, list, fixed, _, _ := splitHead(m)
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
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, _, err := dec.decode(p, envelope.KindRequest, 1<<20)
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
	// Output bounded: a run of the reference's strings past maxBytes is refused.
	_, _, _, err := dec.decode([]byte{0, byte(len(list)), byte(len(list) - 1)}, envelope.KindRequest, 10)
	require.ErrorIs(t, err, ErrTooLarge)
}

// A head that does not rebuild byte for byte from its fields (here: a non-minimal length
// prefix) is not head-coded: the whole message goes to the body coder.
func TestSplitHeadNonCanonical(t *testing.T) {
	m := headMsg(reqHead(1, "credit", 10), "<x/>")
	_, _, _, _, ok := splitHead(m)
	require.True(t, ok)
	head, body, err := envelope.Split(m)
	require.NoError(t, err)
	odd := append([]byte{byte(len(head)) | 0x80, 0}, head...) // same length, two-byte uvarint
	odd = append(odd, body...)
	_, _, _, _, ok = splitHead(odd)
	require.False(t, ok)
	_, _, _, _, ok = splitHead([]byte("<not-an-envelope/>"))
	require.False(t, ok)
	require.False(t, bytes.Equal(odd, m))
}

func FuzzHeadModelDecode(f *testing.F) {
	f.Add([]byte{0, 3, 0, opLiteral, 1, 'x'}, byte(envelope.KindRequest))
	f.Add([]byte{noRef, 4, opLiteral, 3, '2', '0', '0', opLiteral, 0, opLiteral, 1, '1', opLiteral, 2, '-', '1'}, byte(envelope.KindResponse))
	f.Fuzz(func(t *testing.T, p []byte, kind byte) {
		dec := newHeadModel()
		m := headMsg(reqHead(1, "credit", 10), "")
		k, list, fixed, _, _ := splitHead(m)
		dec.commit(k, list, fixed)
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
