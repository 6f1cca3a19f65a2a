package xmltok

import (
	"fmt"
	"math/rand"
	"testing"
)

// shapeSamples are values whose layouts differ in the ways rebuilds'
// shortcut must notice: padding, fraction digits, signs, negative zeros,
// prefixes ending in digits, zones, out-of-range date fields.
var shapeSamples = []string{
	"0", "7", "-7", "-0", "-0.0", "-000", "00", "007", "0007", "1234", "12345", "10", "99", "100",
	"0.5", "1.5", "-1.5", "27.10", "27.1", "27.100", "0.00", "00.50", "1.", ".5", "1.2.3",
	"A1", "A01", "A001", "A0", "A10", "Room A123", "T068225", "Orders12", "12-5", "3.-5", "3.7", "3.37",
	"x-1", "x-01", "x1y", "x01y", "999999999999999999", "-999999999999999999", "1e5", "0x10",
	"2003-01-01T00:30:00Z", "2002-11-25T10:00:01.000", "2002-11-25T10:00:01.5", "2003-02-30T00:00:00Z",
	"2003-03-02T00:00:00Z", "2003-01-01T24:00:00Z", "2003-01-01T23:60:00Z", "2003-13-01", "2003-00-10",
	"2005-01-01", "2005-01-01Z", "2005-01-01+01:00", "0000-01-01", "9999-12-31T23:59:59.9999999Z",
	"10:00:01.123", "10:00:01", "99:59:59", "10:61:01", "10:59:60", "23:59:59.1234567", "2000-02-29", "1900-02-29",
	"2004-02-29T12:00:00", "2001-02-29T12:00:00", "2001-04-31", "2001-04-30Z", "2001-12-31T23:59:59-08:00", "2001-12-00", "1996-07-04T00:00:00+05:30", "1996-07-04T00:00:00+00:120",
}

// TestRebuildsMatchesRecon checks rebuilds, which skips formatting when
// layouts agree, against the definition: recon(base, bs, v) == want.
func TestRebuildsMatchesRecon(t *testing.T) {
	vals := append([]string(nil), shapeSamples...)
	r := rand.New(rand.NewSource(1))
	digits := "0123456789"
	for range 3000 {
		// Mutate a sample: change digits, drop or add a character.
		b := []byte(shapeSamples[r.Intn(len(shapeSamples))])
		for k := r.Intn(3); k >= 0 && len(b) > 0; k-- {
			i := r.Intn(len(b))
			switch r.Intn(4) {
			case 0, 1:
				if isDigit(b[i]) {
					b[i] = digits[r.Intn(10)]
				}
			case 2:
				b = append(b[:i], b[i+1:]...)
			case 3:
				b = append(b[:i], append([]byte{"0-.9"[r.Intn(4)]}, b[i:]...)...)
			}
		}
		vals = append(vals, string(b))
	}
	m := newModel(Options{})
	var checked, quick int
	for i, want := range vals {
		w := []byte(want)
		sh := parseShape(w)
		if sh.kind == shNone {
			continue
		}
		canon := m.canonical(w, sh)
		if got := string(recon(nil, w, sh, sh.v)) == want; got != canon {
			t.Fatalf("canonical(%q) = %v, recon says %v", want, canon, got)
		}
		for j, base := range vals {
			if (i*31+j)%7 != 0 && j >= len(shapeSamples) {
				continue // a sample of the pairs keeps the test fast
			}
			bb := []byte(base)
			bs := parseShape(bb)
			if bs.kind != sh.kind {
				continue
			}
			c := int8(-1)
			got := m.rebuilds(bb, &bs, w, sh, &c)
			if want2 := string(recon(nil, bb, bs, sh.v)) == want; got != want2 {
				t.Fatalf("rebuilds(%q, %q) = %v, recon says %v", base, want, got, want2)
			}
			checked++
			if got {
				quick++
			}
		}
	}
	t.Logf("%d pairs checked, %d rebuild", checked, quick)
}

// TestCanonicalTimes checks canonical against recon over every month
// and day field of a few years (leap and not) and over clock fields.
func TestCanonicalTimes(t *testing.T) {
	m := newModel(Options{})
	check := func(s string) {
		v := []byte(s)
		sh := parseShape(v)
		if sh.kind == shNone || sh.kind == shNum {
			return
		}
		if got, want := m.canonical(v, sh), string(recon(nil, v, sh, sh.v)) == s; got != want {
			t.Fatalf("canonical(%q) = %v, recon says %v", s, got, want)
		}
	}
	for _, y := range []int{0, 1, 1600, 1900, 1999, 2000, 2003, 2004, 2100, 9999} {
		for mo := 0; mo < 100; mo++ {
			for d := 0; d < 100; d++ {
				check(fmt.Sprintf("%04d-%02d-%02d", y, mo, d))
				check(fmt.Sprintf("%04d-%02d-%02dZ", y, mo, d))
			}
		}
	}
	for h := 0; h < 100; h++ {
		for mi := 0; mi < 100; mi += 3 {
			for s := 0; s < 100; s += 7 {
				check(fmt.Sprintf("%02d:%02d:%02d", h, mi, s))
				check(fmt.Sprintf("2004-02-29T%02d:%02d:%02d.25+01:00", h, mi, s))
			}
		}
	}
}

// reconShapeValues are the numbers TestReconShape and FuzzReconShape
// rebuild each base with: the base's own, small steps, steps that add or
// drop digits, signs, and values far outside any field's range.
func reconShapeValues(bs shape) []int64 {
	v := bs.v
	return []int64{v, v + 1, v - 1, -v, 0, 1, -1, v * 10, v / 10, v + 86400, v - 86400, v + 3600*1000,
		v + 1e6, v - 1e6, 9, 10, 99, 100, 1e9, -1e9, 1e12, 1e15, 1e17, 999999999999999999, -999999999999999999,
		1 << 40, -(1 << 40), 3155760000 * 1000, -3155760000 * 1000, 1<<62 - 1, -1 << 62}
}

func checkReconShape(t testing.TB, base []byte, v int64) {
	bs := parseShape(base)
	if bs.kind == shNone {
		return
	}
	out := recon(nil, base, bs, v)
	if got, want := reconShape(out, base, bs, v), parseShape(out); got != want {
		t.Fatalf("reconShape(recon(%q, %d) = %q) = %+v, parseShape gives %+v", base, v, out, got, want)
	}
}

// TestReconShape checks the decoder's shortcut for the shape of a value
// rebuilt from a delta against its definition, parsing the rebuilt text,
// over the layout samples and random mutations of them.
func TestReconShape(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	bases := append([]string(nil), shapeSamples...)
	for range 2000 {
		b := []byte(shapeSamples[r.Intn(len(shapeSamples))])
		if len(b) > 0 {
			i := r.Intn(len(b))
			b = append(b[:i], append([]byte{"0-.9:T x"[r.Intn(8)]}, b[i:]...)...)
		}
		bases = append(bases, string(b))
	}
	for _, base := range bases {
		b := []byte(base)
		for _, v := range reconShapeValues(parseShape(b)) {
			checkReconShape(t, b, v)
		}
		for range 20 {
			checkReconShape(t, b, r.Int63n(1<<uint(r.Intn(62)+1))-r.Int63n(1<<20))
		}
	}
}

func FuzzReconShape(f *testing.F) {
	for _, s := range shapeSamples {
		f.Add(s, int64(12345))
	}
	f.Fuzz(func(t *testing.T, base string, v int64) {
		checkReconShape(t, []byte(base), v)
	})
}
