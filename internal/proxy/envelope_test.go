package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
)

const testHeadMax = 64<<10 + 4096

// headOf runs readHead over the bytes b.
func headOf(b []byte, max int) ([]byte, error) {
	return readHead(bufio.NewReader(bytes.NewReader(b)), max)
}

// normHeader treats a nil and an empty header as equal: the parser always allocates.
func normHeader(h httpwire.Header) httpwire.Header {
	if len(h) == 0 {
		return nil
	}
	return h
}

func decodeRequest(t testing.TB, b []byte) (*requestHead, error) {
	t.Helper()
	head, err := headOf(b, 1<<20)
	if err != nil {
		return nil, err
	}
	return envelope.ParseRequest(head)
}

func decodeResponse(t testing.TB, b []byte) (*responseHead, *gatewayError, error) {
	t.Helper()
	head, err := headOf(b, 1<<20)
	if err != nil {
		return nil, nil, err
	}
	return envelope.ParseResponse(head)
}

func manyFields(n int) httpwire.Header {
	h := make(httpwire.Header, n)
	for i := range h {
		h[i] = httpwire.Field{Name: fmt.Sprintf("X-Field-%d", i), Value: strings.Repeat("v", i%300)}
	}
	return h
}

var unicodeHeader = httpwire.Header{
	{Name: "SOAPAction", Value: `"urn:Grüße#Äction"`},
	{Name: "X-Ünïcödé", Value: "日本語 — ✓"},
	{Name: "x-lower", Value: ""},
	{Name: "X-Dup", Value: "1"},
	{Name: "X-Dup", Value: "2"},
}

func requestHeadCases() []struct {
	name string
	h    requestHead
} {
	return []struct {
		name string
		h    requestHead
	}{
		{"minimal", requestHead{Method: "G", Target: "/"}},
		{"empty id upstream fields", requestHead{Method: "POST", Target: "/svc", ContentLength: 0}},
		{"unknown length", requestHead{ExchangeID: "8000000000000001", Upstream: "calc", Method: "POST", Target: "/svc", ProtoMinor: 1, ContentLength: -1}},
		{"huge length", requestHead{Upstream: "u", Method: "POST", Target: "/", ProtoMinor: 1, ContentLength: 1 << 62}},
		{"length 127/128 boundary", requestHead{Method: "POST", Target: "/", ContentLength: 128}},
		{"expect continue", requestHead{Method: "POST", Target: "/x", ProtoMinor: 1, ContentLength: 10, Expect: true}},
		{"expect continue unknown length", requestHead{Method: "POST", Target: "/x", ProtoMinor: 1, ContentLength: -1, Expect: true}},
		{"http/1.0", requestHead{Method: "POST", Target: "/x", ProtoMinor: 0, ContentLength: 3}},
		{"unicode", requestHead{ExchangeID: "ïd", Upstream: "ünïcödé-upstream", Method: "POST", Target: "/路径?q=値&a=<b>", ProtoMinor: 1, ContentLength: 42, Header: unicodeHeader}},
		{"long strings", requestHead{ExchangeID: strings.Repeat("i", 300), Upstream: strings.Repeat("u", 20000), Method: "POST", Target: "/" + strings.Repeat("t", 5000), ContentLength: 1}},
		{"many fields", requestHead{Method: "POST", Target: "/", ContentLength: -1, Header: manyFields(1000)}},
	}
}

func responseHeadCases() []struct {
	name string
	h    responseHead
} {
	return []struct {
		name string
		h    responseHead
	}{
		{"minimal", responseHead{Status: 200}},
		{"status 100", responseHead{Status: 100, Reason: "Continue", ProtoMinor: 1}},
		{"status 999", responseHead{Status: 999, Reason: "Weird", ProtoMinor: 1, ContentLength: 0}},
		{"unknown length", responseHead{Status: 200, Reason: "OK", ProtoMinor: 1, ContentLength: -1}},
		{"huge length", responseHead{Status: 200, Reason: "OK", ProtoMinor: 1, ContentLength: 1 << 62}},
		{"http/1.0 empty reason", responseHead{Status: 500, ProtoMinor: 0, ContentLength: 7}},
		{"unicode", responseHead{Status: 200, Reason: "Okay Dokey — ✓", ProtoMinor: 1, ContentLength: 5, Header: unicodeHeader}},
		{"many fields", responseHead{Status: 200, Reason: "OK", ProtoMinor: 1, ContentLength: -1, Header: manyFields(1000)}},
	}
}

func gatewayErrorCases() []struct {
	name string
	e    gatewayError
} {
	return []struct {
		name string
		e    gatewayError
	}{
		{"empty strings", gatewayError{Status: 502}},
		{"400", gatewayError{Status: 400, Cause: causeBadRequest, Message: "bad"}},
		{"599", gatewayError{Status: 599, Cause: causeInternal, Message: "x"}},
		{"unicode", gatewayError{Status: 502, Cause: causeUnknownUpstream, Message: `soapgw: upstream "ünïcödé" <&> is not configured — ✓`}},
		{"long message", gatewayError{Status: 504, Cause: causeUpstreamTimeout, Message: strings.Repeat("m", 70000)}},
	}
}

func TestRequestHeadRoundTrip(t *testing.T) {
	for _, tc := range requestHeadCases() {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.h.Append(nil)
			got, err := decodeRequest(t, b)
			require.NoError(t, err)
			want := tc.h
			want.Header = normHeader(want.Header)
			got.Header = normHeader(got.Header)
			require.Equal(t, want, *got)
		})
	}
}

func TestResponseHeadRoundTrip(t *testing.T) {
	for _, tc := range responseHeadCases() {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.h.Append(nil)
			got, ge, err := decodeResponse(t, b)
			require.NoError(t, err)
			require.Nil(t, ge)
			want := tc.h
			want.Header = normHeader(want.Header)
			got.Header = normHeader(got.Header)
			require.Equal(t, want, *got)
		})
	}
}

func TestGatewayErrorRoundTrip(t *testing.T) {
	for _, tc := range gatewayErrorCases() {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.e.Append(nil)
			resp, got, err := decodeResponse(t, b)
			require.NoError(t, err)
			require.Nil(t, resp)
			require.Equal(t, tc.e, *got)
			require.Equal(t, tc.e.Message, got.Error())
		})
	}
}

// The body follows the head unchanged: readHead must consume exactly the head.
func TestEnvelopeHeadThenBody(t *testing.T) {
	h := requestHead{Method: "POST", Target: "/svc", ContentLength: 5, Header: unicodeHeader}
	msg := append(h.Append(nil), "hello"...)
	br := bufio.NewReader(bytes.NewReader(msg))
	head, err := readHead(br, testHeadMax)
	require.NoError(t, err)
	got, err := envelope.ParseRequest(head)
	require.NoError(t, err)
	require.Equal(t, int64(5), got.ContentLength)
	rest := make([]byte, 16)
	n, _ := br.Read(rest)
	require.Equal(t, "hello", string(rest[:n]))
}

// Regression: the head append methods used to count bytes already in the buffer as part
// of the head and write the length prefix over them.
func TestEnvelopeAppendToNonEmptyBuffer(t *testing.T) {
	prefix := []byte("PREFIX")
	h := requestHead{Method: "POST", Target: "/svc", ContentLength: 3}
	alone := h.Append(nil)
	got := h.Append(append([]byte(nil), prefix...))
	require.Equal(t, append(append([]byte(nil), prefix...), alone...), got)
}

// The prefix written in front of a head is the minimal uvarint of its length.
func TestEnvelopeLengthPrefix(t *testing.T) {
	for _, n := range []int{0, 1, 100, 1000, 70000} {
		h := requestHead{Method: "POST", Target: "/" + strings.Repeat("t", n)}
		b := h.Append(nil)
		v, k := binary.Uvarint(b)
		require.Positive(t, k)
		require.Equal(t, uint64(len(b)-k), v)
		require.Len(t, b[:k], len(binary.AppendUvarint(nil, v)))
	}
}

// validHeads returns one encoding of every case above, for truncation and the fuzz seeds.
func validHeads() [][]byte {
	var out [][]byte
	for _, tc := range requestHeadCases() {
		if len(tc.h.Header) > 10 || len(tc.h.Upstream) > 1000 {
			continue // keep the quadratic truncation test small
		}
		out = append(out, tc.h.Append(nil))
	}
	for _, tc := range responseHeadCases() {
		if len(tc.h.Header) > 10 {
			continue
		}
		out = append(out, tc.h.Append(nil))
	}
	for _, tc := range gatewayErrorCases() {
		if len(tc.e.Message) > 1000 {
			continue
		}
		out = append(out, tc.e.Append(nil))
	}
	return out
}

// splitHead returns the head of an encoded message without its length prefix.
func splitHead(t testing.TB, b []byte) []byte {
	t.Helper()
	n, k := binary.Uvarint(b)
	require.Positive(t, k)
	require.Equal(t, uint64(len(b)-k), n)
	return b[k:]
}

func withPrefix(head []byte) []byte {
	return append(binary.AppendUvarint(nil, uint64(len(head))), head...)
}

// parseAny runs the parser that matches the head's kind (and the other one too: a wrong
// kind must be an error, not a panic).
func parseAny(t testing.TB, b []byte) error {
	t.Helper()
	head, err := headOf(b, testHeadMax)
	if err != nil {
		return err
	}
	_, rerr := envelope.ParseRequest(head)
	_, _, perr := envelope.ParseResponse(head)
	if head[1] == kindRequest {
		require.Error(t, perr)
		return rerr
	}
	require.Error(t, rerr)
	return perr
}

// Every proper prefix of a valid head, framed with its own (consistent) length, is an
// error wrapping errBadEnvelope.
func TestEnvelopeTruncatedHead(t *testing.T) {
	for i, full := range validHeads() {
		head := splitHead(t, full)
		require.NoError(t, parseAny(t, full), "case %d", i)
		for k := 0; k < len(head); k++ {
			err := parseAny(t, withPrefix(head[:k]))
			require.Error(t, err, "case %d, head truncated to %d of %d bytes", i, k, len(head))
			require.ErrorIs(t, err, errBadEnvelope, "case %d, head truncated to %d of %d bytes", i, k, len(head))
		}
	}
}

// A message cut anywhere inside its head (the tunnel message ended early) is an error and
// never a panic. See TestEnvelopeCutMessageIsBadEnvelope for the error's class.
func TestEnvelopeCutMessage(t *testing.T) {
	for i, full := range validHeads() {
		for k := 0; k < len(full); k++ {
			err := parseAny(t, full[:k])
			require.Error(t, err, "case %d, message cut to %d of %d bytes", i, k, len(full))
		}
	}
}

// Regression: a message that ends inside its length prefix or head, or whose prefix
// overflows, is a malformed envelope (errBadEnvelope), not a bare io.ErrUnexpectedEOF.
func TestEnvelopeCutMessageIsBadEnvelope(t *testing.T) {
	long := (&requestHead{Method: "POST", Target: "/" + strings.Repeat("t", 300)}).Append(nil)
	cases := map[string][]byte{
		"cut inside head":            long[:10],
		"cut inside length prefix":   long[:1],
		"overlong varint prefix":     bytes.Repeat([]byte{0xff}, 11),
		"cut after version and kind": withPrefix([]byte{envelopeVersion, kindRequest, 0})[:3],
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			err := parseAny(t, b)
			require.ErrorIs(t, err, errBadEnvelope)
		})
	}
}

func TestEnvelopeMalformed(t *testing.T) {
	req := (&requestHead{Method: "POST", Target: "/", ContentLength: 1}).Append(nil)
	reqHead := splitHead(t, req)
	resp := (&responseHead{Status: 200, ContentLength: -1}).Append(nil)

	mut := func(b []byte, f func(h []byte) []byte) []byte {
		h := append([]byte(nil), splitHead(t, b)...)
		return withPrefix(f(h))
	}
	cases := map[string][]byte{
		"empty message":           nil,
		"head of 0 bytes":         {0},
		"head of 1 byte":          {1, envelopeVersion},
		"version 0":               mut(req, func(h []byte) []byte { h[0] = 0; return h }),
		"version 2":               mut(req, func(h []byte) []byte { h[0] = 2; return h }),
		"version 255":             mut(resp, func(h []byte) []byte { h[0] = 255; return h }),
		"unknown kind":            mut(req, func(h []byte) []byte { h[1] = 'Z'; return h }),
		"empty method":            (&requestHead{Target: "/"}).Append(nil),
		"empty target":            (&requestHead{Method: "GET"}).Append(nil),
		"status 0":                (&responseHead{Status: 0}).Append(nil),
		"status 99":               (&responseHead{Status: 99}).Append(nil),
		"status 1000":             (&responseHead{Status: 1000}).Append(nil),
		"error status 399":        (&gatewayError{Status: 399}).Append(nil),
		"error status 600":        (&gatewayError{Status: 600}).Append(nil),
		"length over 2^62":        (&requestHead{Method: "POST", Target: "/", ContentLength: 1<<62 + 1}).Append(nil),
		"resp length over 2^62":   (&responseHead{Status: 200, ContentLength: 1<<63 - 1}).Append(nil),
		"string longer than head": withPrefix([]byte{envelopeVersion, kindRequest, 200, 'a'}),
		"field count too large":   withPrefix(append(append([]byte(nil), reqHead[:len(reqHead)-1]...), 0xff, 0xff, 0x03)),
		"varint overflow in head": withPrefix(append([]byte{envelopeVersion, kindRequest}, bytes.Repeat([]byte{0xff}, 11)...)),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			err := parseAny(t, b)
			require.Error(t, err)
			require.ErrorIs(t, err, errBadEnvelope)
		})
	}
}

func TestEnvelopeVersionMismatch(t *testing.T) {
	b := (&requestHead{Method: "POST", Target: "/"}).Append(nil)
	head := append([]byte(nil), splitHead(t, b)...)
	head[0] = envelopeVersion + 1
	_, err := headOf(withPrefix(head), testHeadMax)
	require.ErrorIs(t, err, errBadEnvelope)
	require.Contains(t, err.Error(), fmt.Sprintf("version %d, want %d", envelopeVersion+1, envelopeVersion))
}

func TestEnvelopeHeadLimit(t *testing.T) {
	h := requestHead{Method: "POST", Target: "/" + strings.Repeat("t", 1000)}
	b := h.Append(nil)
	n := len(splitHead(t, b))

	head, err := headOf(b, n)
	require.NoError(t, err, "a head of exactly the limit is accepted")
	_, err = envelope.ParseRequest(head)
	require.NoError(t, err)

	_, err = headOf(b, n-1)
	require.ErrorIs(t, err, errBadEnvelope)
	require.Contains(t, err.Error(), "limit")

	// A huge announced length is refused before anything is allocated or read.
	huge := binary.AppendUvarint(nil, 1<<40)
	_, err = headOf(huge, testHeadMax)
	require.ErrorIs(t, err, errBadEnvelope)
	huge = binary.AppendUvarint(nil, 1<<63)
	_, err = headOf(huge, testHeadMax)
	require.ErrorIs(t, err, errBadEnvelope)
}

func TestEnvelopeWrongKind(t *testing.T) {
	req := (&requestHead{Method: "POST", Target: "/"}).Append(nil)
	resp := (&responseHead{Status: 200}).Append(nil)
	ge := (&gatewayError{Status: 502}).Append(nil)

	_, _, err := decodeResponse(t, req)
	require.ErrorIs(t, err, errBadEnvelope)
	_, err = decodeRequest(t, resp)
	require.ErrorIs(t, err, errBadEnvelope)
	_, err = decodeRequest(t, ge)
	require.ErrorIs(t, err, errBadEnvelope)
}

func FuzzEnvelope(f *testing.F) {
	for _, b := range validHeads() {
		f.Add(b)
	}
	f.Add((&requestHead{Method: "POST", Target: "/", Header: manyFields(40)}).Append(nil))
	f.Add([]byte{})
	f.Add([]byte{2, envelopeVersion, envelope.KindError})
	f.Add(bytes.Repeat([]byte{0xff}, 12))
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 1 << 16
		head, err := headOf(data, max)
		if err != nil {
			return // any error is fine; the point is no panic and no huge allocation
		}
		if req, err := envelope.ParseRequest(head); err == nil {
			enc := req.Append(nil)
			head2, err := headOf(enc, max)
			require.NoError(t, err)
			req2, err := envelope.ParseRequest(head2)
			require.NoError(t, err)
			req.Header, req2.Header = normHeader(req.Header), normHeader(req2.Header)
			require.Equal(t, req, req2)
		} else {
			require.ErrorIs(t, err, errBadEnvelope)
		}
		resp, ge, err := envelope.ParseResponse(head)
		if err != nil {
			require.ErrorIs(t, err, errBadEnvelope)
			return
		}
		var enc []byte
		if resp != nil {
			require.Nil(t, ge)
			enc = resp.Append(nil)
		} else {
			require.NotNil(t, ge)
			enc = ge.Append(nil)
		}
		head2, err := headOf(enc, max)
		require.NoError(t, err)
		resp2, ge2, err := envelope.ParseResponse(head2)
		require.NoError(t, err)
		if resp != nil {
			resp.Header, resp2.Header = normHeader(resp.Header), normHeader(resp2.Header)
			require.Equal(t, resp, resp2)
		} else {
			require.Equal(t, ge, ge2)
		}
	})
}
