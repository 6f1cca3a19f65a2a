package xmltok

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/soapgw/soapgw/internal/soapdemo"
	"github.com/soapgw/soapgw/internal/trafficgen"
	"github.com/stretchr/testify/require"
)

func TestMaxMessage(t *testing.T) {
	big := bytes.Repeat([]byte("<item>1</item>"), 10000) // 140 KB, codes to a few bytes
	for _, o := range []Options{{}, {DictBytes: 64}} {
		enc := NewEncoder(o)
		payload := enc.Encode(nil, big)
		if o.DictBytes == 0 {
			require.Less(t, len(payload), 2000)
		}
		o.MaxMessage = len(big) - 1
		_, err := NewDecoder(o).Decode(nil, payload)
		require.ErrorIs(t, err, ErrTooLarge)
		o.MaxMessage = len(big)
		out, err := NewDecoder(o).Decode(nil, payload)
		require.NoError(t, err)
		require.Equal(t, big, out)
	}
	// Stored form.
	_, err := NewDecoder(Options{MaxMessage: 3}).Decode(nil, []byte{modeStored, 1, 2, 3, 4})
	require.ErrorIs(t, err, ErrTooLarge)
}

// TestHostileLengthNoAllocation: a tiny payload that claims a huge
// message must be refused before anything the size of the claim is
// allocated.
func TestHostileLengthNoAllocation(t *testing.T) {
	huge := bytes.Repeat([]byte("<a>x</a>"), 4<<20) // 32 MiB, a few hundred bytes coded
	payload := NewEncoder(Options{}).Encode(nil, huge)
	require.Less(t, len(payload), 16<<10)
	dec := NewDecoder(Options{MaxMessage: 1 << 20})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := dec.Decode(nil, payload)
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, ErrTooLarge)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20))
}

func TestCorruptPayloads(t *testing.T) {
	enc := NewEncoder(Options{})
	var payloads [][]byte
	for i := range 20 {
		payloads = append(payloads, enc.Encode(nil, soapdemo.StressRequest(i)))
	}
	last := payloads[len(payloads)-1]
	cases := map[string][]byte{
		"empty":        {},
		"unknown mode": {9, 1, 2},
		"trailing":     append(append([]byte{}, last...), 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA),
		"raw length":   {modeRaw, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F},
		"raw unused":   append([]byte{modeRaw, 3, 'a', 'b', 'c'}, last[1:]...),
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			dec := NewDecoder(Options{})
			for _, q := range payloads[:len(payloads)-1] {
				_, err := dec.Decode(nil, q)
				require.NoError(t, err)
			}
			_, err := dec.Decode(nil, p)
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
	// Truncations of a cold message (literals, so every byte matters)
	// must fail, never panic or hang.
	first := NewEncoder(Options{}).Encode(nil, soapdemo.StressRequest(0))
	for n := 1; n < len(first)-5; n++ {
		out, err := NewDecoder(Options{}).Decode(nil, first[:n])
		if err == nil {
			require.NotEqual(t, soapdemo.StressRequest(0), out, "truncated at %d", n)
		} else {
			require.ErrorIs(t, err, ErrCorrupt)
		}
	}
}

// forgeRef builds, from an encoder model in the same state as the
// decoder's, a payload whose first markup token is a dictionary
// reference to id.
func forgeRef(m *model, id uint32) []byte {
	var c coder
	c.initEnc([]byte{modeCoded}, nil, false)
	m.begin()
	m.codeLen(&c, 100)
	p, mp := m.entry(0), m.mprobs(0)
	for k := range nSucc {
		if m.t.alive(p.succ[k]) {
			c.bit(&mp.succ[k], 0)
		}
	}
	c.bit(&mp.ref, 1)
	c.num(&m.markRef, uint64(m.t.next-1-id))
	return c.finish()
}

// TestInvalidReferences: references to evicted entries, past the
// table, or to an entry of the wrong kind are rejected by name.
func TestInvalidReferences(t *testing.T) {
	cases := []struct {
		name string
		id   func(m *model) uint32
		want string
	}{
		{"evicted", func(m *model) uint32 { return m.t.head - 1 }, "evicted"},
		{"value entry", func(m *model) uint32 { return 1 }, "value entry"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{DictBytes: 512}
			enc, dec := NewEncoder(o), NewDecoder(o)
			for i := range 50 {
				msg := fmt.Appendf(nil, "<m><a%d>v</a%d><name>value-%d</name></m>", i, i, i)
				_, err := dec.Decode(nil, enc.Encode(nil, msg))
				require.NoError(t, err)
			}
			require.Greater(t, enc.m.t.head, firstDyn+1)
			_, err := dec.Decode(nil, forgeRef(enc.m, tc.id(enc.m)))
			require.ErrorIs(t, err, ErrCorrupt)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// Past the end of the table: a distance larger than every id.
	enc, dec := NewEncoder(Options{}), NewDecoder(Options{})
	var c coder
	c.initEnc([]byte{modeCoded}, nil, false)
	m := enc.m
	m.begin()
	m.codeLen(&c, 100)
	c.bit(&m.mprobs(0).ref, 1)
	c.num(&m.markRef, 1<<40)
	_, err := dec.Decode(nil, c.finish())
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "out of range")
}

// TestHostileRepeat: valid streams whose model state is then fed a
// forged "repeat the last token" payload claiming MaxMessage bytes must
// stop at MaxMessage.
func TestHostileRepeatBounded(t *testing.T) {
	enc := NewEncoder(Options{})
	dec := NewDecoder(Options{MaxMessage: 1 << 16})
	m := []byte("<a>x</a>")
	for range 5 {
		out, err := dec.Decode(nil, enc.Encode(nil, m))
		require.NoError(t, err)
		require.Equal(t, m, out)
	}
	for _, junk := range [][]byte{{modeCoded}, {modeCoded, 0}, {modeCoded, 0xFF, 0xFF}, {modeCoded, 0x80, 0, 0, 0, 0}} {
		out, err := dec.Decode(nil, junk)
		require.LessOrEqual(t, len(out), 1<<16)
		if err != nil {
			require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTooLarge), err.Error())
		}
	}
}

func TestSecretsNeverIndexed(t *testing.T) {
	msg := func(pw, nonce string) []byte {
		return []byte(`<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Header>` +
			`<wsse:Security><wsse:UsernameToken><wsse:Username>svc</wsse:Username>` +
			`<wsse:Password Type="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordText">` + pw + `</wsse:Password>` +
			`<wsse:Nonce>` + nonce + `</wsse:Nonce></wsse:UsernameToken></wsse:Security>` +
			`</soapenv:Header><soapenv:Body><op Password="` + pw + `"><x>1</x></op></soapenv:Body></soapenv:Envelope>`)
	}
	const pw = "Tr0ub4dor&3-correct-horse"
	run := func(pw, nonce string) (*pair, []byte) {
		p := newPair(Options{})
		p.roundTrip(t, msg(pw, nonce))
		p.roundTrip(t, msg(pw, nonce))
		return p, append([]byte{}, p.buf...)
	}
	p1, second := run(pw, "bm9uY2Ux")
	// The repeat still carries the password verbatim: it was not learned.
	require.Equal(t, 2, bytes.Count(second, []byte(pw)), "password in second payload")
	require.Contains(t, string(second), "bm9uY2Ux")
	// And the model does not depend on it: same-length secrets, same state.
	p2, _ := run(strings.Repeat("x", len(pw)), "AAAAAAAA")
	require.Equal(t, p1.enc.Digest(), p2.enc.Digest())
	require.Equal(t, p1.dec.Digest(), p2.dec.Digest())
	// CDATA and comments inside a secret element stay secret.
	p3 := newPair(Options{})
	for range 2 {
		p3.roundTrip(t, []byte(`<wsse:Password><![CDATA[cdata-secret]]><!-- </wsse:Password> -->tail-secret</wsse:Password>`))
	}
	require.Contains(t, string(p3.buf), "cdata-secret")
	require.Contains(t, string(p3.buf), "tail-secret")
}

// TestDictionariesStayInSync runs 100k messages through one pair with a
// 4 KiB dictionary, so entries are evicted all the time. The messages are
// short (the test must stay fast under -race) but mixed: generated ones
// over a vocabulary too large for the dictionary (tags, words, numbers,
// times, uuids, secrets), edge inputs, and now and then a real message of
// a family. Every message must round-trip; the digests are compared every
// 97th message and at the end.
func TestDictionariesStayInSync(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	var fams [][]byte
	for _, fam := range []string{"stress", "charging", "weather-simple", "wsa", "deploy"} {
		for _, m := range trafficgen.Family(fam, 20, 7) {
			fams = append(fams, m.Body)
		}
	}
	o := Options{DictBytes: 4 << 10}
	enc, dec := NewEncoder(o), NewDecoder(o)
	var msg, buf, out []byte
	x := uint64(12345)
	rnd := func(k int) int {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return int(x % uint64(k))
	}
	for i := range n {
		switch r := rnd(1000); {
		case r < 4:
			msg = fams[rnd(len(fams))]
		case r < 7:
			msg = edgeInputs[rnd(len(edgeInputs))]
		default:
			msg = fmt.Appendf(msg[:0], `<m%d a="%d"><k%d>w%d</k%d><t>2024-03-%02dT%02d:%02d:00Z</t>`,
				rnd(8), rnd(1000), rnd(40), rnd(2000), rnd(40), 1+rnd(28), rnd(24), rnd(60))
			if rnd(10) == 0 {
				msg = fmt.Appendf(msg, `<id>urn:uuid:%08x-%04x-4%03x-8%03x-%012x</id>`, rnd(1<<32), rnd(1<<16), rnd(1<<12), rnd(1<<12), rnd(1<<48))
			}
			if rnd(20) == 0 {
				msg = fmt.Appendf(msg, `<wsse:Password>pw%d</wsse:Password>`, rnd(1000))
			}
			msg = append(msg, "</m>"...)
		}
		buf = enc.Encode(buf[:0], msg)
		var err error
		if out, err = dec.Decode(out[:0], buf); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.Equal(out, msg) {
			t.Fatalf("message %d differs", i)
		}
		if i%97 == 0 || i == n-1 {
			require.Equal(t, enc.Digest(), dec.Digest(), "message %d", i)
		}
	}
	require.LessOrEqual(t, enc.m.t.size, o.DictBytes)
	require.Greater(t, enc.m.t.head, firstDyn+1000, "too little was evicted")
	h := &enc.m.hist
	require.LessOrEqual(t, len(h.ring), h.histMax)
	require.LessOrEqual(t, len(h.arena), h.arenaMax)
	require.Greater(t, h.pos, uint64(10*h.histCap), "the match history never wrapped")
	require.Greater(t, h.apos, uint64(10*h.arenaCap), "the value arena never wrapped")
}

// TestSteadyStateAllocs: after warm-up, encoding and decoding a message
// of a repeated family allocates nothing.
func TestSteadyStateAllocs(t *testing.T) {
	for _, fam := range []string{"stress", "charging", "fixml", "wsa"} {
		msgs := byDir(trafficgen.Family(fam, 400, trafficgen.DefaultSeed))[trafficgen.Request]
		enc, dec := NewEncoder(Options{}), NewDecoder(Options{})
		var buf, out []byte
		for _, m := range msgs[:len(msgs)/2] {
			buf = enc.Encode(buf[:0], m)
			out, _ = dec.Decode(out[:0], buf)
		}
		i := len(msgs) / 2
		allocs := testing.AllocsPerRun(len(msgs)/2-1, func() {
			buf = enc.Encode(buf[:0], msgs[i])
			out, _ = dec.Decode(out[:0], buf)
			i++
		})
		require.Less(t, allocs, 0.5, fam)
	}
}

func TestStaticTable(t *testing.T) {
	require.Less(t, len(staticTable), 1<<pieceBits)
	seen := map[string]bool{}
	for _, s := range staticTable {
		require.False(t, seen[s], s)
		seen[s] = true
	}
}
