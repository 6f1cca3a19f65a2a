package codec

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"unsafe"
)

// The head model's values without allocations: its strings are views of bytes that stay
// unchanged while the string is in use (the message being coded, a remembered head's
// bytes, the model's scratch buffer), and numbers and dates are parsed and formatted by
// hand, into buffers the model keeps.

// view returns b[start:] as a string sharing b's bytes. The caller must not change those
// bytes while the string is in use; appending to b is fine (an append that moves b leaves
// the old bytes, which the string keeps alive, as they were).
func view(b []byte, start int) string {
	if start == len(b) {
		return ""
	}
	return unsafe.String(&b[start], len(b)-start)
}

// bytesView returns b as a string sharing b's bytes (see view).
func bytesView(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// stringBytes returns s's bytes, which must not be changed.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// commonPrefix is the length of the longest common prefix of a and b, compared 8 bytes
// at a time.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	x, y := stringBytes(a)[:n], stringBytes(b)[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		if d := binary.LittleEndian.Uint64(x[i:]) ^ binary.LittleEndian.Uint64(y[i:]); d != 0 {
			return i + bits.TrailingZeros64(d)/8
		}
	}
	for i < n && x[i] == y[i] {
		i++
	}
	return i
}

// commonSuffix is the length of the longest common suffix of a and b, compared 8 bytes
// at a time.
func commonSuffix(a, b string) int {
	n := min(len(a), len(b))
	x, y := stringBytes(a)[len(a)-n:], stringBytes(b)[len(b)-n:]
	i := 0 // bytes matched from the end
	for ; i+8 <= n; i += 8 {
		if d := binary.BigEndian.Uint64(x[n-i-8:]) ^ binary.BigEndian.Uint64(y[n-i-8:]); d != 0 {
			return i + bits.TrailingZeros64(d)/8
		}
	}
	for i < n && x[n-1-i] == y[n-1-i] {
		i++
	}
	return i
}

// canonicalInt parses s when it is the canonical decimal form of an int64: what
// strconv.FormatInt gives back ("0", "-12"; not "007", "-0", "+1", " 1").
func canonicalInt(s string) (int64, bool) {
	d, neg := s, false
	if len(d) > 0 && d[0] == '-' {
		d, neg = d[1:], true
	}
	if len(d) == 0 || len(d) > 19 || d[0] == '0' && (len(d) > 1 || neg) {
		return 0, false
	}
	var n uint64 // 19 digits fit
	for i := 0; i < len(d); i++ {
		c := d[i] - '0'
		if c > 9 {
			return 0, false
		}
		n = n*10 + uint64(c)
	}
	if neg {
		if n > 1<<63 {
			return 0, false
		}
		return int64(-n), true
	}
	if n > math.MaxInt64 {
		return 0, false
	}
	return int64(n), true
}

// decimal parses s when it is a canonical decimal of at most 18 characters, small
// enough that sums and differences of two never overflow.
func decimal(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	return canonicalInt(s)
}

// tailNumber splits s into a prefix and the canonical non-negative number its trailing
// digits form ("8f3a91c2-421" -> "8f3a91c2-", 421).
func tailNumber(s string) (prefix string, n int64, ok bool) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if i == len(s) || len(s)-i > 18 || (s[i] == '0' && i < len(s)-1) {
		return "", 0, false
	}
	for j := i; j < len(s); j++ {
		n = n*10 + int64(s[j]-'0')
	}
	return s[:i], n, true
}

// httpDate is the only date format HTTP/1.1 senders generate (RFC 9110 §5.6.7).
const httpDate = "Mon, 02 Jan 2006 15:04:05 GMT"

var (
	dayNames   = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	monthNames = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// twoDigits parses s[i:i+2] as a number of two decimal digits.
func twoDigits(s string, i int) (int64, bool) {
	a, b := s[i]-'0', s[i+1]-'0'
	return int64(a)*10 + int64(b), a <= 9 && b <= 9
}

// name3 packs three bytes of s from i, to look names up with a switch.
func name3(s string, i int) uint32 { return uint32(s[i])<<16 | uint32(s[i+1])<<8 | uint32(s[i+2]) }

// monthOf returns the month (1-12) named by its abbreviation (case as formatted), or 0.
func monthOf(name uint32) int64 {
	switch name {
	case 'J'<<16 | 'a'<<8 | 'n':
		return 1
	case 'F'<<16 | 'e'<<8 | 'b':
		return 2
	case 'M'<<16 | 'a'<<8 | 'r':
		return 3
	case 'A'<<16 | 'p'<<8 | 'r':
		return 4
	case 'M'<<16 | 'a'<<8 | 'y':
		return 5
	case 'J'<<16 | 'u'<<8 | 'n':
		return 6
	case 'J'<<16 | 'u'<<8 | 'l':
		return 7
	case 'A'<<16 | 'u'<<8 | 'g':
		return 8
	case 'S'<<16 | 'e'<<8 | 'p':
		return 9
	case 'O'<<16 | 'c'<<8 | 't':
		return 10
	case 'N'<<16 | 'o'<<8 | 'v':
		return 11
	case 'D'<<16 | 'e'<<8 | 'c':
		return 12
	}
	return 0
}

// dayKeys are dayNames packed as name3 packs them.
var dayKeys = func() (k [7]uint32) {
	for i, name := range dayNames {
		k[i] = name3(name, 0)
	}
	return k
}()

// parseHTTPDate parses s as an HTTP date that formats back to exactly s (what
// time.Parse(httpDate, s) and Format give back: a year of 4 digits, fields in range,
// the weekday of the date), in Unix seconds.
func parseHTTPDate(s string) (int64, bool) {
	if len(s) != len(httpDate) || s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' {
		return 0, false
	}
	clock, ok := clockOf(s)
	month := monthOf(name3(s, 8))
	day, ok1 := twoDigits(s, 5)
	y1, ok2 := twoDigits(s, 12)
	y2, ok3 := twoDigits(s, 14)
	year := y1*100 + y2
	if !ok || month == 0 || !(ok1 && ok2 && ok3) || day < 1 || day > daysIn(month, year) {
		return 0, false
	}
	days := daysFromCivil(year, month, day)
	if name3(s, 0) != dayKeys[floorMod(days+4, 7)] { // 1970-01-01 was a Thursday
		return 0, false
	}
	return days*86400 + clock, true
}

// dayPrefix is the length of an HTTP date's day part: "Sun, 22 Nov 2026 ".
const dayPrefix = len("Mon, 02 Jan 2006 ")

// clockOf parses the time of day of an HTTP date of the right length ("10:03:45 GMT"
// from dayPrefix on), in seconds.
func clockOf(s string) (int64, bool) {
	if s[19] != ':' || s[22] != ':' || s[25] != ' ' || s[26] != 'G' || s[27] != 'M' || s[28] != 'T' {
		return 0, false
	}
	hour, ok1 := twoDigits(s, 17)
	minute, ok2 := twoDigits(s, 20)
	sec, ok3 := twoDigits(s, 23)
	return hour*3600 + minute*60 + sec, ok1 && ok2 && ok3 && hour <= 23 && minute <= 59 && sec <= 59
}

// parseHTTPDates parses r and, when r is an HTTP date, s (rOK, sOK: as parseHTTPDate
// would answer). Two dates of the same day, the common case (a Date header that ticks),
// share the parsing of their day.
func parseHTTPDates(r, s string) (a, b int64, rOK, sOK bool) {
	if len(r) == len(httpDate) && len(s) == len(httpDate) && r[:dayPrefix] == s[:dayPrefix] {
		if b, sOK = parseHTTPDate(s); sOK {
			// r is s's day at another time: a date when its time is one.
			rc, rOK := clockOf(r)
			sc, _ := clockOf(s)
			return b - sc + rc, b, rOK, rOK
		}
	}
	if a, rOK = parseHTTPDate(r); rOK {
		b, sOK = parseHTTPDate(s)
	}
	return a, b, rOK, sOK
}

// appendHTTPDateFrom is appendHTTPDate(dst, t) for t near the date s of Unix second u:
// a t of the same day only rewrites s's time.
func appendHTTPDateFrom(dst []byte, s string, u, t int64) ([]byte, bool) {
	day := floorDiv(u, 86400)
	if floorDiv(t, 86400) != day {
		return appendHTTPDate(dst, t)
	}
	sec := t - day*86400
	dst = append(dst, s[:dayPrefix]...)
	dst = appendTwo(dst, sec/3600)
	dst = append(dst, ':')
	dst = appendTwo(dst, sec/60%60)
	dst = append(dst, ':')
	dst = appendTwo(dst, sec%60)
	return append(dst, " GMT"...), true
}

// appendHTTPDate appends the HTTP date of Unix second t; ok is false (dst unchanged) when
// its year has other than 4 digits, as then it would not parse back.
func appendHTTPDate(dst []byte, t int64) ([]byte, bool) {
	if t < minHTTPDate || t > maxHTTPDate {
		return dst, false
	}
	days := floorDiv(t, 86400)
	sec := t - days*86400
	year, month, day := civilFromDays(days)
	dst = append(dst, dayNames[floorMod(days+4, 7)]...)
	dst = append(dst, ',', ' ')
	dst = appendTwo(dst, day)
	dst = append(dst, ' ')
	dst = append(dst, monthNames[month-1]...)
	dst = append(dst, ' ')
	dst = appendTwo(dst, year/100)
	dst = appendTwo(dst, year%100)
	dst = append(dst, ' ')
	dst = appendTwo(dst, sec/3600)
	dst = append(dst, ':')
	dst = appendTwo(dst, sec/60%60)
	dst = append(dst, ':')
	dst = appendTwo(dst, sec%60)
	return append(dst, " GMT"...), true
}

// The Unix seconds of the first and last HTTP dates with a 4-digit year.
var (
	minHTTPDate = daysFromCivil(0, 1, 1) * 86400
	maxHTTPDate = daysFromCivil(10000, 1, 1)*86400 - 1
)

func appendTwo(dst []byte, v int64) []byte {
	return append(dst, byte('0'+v/10), byte('0'+v%10))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

func isLeap(year int64) bool { return year%4 == 0 && (year%100 != 0 || year%400 == 0) }

// daysIn is the number of days of a month (1-12) of the proleptic Gregorian calendar.
func daysIn(month, year int64) int64 {
	switch month {
	case 2:
		if isLeap(year) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is the number of days from 1970-01-01 to a date of the proleptic
// Gregorian calendar (H. Hinnant's algorithm).
func daysFromCivil(year, month, day int64) int64 {
	if month <= 2 {
		year--
	}
	era := floorDiv(year, 400)
	yoe := year - era*400
	mp := (month + 9) % 12 // March is 0
	doy := (153*mp+2)/5 + day - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(days int64) (year, month, day int64) {
	z := days + 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	day = doy - (153*mp+2)/5 + 1
	month = mp + 3
	if mp >= 10 {
		month = mp - 9
	}
	year = yoe + era*400
	if month <= 2 {
		year++
	}
	return year, month, day
}

// appendNextStep appends the value that follows s when r changed into s by a numeric
// step (a decimal integer, the trailing number of a string with the same prefix, an HTTP
// date): s advanced by the same step. ok is false (dst unchanged) for any other change.
// The prediction is a plain string both ends compute alike: a value is coded as
// predicted only when it is exactly that string.
func appendNextStep(dst []byte, r, s string) ([]byte, bool) {
	if a, ok := decimal(r); ok {
		if b, ok := decimal(s); ok {
			return strconv.AppendInt(dst, b+(b-a), 10), true // |a|, |b| < 1e18: no overflow
		}
		return dst, false
	}
	if a, b, rOK, sOK := parseHTTPDates(r, s); rOK {
		if sOK {
			return appendHTTPDateFrom(dst, s, b, b+(b-a))
		}
		return dst, false
	}
	if rp, rn, ok := tailNumber(r); ok {
		if sp, sn, ok := tailNumber(s); ok && rp == sp && sn+(sn-rn) >= 0 {
			return strconv.AppendInt(append(dst, sp...), sn+(sn-rn), 10), true
		}
	}
	return dst, false
}
