package xmltok

// Value shapes. A value whose text is a number or an ISO 8601 time can
// be sent as a delta from an earlier value of the same shape; the
// decoder rebuilds the text from the earlier value's layout (prefix,
// suffix, zero padding, fraction digits, 'T', zone) and the new number.
// The encoder uses a delta only after checking that this rebuild gives
// back exactly the bytes of the message, so no layout detail the parser
// ignores can ever be lost.
const (
	shNone = iota
	shNum
	shDateTime // YYYY-MM-DDThh:mm:ss[.f{1,6}][zone]
	shDate     // YYYY-MM-DD[zone]
	shTime     // hh:mm:ss[.f{1,6}][zone]
)

type shape struct {
	kind  uint8
	frac  uint8  // fraction digits
	width uint8  // shNum: zero-padded width of the integer part, 0 if natural
	pre   uint16 // shNum: bytes before the number
	suf   uint16 // bytes after the number or time (the zone)
	v     int64  // the number scaled by 10^frac; seconds*10^frac; days
}

var pow10 = [...]int64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18}

// units are the step sizes a delta of each kind may be coded in: the
// encoder uses the largest that divides the delta, so day steps of a
// timestamp or cents of a price cost a few bits. Each unit divides the
// next, so the units that divide a delta are always the first few.
func units(s *shape) *[5]int64 { return &unitTab[s.kind][s.frac] }

// unitTab holds units by kind and fraction digits, computed once: units
// are looked up for every delta coded.
var unitTab = func() (t [shTime + 1][len(pow10)][5]int64) {
	for k := range t {
		for f := range t[k] {
			switch k {
			case shDateTime, shTime:
				p := pow10[f]
				t[k][f] = [5]int64{1, p, 60 * p, 3600 * p, 86400 * p}
			case shDate:
				t[k][f] = [5]int64{1, 7, 7, 7, 7}
			default:
				t[k][f] = [5]int64{1, 10, 100, 1000, 10000}
			}
		}
	}
	return t
}()

func isTimeKind(k uint8) bool { return k >= shDateTime }

func parseShape(b []byte) shape {
	if len(b) == 0 || len(b) > maxLast {
		return shape{}
	}
	if s, ok := parseTime(b); ok {
		return s
	}
	return parseNum(b)
}

func d2(b []byte, i int) (int64, bool) {
	if i+2 > len(b) || !isDigit(b[i]) || !isDigit(b[i+1]) {
		return 0, false
	}
	return int64(b[i]-'0')*10 + int64(b[i+1]-'0'), true
}

// validZone accepts any short suffix after a time as its "zone": Z,
// +hh:mm, and whatever else a sender appends (Go's "+05:30" layout, for
// one, prints "+00:120"). The suffix is copied verbatim from the base
// value, and the encoder checks the rebuilt text, so no form is unsafe.
func validZone(z []byte) bool {
	if len(z) > 8 {
		return false
	}
	for _, c := range z {
		if c == 'T' || c == ' ' {
			return false
		}
	}
	return true
}

// parseClock parses hh:mm:ss[.f] at i and returns seconds*10^frac.
func parseClock(b []byte, i int) (v int64, frac int, end int, ok bool) {
	h, ok1 := d2(b, i)
	m, ok2 := d2(b, i+3)
	s, ok3 := d2(b, i+6)
	if !ok1 || !ok2 || !ok3 || b[i+2] != ':' || b[i+5] != ':' {
		return 0, 0, 0, false
	}
	v = h*3600 + m*60 + s
	end = i + 8
	if end < len(b) && b[end] == '.' {
		j := end + 1
		for j < len(b) && isDigit(b[j]) {
			j++
		}
		frac = j - end - 1
		if frac == 0 || frac > 7 {
			return 0, 0, 0, false
		}
		var f int64
		for _, c := range b[end+1 : j] {
			f = f*10 + int64(c-'0')
		}
		v = v*pow10[frac] + f
		end = j
	}
	return v, frac, end, true
}

func parseTime(b []byte) (shape, bool) {
	n := len(b)
	if n >= 10 && b[4] == '-' && b[7] == '-' {
		y1, ok1 := d2(b, 0)
		y2, ok2 := d2(b, 2)
		mo, ok3 := d2(b, 5)
		d, ok4 := d2(b, 8)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return shape{}, false
		}
		days := daysFromCivil(y1*100+y2, mo, d)
		if n >= 19 && b[10] == 'T' {
			secs, frac, end, ok := parseClock(b, 11)
			if !ok || !validZone(b[end:]) {
				return shape{}, false
			}
			return shape{kind: shDateTime, frac: uint8(frac), suf: uint16(n - end), v: days*86400*pow10[frac] + secs}, true
		}
		if validZone(b[10:]) {
			return shape{kind: shDate, suf: uint16(n - 10), v: days}, true
		}
		return shape{}, false
	}
	if n >= 8 && b[2] == ':' {
		secs, frac, end, ok := parseClock(b, 0)
		if ok && validZone(b[end:]) {
			return shape{kind: shTime, frac: uint8(frac), suf: uint16(n - end), v: secs}, true
		}
	}
	return shape{}, false
}

// parseNum finds the last number in b: digits with an optional fraction
// and sign. The text around it is the prefix and suffix that a delta
// keeps ("Room A123", "T068225", "Orders12", "27.10").
func parseNum(b []byte) shape {
	j := len(b) - 1
	for j >= 0 && !isDigit(b[j]) {
		j--
	}
	if j < 0 {
		return shape{}
	}
	end := j + 1
	i := j
	for i >= 0 && isDigit(b[i]) {
		i--
	}
	intStart, intEnd, frac := i+1, end, 0
	if i >= 1 && b[i] == '.' && isDigit(b[i-1]) {
		frac = end - i - 1
		intEnd = i
		k := i - 1
		for k >= 0 && isDigit(b[k]) {
			k--
		}
		intStart = k + 1
	}
	if intEnd-intStart+frac > maxDigits {
		return shape{}
	}
	neg := intStart > 0 && b[intStart-1] == '-'
	pre := intStart
	if neg {
		pre--
	}
	var v int64
	for _, c := range b[intStart:intEnd] {
		v = v*10 + int64(c-'0')
	}
	if frac > 0 {
		for _, c := range b[intEnd+1 : end] {
			v = v*10 + int64(c-'0')
		}
	}
	if neg {
		v = -v
	}
	width := 0
	if intEnd-intStart > 1 && b[intStart] == '0' {
		width = intEnd - intStart
	}
	return shape{kind: shNum, frac: uint8(frac), width: uint8(width), pre: uint16(pre), suf: uint16(len(b) - end), v: v}
}

// appendPad appends u in decimal, zero-padded to w digits.
func appendPad(dst []byte, u uint64, w int) []byte {
	var buf [20]byte
	i := len(buf)
	for u >= 10 {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
	}
	i--
	buf[i] = byte('0' + u)
	for n := len(buf) - i; n < w; n++ {
		dst = append(dst, '0')
	}
	return append(dst, buf[i:]...)
}

// appendIntPad is appendPad for signed values; only hostile payloads
// produce negative clock fields, but they must not crash the decoder.
func appendIntPad(dst []byte, v int64, w int) []byte {
	// Clock and date fields, most of what is rebuilt: two or four digits
	// without the general loop.
	switch {
	case w == 2 && uint64(v) < 100:
		return append(dst, byte('0'+v/10), byte('0'+v%10))
	case w == 4 && uint64(v) < 10000:
		return append(dst, byte('0'+v/1000), byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10))
	}
	if v < 0 {
		dst = append(dst, '-')
		return appendPad(dst, -uint64(v), w)
	}
	return appendPad(dst, uint64(v), w)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// recon appends the text of value v in the layout of base (whose shape
// is bs). It must be total: the decoder calls it with hostile values.
func recon(dst, base []byte, bs shape, v int64) []byte {
	zone := base[len(base)-int(bs.suf):]
	switch bs.kind {
	case shNum:
		dst = append(dst, base[:bs.pre]...)
		u := uint64(v)
		if v < 0 {
			dst = append(dst, '-')
			u = -u
		}
		p := uint64(pow10[bs.frac])
		dst = appendPad(dst, u/p, int(bs.width))
		if bs.frac > 0 {
			dst = append(dst, '.')
			dst = appendPad(dst, u%p, int(bs.frac))
		}
	case shDateTime, shDate:
		days, sod, f := v, int64(0), int64(0)
		p := pow10[bs.frac]
		if bs.kind == shDateTime {
			secs := floorDiv(v, p)
			f = v - secs*p
			days = floorDiv(secs, 86400)
			sod = secs - days*86400
		}
		y, m, d := civilFromDays(days)
		dst = appendIntPad(dst, y, 4)
		dst = append(dst, '-')
		dst = appendIntPad(dst, m, 2)
		dst = append(dst, '-')
		dst = appendIntPad(dst, d, 2)
		if bs.kind == shDateTime {
			dst = append(dst, 'T')
			dst = appendClock(dst, sod, f, int(bs.frac))
		}
	case shTime:
		p := pow10[bs.frac]
		secs := floorDiv(v, p)
		dst = appendClock(dst, secs, v-secs*p, int(bs.frac))
	}
	return append(dst, zone...)
}

// reconShape is parseShape(out) for out = recon(.., base, bs, v): the
// decoder needs the shape of every value it rebuilds from a delta, and
// parsing the text it has just formatted cost a tenth of decoding a
// number-heavy message. Where the layout guarantees what the parse would
// find, the shape is worked out instead: the same layout with the new
// number (and, for a padded number, the padding that is left). Where it
// does not (a prefix ending in a digit, a sign or a point, which the
// number could run into; a year or hour that outgrew its digits; text
// that happens to read as a time) it parses. TestReconShape holds the
// two equal.
func reconShape(out, base []byte, bs shape, v int64) shape {
	if len(out) == 0 || len(out) > maxLast {
		return shape{}
	}
	switch bs.kind {
	case shNum:
		if bs.pre > 0 {
			if c := base[bs.pre-1]; isDigit(c) || c == '.' || c == '-' {
				break
			}
		}
		if len(out) >= 8 && (out[2] == ':' || len(out) >= 10 && out[4] == '-' && out[7] == '-') {
			break // may read as a time
		}
		u := uint64(v)
		if v < 0 {
			u = -u
		}
		ip := decDigits(u / uint64(pow10[bs.frac]))
		if max(ip, int(bs.width))+int(bs.frac) > maxDigits {
			return shape{}
		}
		s := bs
		s.v = v
		if int(bs.width) <= ip {
			s.width = 0
		}
		return s
	case shDateTime, shDate, shTime:
		// The year kept four digits, or the hour two.
		kept := out[4] == '-'
		if bs.kind == shTime {
			kept = out[2] == ':'
		}
		if kept && isDigit(out[0]) {
			s := bs
			s.v = v
			return s
		}
	}
	return parseShape(out)
}

func appendClock(dst []byte, secs, f int64, frac int) []byte {
	h := floorDiv(secs, 3600)
	r := secs - h*3600
	dst = appendIntPad(dst, h, 2)
	dst = append(dst, ':')
	dst = appendIntPad(dst, r/60, 2)
	dst = append(dst, ':')
	dst = appendIntPad(dst, r%60, 2)
	if frac > 0 {
		dst = append(dst, '.')
		dst = appendIntPad(dst, f, frac)
	}
	return dst
}

// daysFromCivil and civilFromDays are Howard Hinnant's proleptic
// Gregorian conversions; plain integer arithmetic, total on any input.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	if mp < 10 {
		m = mp + 3
	} else {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// isUUID reports whether v ends in a textual uuid of one letter case and
// returns the length of the prefix before it ("urn:uuid:", "uuid:").
func isUUID(v []byte) (prefix int, upper, ok bool) {
	if len(v) < 36 || len(v) > 36+64 {
		return 0, false, false
	}
	u := v[len(v)-36:]
	lower, up := false, false
	for i, c := range u {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return 0, false, false
			}
			continue
		}
		switch {
		case isDigit(c):
		case c >= 'a' && c <= 'f':
			lower = true
		case c >= 'A' && c <= 'F':
			up = true
		default:
			return 0, false, false
		}
	}
	if lower && up {
		return 0, false, false
	}
	return len(v) - 36, up, true
}

func hexVal(c byte) uint32 {
	switch {
	case isDigit(c):
		return uint32(c - '0')
	case c >= 'a' && c <= 'f':
		return uint32(c-'a') + 10
	}
	return uint32(c-'A') + 10
}
