package codec

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
)

// The head model reads, writes and steps heads, numbers and dates by hand, to allocate
// nothing. These tests hold each hand-written piece to the library code it replaces
// (the envelope package's parser and writer, strconv, time), which the head model used
// before: the same inputs give the same answers, so the wire format is unchanged.

// refSplitHead is splitHead as it was written with the envelope package: parse the head,
// flatten it, and keep it only if the list rebuilds it byte for byte.
func refSplitHead(msg []byte) (kind byte, list []string, fixed int, body []byte, ok bool) {
	head, body, err := envelope.Split(msg)
	if err != nil {
		return 0, nil, 0, nil, false
	}
	kind = head[1]
	if head[0] != envelope.Version {
		return 0, nil, 0, nil, false
	}
	list, fixed, ok = refHeadFields(kind, head)
	if !ok {
		return 0, nil, 0, nil, false
	}
	re, ok := refAppendHead(nil, kind, list)
	if !ok || !bytes.Equal(re, msg[:len(msg)-len(body)]) {
		return 0, nil, 0, nil, false
	}
	return kind, list, fixed, body, true
}

func refHeadFields(kind byte, head []byte) (list []string, fixed int, ok bool) {
	switch kind {
	case envelope.KindRequest:
		h, err := envelope.ParseRequest(head)
		if err != nil {
			return nil, 0, false
		}
		list = append(make([]string, 0, 7+2*len(h.Header)), h.ExchangeID, h.Upstream, h.Method, h.Target,
			strconv.Itoa(h.ProtoMinor), strconv.FormatBool(h.Expect), strconv.FormatInt(h.ContentLength, 10))
		fixed = 7
		list = refAppendHeader(list, h.Header)
	case envelope.KindResponse:
		h, _, err := envelope.ParseResponse(head)
		if err != nil || h == nil {
			return nil, 0, false
		}
		list = append(make([]string, 0, 4+2*len(h.Header)), strconv.Itoa(h.Status), h.Reason,
			strconv.Itoa(h.ProtoMinor), strconv.FormatInt(h.ContentLength, 10))
		fixed = 4
		list = refAppendHeader(list, h.Header)
	case envelope.KindError:
		_, e, err := envelope.ParseResponse(head)
		if err != nil || e == nil {
			return nil, 0, false
		}
		list, fixed = []string{strconv.Itoa(e.Status), e.Cause, e.Message}, 3
	default:
		return nil, 0, false
	}
	return list, fixed, true
}
func refAppendHeader(list []string, h httpwire.Header) []string {
	for _, f := range h {
		list = append(list, f.Name, f.Value)
	}
	return list
}
func refAppendHead(dst []byte, kind byte, list []string) ([]byte, bool) {
	atoi := func(s string) (int64, bool) {
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil && strconv.FormatInt(n, 10) == s
	}
	header := func(fixed int) (httpwire.Header, bool) {
		if len(list) < fixed || (len(list)-fixed)%2 != 0 {
			return nil, false
		}
		h := make(httpwire.Header, 0, (len(list)-fixed)/2)
		for i := fixed; i < len(list); i += 2 {
			h = append(h, httpwire.Field{Name: list[i], Value: list[i+1]})
		}
		return h, true
	}
	switch kind {
	case envelope.KindRequest:
		h, ok := header(7)
		if !ok {
			return dst, false
		}
		proto, ok1 := atoi(list[4])
		cl, ok2 := atoi(list[6])
		expect, err := strconv.ParseBool(list[5])
		if !ok1 || !ok2 || err != nil || proto < 0 || proto > 255 || cl < -1 {
			return dst, false
		}
		r := envelope.Request{ExchangeID: list[0], Upstream: list[1], Method: list[2], Target: list[3],
			ProtoMinor: int(proto), Expect: expect, ContentLength: cl, Header: h}
		return r.Append(dst), true
	case envelope.KindResponse:
		h, ok := header(4)
		if !ok {
			return dst, false
		}
		status, ok1 := atoi(list[0])
		proto, ok2 := atoi(list[2])
		cl, ok3 := atoi(list[3])
		if !ok1 || !ok2 || !ok3 || status < 0 || status > 0xffff || proto < 0 || proto > 255 || cl < -1 {
			return dst, false
		}
		r := envelope.Response{Status: int(status), Reason: list[1], ProtoMinor: int(proto), ContentLength: cl, Header: h}
		return r.Append(dst), true
	case envelope.KindError:
		if len(list) != 3 {
			return dst, false
		}
		status, ok := atoi(list[0])
		if !ok || status < 0 || status > 0xffff {
			return dst, false
		}
		e := envelope.Error{Status: int(status), Cause: list[1], Message: list[2]}
		return e.Append(dst), true
	}
	return dst, false
}

func refParseHTTPDate(s string) (int64, bool) {
	if len(s) != len(httpDate) {
		return 0, false
	}
	tm, err := time.Parse(httpDate, s)
	if err != nil || tm.Format(httpDate) != s {
		return 0, false
	}
	return tm.Unix(), true
}
func refNextStep(r, s string) (string, bool) {
	if a, ok := refDecimal(r); ok {
		if b, ok := refDecimal(s); ok {
			return strconv.FormatInt(b+(b-a), 10), true // |a|, |b| < 1e18: no overflow
		}
		return "", false
	}
	if a, ok := refParseHTTPDate(r); ok {
		if b, ok := refParseHTTPDate(s); ok {
			next := time.Unix(b+(b-a), 0).UTC().Format(httpDate)
			_, ok = refParseHTTPDate(next) // a 4-digit year
			return next, ok
		}
		return "", false
	}
	if rp, rn, ok := refTailNumber(r); ok {
		if sp, sn, ok := refTailNumber(s); ok && rp == sp && sn+(sn-rn) >= 0 {
			return sp + strconv.FormatInt(sn+(sn-rn), 10), true
		}
	}
	return "", false
}
func refDecimal(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && strconv.FormatInt(n, 10) == s
}
func refTailNumber(s string) (prefix string, n int64, ok bool) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if i == len(s) || len(s)-i > 18 || (s[i] == '0' && i < len(s)-1) {
		return "", 0, false
	}
	n, err := strconv.ParseInt(s[i:], 10, 64)
	return s[:i], n, err == nil
}

// equivHeads returns the heads of every family direction, and the oddities of the head
// model's other tests.
func equivHeads(t testing.TB) [][]byte {
	var heads [][]byte
	for _, set := range headBenchSets(true) {
		for i, m := range set.msgs {
			if i < 50 {
				heads = append(heads, headOf(t, m))
			}
		}
	}
	for i := range 20 {
		heads = append(heads, headMsg(oddHead(i), ""), headMsg(legacyHead(i, 300+i), "<x/>"))
	}
	heads = append(heads, randomHeads(3, 300)...)
	heads = append(heads,
		headMsg(&envelope.Error{Status: 502, Cause: "upstream_down", Message: "soapgw: upstream refused"}, ""),
		headMsg(&envelope.Request{ExchangeID: "x", Upstream: "u", Method: "GET", Target: "/svc?wsdl", ContentLength: -1, Expect: true, ProtoMinor: 200}, ""),
		headMsg(&envelope.Response{Status: 599, ContentLength: 1 << 62}, "chunked body"),
		headMsg(&envelope.Resume{ExchangeID: "x", Offset: 10}, ""),
		headMsg(&envelope.Continue{Offset: 10}, ""),
	)
	return heads
}

// mutate returns a copy of head with a random change: a byte changed, inserted or
// removed, the head cut short or extended.
func mutate(rng *rand.Rand, head []byte) []byte {
	m := bytes.Clone(head)
	special := []byte{0, 1, 2, 3, 0x7f, 0x80, 0xff, 'Q', 'R', 'E', 'U'}
	b := special[rng.IntN(len(special))]
	if rng.IntN(2) == 0 {
		b = byte(rng.IntN(256))
	}
	i := rng.IntN(len(m) + 1)
	switch rng.IntN(5) {
	case 0:
		if i < len(m) {
			m[i] = b
		}
	case 1:
		m = append(m[:i], append([]byte{b}, m[i:]...)...)
	case 2:
		if i < len(m) {
			m = append(m[:i], m[i+1:]...)
		}
	case 3:
		m = m[:i]
	default:
		m = append(m, b)
	}
	return m
}

// splitHead accepts exactly the heads the envelope package parses and rebuilds byte for
// byte, and flattens them alike.
func TestSplitHeadMatchesEnvelope(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m := newHeadModel()
	check := func(msg []byte) {
		kind, list, fixed, body, ok := m.splitHead(msg)
		wkind, wlist, wfixed, wbody, wok := refSplitHead(msg)
		require.Equal(t, wok, ok, "%x", msg)
		if ok {
			require.Equal(t, wkind, kind, "%x", msg)
			require.Equal(t, wlist, list, "%x", msg)
			require.Equal(t, wfixed, fixed, "%x", msg)
			require.Equal(t, wbody, body, "%x", msg)
		}
	}
	accepted := 0
	for _, h := range equivHeads(t) {
		check(h)
		if _, _, _, _, ok := m.splitHead(h); ok {
			accepted++
		}
		for range 40 {
			check(mutate(rng, h))
		}
	}
	require.Greater(t, accepted, 1000)
	// Non-minimal varints: the length prefix, a string length, the content length.
	h := headMsg(reqHead(1, "credit", 10), "")
	head, _, err := envelope.Split(h)
	require.NoError(t, err)
	check(append([]byte{byte(len(head)) | 0x80, 0}, head...))
	check(append([]byte{byte(len(head) + 1), 1, 'Q', 0x80 | byte(len("9f3a1c2e-1")), 0}, head[3:]...))
}

func FuzzSplitHead(f *testing.F) {
	for i, h := range equivHeads(f) {
		if i%7 == 0 {
			f.Add(h)
		}
	}
	m := newHeadModel()
	f.Fuzz(func(t *testing.T, msg []byte) {
		kind, list, fixed, body, ok := m.splitHead(msg)
		wkind, wlist, wfixed, wbody, wok := refSplitHead(msg)
		require.Equal(t, wok, ok)
		if ok {
			require.Equal(t, wkind, kind)
			require.Equal(t, wlist, list)
			require.Equal(t, wfixed, fixed)
			require.Equal(t, wbody, body)
		}
	})
}

// appendHead writes what the envelope package writes, and refuses the same lists.
func TestAppendHeadMatchesEnvelope(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	values := []string{"", "0", "1", "-1", "-2", "007", "+1", "255", "256", "999", "65535", "65536",
		"4611686018427387904", "9223372036854775807", "true", "false", "t", "TRUE", "x", "Content-Length"}
	m := newHeadModel()
	for _, h := range equivHeads(t) {
		kind, list, _, _, ok := m.splitHead(h)
		if !ok {
			continue
		}
		list = append([]string(nil), list...)
		for n := range 30 {
			l := append([]string(nil), list...)
			if n > 0 {
				switch rng.IntN(4) {
				case 0:
					l = l[:rng.IntN(len(l)+1)]
				case 1:
					l = append(l, values[rng.IntN(len(values))])
				default:
					l[rng.IntN(len(l))] = values[rng.IntN(len(values))]
				}
			}
			got, ok := appendHead([]byte("prefix"), kind, l)
			want, wok := refAppendHead([]byte("prefix"), kind, l)
			require.Equal(t, wok, ok, "%q", l)
			if ok {
				require.Equal(t, want, got, "%q", l)
			}
		}
	}
	_, ok := appendHead(nil, envelope.KindResume, []string{"x", "1"})
	require.False(t, ok)
}

// The hand-written number and date code answers as strconv and time do.
func TestHeadValuesMatchLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	strs := []string{"", "0", "00", "-0", "-", "+1", "1", "-1", "007", "10", "a1", "1a", " 1", "1 ", "1_000",
		"999999999999999999", "1000000000000000000", "-999999999999999999", "-99999999999999999",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"18446744073709551616", "99999999999999999999", "id-0", "id-00", "id-01", "id-10", "x/123456789012345678",
		"x/1234567890123456789", "call/9", "9f3a1c2e-421"}
	for range 2000 {
		n := rng.Int64() >> rng.IntN(64)
		if rng.IntN(2) == 0 {
			n = -n
		}
		strs = append(strs, strconv.FormatInt(n, 10), "p-"+strconv.FormatInt(n, 10))
	}
	for _, s := range strs {
		n, ok := decimal(s)
		wn, wok := refDecimal(s)
		require.Equal(t, wok, ok, "decimal %q", s)
		if ok {
			require.Equal(t, wn, n, "decimal %q", s)
		}
		p, n, ok := tailNumber(s)
		wp, wn, wok := refTailNumber(s)
		require.Equal(t, wok, ok, "tailNumber %q", s)
		if ok {
			require.Equal(t, wp, p, "tailNumber %q", s)
			require.Equal(t, wn, n, "tailNumber %q", s)
		}
		n, ok = canonicalInt(s)
		pn, err := strconv.ParseInt(s, 10, 64)
		wok = err == nil && strconv.FormatInt(pn, 10) == s
		require.Equal(t, wok, ok, "canonicalInt %q", s)
		if ok {
			require.Equal(t, pn, n, "canonicalInt %q", s)
		}
	}

	// Dates: every kind of second from before year 0 to after 9999, formatted; then
	// changed by a character.
	lo := time.Date(-1, 12, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(10001, 2, 1, 0, 0, 0, 0, time.UTC).Unix()
	edges := []int64{0, -1, 1, lo, hi, minHTTPDate, minHTTPDate - 1, maxHTTPDate, maxHTTPDate + 1,
		time.Date(2000, 2, 29, 23, 59, 59, 0, time.UTC).Unix(), time.Date(1900, 3, 1, 0, 0, 0, 0, time.UTC).Unix()}
	var dates []string
	for i := range 20000 {
		u := lo + rng.Int64N(hi-lo)
		if i < len(edges) {
			u = edges[i]
		}
		got, ok := appendHTTPDate(nil, u)
		want := time.Unix(u, 0).UTC().Format(httpDate)
		_, wok := refParseHTTPDate(want)
		require.Equal(t, wok, ok, "appendHTTPDate(%d)", u)
		if ok {
			require.Equal(t, want, string(got), "appendHTTPDate(%d)", u)
		}
		dates = append(dates, want)
	}
	alphabet := "0123456789 :,-+MonTueWedThuFriSatSunJanFebMarAprMayJunJulAugSepOctNovDecGMTUTCmonjan"
	for i, d := range dates {
		s := []byte(d)
		if i%2 == 1 {
			s[rng.IntN(len(s))] = alphabet[rng.IntN(len(alphabet))]
		}
		for _, v := range []string{string(s), string(s[:len(s)-1])} {
			u, ok := parseHTTPDate(v)
			wu, wok := refParseHTTPDate(v)
			require.Equal(t, wok, ok, "parseHTTPDate(%q)", v)
			if ok {
				require.Equal(t, wu, u, "parseHTTPDate(%q)", v)
			}
		}
	}

	// Steps: pairs of related values of each kind.
	for i := range 5000 {
		var r, s string
		switch i % 3 {
		case 0:
			r, s = strs[rng.IntN(len(strs))], strs[rng.IntN(len(strs))]
		case 1:
			r, s = dates[rng.IntN(len(dates))], dates[rng.IntN(len(dates))]
			if i%2 == 0 {
				r = dates[len(dates)-1-i%len(dates)]
			}
			if i%5 < 3 { // seconds to a day apart, often the same day
				u, ok := refParseHTTPDate(r)
				if ok {
					s = time.Unix(u+rng.Int64N(200000)-100000, 0).UTC().Format(httpDate)
				}
				if i%5 == 0 {
					b := []byte(s)
					b[17+rng.IntN(12)] = alphabet[rng.IntN(len(alphabet))]
					s = string(b)
				}
			}
		default:
			a := rng.Int64N(1e6)
			r, s = "id-"+strconv.FormatInt(a, 10), "id-"+strconv.FormatInt(a+rng.Int64N(5)-2, 10)
		}
		got, ok := appendNextStep([]byte("x"), r, s)
		want, wok := refNextStep(r, s)
		require.Equal(t, wok, ok, "step %q -> %q", r, s)
		if ok {
			require.Equal(t, "x"+want, string(got), "step %q -> %q", r, s)
		} else {
			require.Equal(t, "x", string(got))
		}
	}
}

// commonPrefix and commonSuffix, which compare words, answer as a byte loop does.
func TestCommonAffixes(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	prefix := func(a, b string) int {
		i := 0
		for i < len(a) && i < len(b) && a[i] == b[i] {
			i++
		}
		return i
	}
	suffix := func(a, b string) int {
		i := 0
		for i < len(a) && i < len(b) && a[len(a)-1-i] == b[len(b)-1-i] {
			i++
		}
		return i
	}
	for range 20000 {
		base := make([]byte, rng.IntN(40))
		for i := range base {
			base[i] = "ab"[rng.IntN(2)]
		}
		a, b := []byte(string(base)), []byte(string(base))
		for range rng.IntN(3) {
			if len(a) > 0 {
				a[rng.IntN(len(a))] = 'c'
			}
		}
		b = b[rng.IntN(len(b)+1):]
		if rng.IntN(2) == 0 {
			a = a[:rng.IntN(len(a)+1)]
		}
		require.Equal(t, prefix(string(a), string(b)), commonPrefix(string(a), string(b)), "%q %q", a, b)
		require.Equal(t, suffix(string(a), string(b)), commonSuffix(string(a), string(b)), "%q %q", a, b)
		require.Equal(t, prefix(string(b), string(a)), commonPrefix(string(b), string(a)), "%q %q", b, a)
		require.Equal(t, suffix(string(b), string(a)), commonSuffix(string(b), string(a)), "%q %q", b, a)
	}
}

// selectRef, which looks at the positions that changed last first and stops early,
// chooses what a plain scan of every position of every remembered head chooses.
func TestSelectRefMatchesPlainScan(t *testing.T) {
	plain := func(m *headModel, kind byte, list []string, fixed int) int {
		best, bestCost := noRef, 0
		cred := credentialsOf(list, fixed)
		for i, r := range m.refs[kindSlot(kind)] {
			cost := 0
			for j := range list {
				cost += r.cost(list, &cred, j)
			}
			if best == noRef || cost < bestCost {
				best, bestCost = i, cost
			}
		}
		return best
	}
	heads := append(equivHeads(t), randomHeads(13, 2000)...)
	m := newHeadModel()
	chose := map[int]int{}
	for _, h := range heads {
		kind, list, fixed, _, ok := m.splitHead(h)
		if !ok {
			continue
		}
		want := plain(m, kind, list, fixed)
		require.Equal(t, want, m.selectRef(kind, list, fixed))
		chose[want]++
		_, _ = m.encode(nil, kind, list, fixed)
		m.commit(kind, list, fixed)
	}
	require.Greater(t, len(chose), 5, "references chosen: %v", chose)
}

// A date coded as a difference from its reference's rebuilds as time formats it, within
// the day or across days.
func TestHeadDateDelta(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 5000 {
		u := minHTTPDate + rng.Int64N(maxHTTPDate-minHTTPDate)
		r := time.Unix(u, 0).UTC().Format(httpDate)
		diff := rng.Int64N(200000) - 100000
		if rng.IntN(4) == 0 {
			diff = rng.Int64N(1<<41) - 1<<40
		}
		d := headDecoder{refList: []string{r}, p: binary.AppendVarint(nil, diff)}
		got, err := d.delta(opDate, 0)
		want, wok := refParseHTTPDate(time.Unix(u+diff, 0).UTC().Format(httpDate))
		if diff <= -1<<40 || diff >= 1<<40 || !wok {
			require.Error(t, err, "%s %+d", r, diff)
			continue
		}
		require.NoError(t, err, "%s %+d", r, diff)
		require.Equal(t, time.Unix(u+diff, 0).UTC().Format(httpDate), got)
		require.Equal(t, want, u+diff)
	}
}

// sensitiveHeader names the credential headers in any casing, and nothing else.
func TestSensitiveHeader(t *testing.T) {
	for _, name := range []string{"Authorization", "authorization", "AUTHORIZATION", "Proxy-Authorization",
		"proxy-authorization", "Cookie", "cookie", "COOKIE", "Set-Cookie", "set-cookie"} {
		require.True(t, sensitiveHeader(name), name)
	}
	for _, name := range []string{"", "Authorizatio", "Authorizations", "Proxy-Authorizatio", "Cookies", "Cooki",
		"Set-Cookie2", "SOAPAction", "Set-Cookiz", "Content-Type", "Host", "X-Cookie"} {
		require.False(t, sensitiveHeader(name), name)
	}
}
