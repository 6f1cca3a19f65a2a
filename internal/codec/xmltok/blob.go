package xmltok

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"unicode/utf8"
	"unsafe"

	"github.com/klauspost/compress/huff0"
)

// Blobs: long high-entropy runs (base64 payloads, binary junk) are not
// worth the per-bit models, which spend about eight adaptive decisions
// per byte to save nothing over an order-0 code. A value literal that
// starts such a run is coded as a blob: its lengths and end state in the
// range-coded stream, its bytes in the raw section, in chunks each either
// huff0-compressed or stored. Blob bytes train nothing but the value
// context's last value, like any literal.
const (
	// blobMin is the shortest run looked at, and the sample the decision
	// is taken on.
	blobMin = 256
	// blobChunk is the most bytes of a blob one huff0 block holds.
	blobChunk = 64 << 10
	// blob4X: chunks at least this long use huff0's four-stream format.
	blob4X = 1024
	// blobHuffMin: shorter chunks are always stored.
	blobHuffMin = 32
	// blobWin is the window the extension over binary junk tests.
	blobWin = 32
	// maxSensitive is the longest of sensitiveNames.
	maxSensitive = len("BinarySecurityToken")
)

// clog[c] is c*log2(c) in 1/16 bit, for the sample entropy.
var clog [blobMin + 1]int32

func init() {
	for c := 2; c <= blobMin; c++ {
		clog[c] = int32(math.Round(16 * float64(c) * math.Log2(float64(c))))
	}
}

// isJunk is a byte that XML text does not hold: a control byte below
// tab, or any byte with the high bit set (counted together with a UTF-8
// check, so that non-ASCII text is not taken for junk).
func isJunk(c byte) bool { return c >= 0x80 || c < '\t' }

// junkCount counts the junk bytes of b, eight at a time.
func junkCount(b []byte) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	n := 0
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		hi := x & highs
		// The high bit of each byte of low7+0x77 is set where low7 >= 9.
		ge9 := (x&^highs + (0x80-'\t')*ones) & highs
		n += bits.OnesCount64(hi | ^ge9&highs)
		b = b[8:]
	}
	for _, c := range b {
		if isJunk(c) {
			n++
		}
	}
	return n
}

// validUTF8Cut reports whether b is valid UTF-8 but for a character cut
// at its end.
func validUTF8Cut(b []byte) bool {
	for k := 0; k < utf8.UTFMax && k <= len(b); k++ {
		if utf8.Valid(b[:len(b)-k]) {
			return true
		}
	}
	return false
}

// sampleBits is 16*256 times the order-0 entropy of w (256 bytes at
// most) in bits per byte, scaled as if w were 256 bytes long.
func sampleBits(w []byte) int32 {
	var h [256]uint16
	for _, c := range w {
		h[c]++
	}
	var s int32
	for _, n := range h {
		s += clog[n]
	}
	// H = log2(n) - s/(16n)
	n := int32(len(w))
	return int32(16*math.Log2(float64(n)))*blobMin - s*blobMin/max(n, 1)
}

// dense reports whether a sample of text looks like encoded binary
// (base64 and the like): no more spaces than a token, and at least 5
// bits of order-0 entropy per byte.
func dense(w []byte) bool {
	spaces := 0
	for _, c := range w {
		if c == ' ' {
			spaces++
		}
	}
	return spaces*16 < len(w) && sampleBits(w) >= 5*16*blobMin
}

// blobPlan is the encoder's decision for the value msg[pos:end] (state
// st), a literal: whether it starts a blob, where the blob ends and the
// scanner state there. Binary junk (invalid UTF-8 with many control and
// high bytes) extends the blob over what follows while it looks the
// same, then up to the next '<', where the scanner resumes in text
// state; if what it would swallow names a secret element or attribute
// it ends at its value, so that the secret flags stay right. A dense
// ASCII value (base64) is a blob by itself; non-ASCII text (UTF-8 in
// any script) stays on the models, which its order-1 structure pays.
func (m *model) blobPlan(pos, end int, st uint8) (bend int, bst uint8, ok bool) {
	msg := m.msg
	if st == stValDigits || len(msg)-pos < blobMin {
		return 0, 0, false
	}
	w := msg[pos : pos+blobMin]
	if end-pos < blobMin && junkCount(w[:16]) == 0 {
		// Short and clean at its start: not junk (random bytes start
		// with 16 clean ones once in 200000), too short to be dense. Most
		// literals end here, for the price of two words.
		return 0, 0, false
	}
	junk := junkCount(w)
	if junk >= blobMin/4 && !validUTF8Cut(w) {
		q := end
		for q < len(msg) {
			ww := msg[q:min(q+blobWin, len(msg))]
			if junkCount(ww)*8 < len(ww) {
				break
			}
			q += len(ww)
		}
		bend, bst = len(msg), stText
		if q < len(msg) {
			// Mostly clean from q on: cut after its last junk byte, at
			// the next '<' if there is one near.
			p := q
			ww := msg[q:min(q+blobWin, len(msg))]
			for i := len(ww) - 1; i >= 0; i-- {
				if isJunk(ww[i]) {
					p = q + i + 1
					break
				}
			}
			if k := bytes.IndexByte(msg[p:min(p+blobMin, len(msg))], '<'); k >= 0 {
				bend = p + k
			} else {
				bend, bst = p, stValText
			}
		}
		if bend > end && namesSecret(msg, end, bend) {
			bend, bst = end, afterValue(st)
		}
		return bend, bst, true
	}
	if junk == 0 && end-pos >= blobMin && dense(w) {
		return end, afterValue(st), true
	}
	return 0, 0, false
}

// namesSecret reports whether msg[from:to] may hold markup that changes
// the secret flags (see analyze): a sensitive name after a '<' or "</",
// or before an '='. It looks at every '<' and '=', whatever the scanner
// state, and reads names past to, so it errs on the side of yes.
func namesSecret(msg []byte, from, to int) bool {
	for i := from; i < to; {
		k := bytes.IndexByte(msg[i:to], '<')
		if k < 0 {
			break
		}
		i += k + 1
		j := i
		if j < len(msg) && msg[j] == '/' {
			j++
		}
		if isSensitiveName(readName(msg, j)) {
			return true
		}
	}
	for i := from; i < to; {
		k := bytes.IndexByte(msg[i:to], '=')
		if k < 0 {
			break
		}
		j := i + k - 1
		i += k + 1
		for j >= 0 && isSpace(msg[j]) {
			j--
		}
		// Only the local name counts: at most the longest sensitive name
		// back from the end, up to a ':' or the start of the name.
		e, lim := j+1, max(j-maxSensitive-1, -1)
		for j > lim && isNameByte(msg[j]) && msg[j] != ':' {
			j--
		}
		if j >= 0 && j == lim {
			continue // longer than any sensitive name
		}
		if isSensitiveName(msg[j+1 : e]) {
			return true
		}
	}
	return false
}

// encBlob codes v, a value literal, and the ext bytes after it as a blob
// that ends in state bst.
func (m *model) encBlob(c *coder, x *vctx, v []byte, ext int, bst uint8) {
	c.num(&m.blobLen, uint64(len(v)))
	c.num(&m.blobExt, uint64(ext))
	if ext > 0 {
		c.tree(m.blobSt[:], 4, uint32(bst))
	}
	if !c.discard {
		m.blobBody(c, m.msg[m.vpos:m.vpos+len(v)+ext])
	}
	m.afterBlob(x, v, ext)
}

// afterBlob is the model update of a blob, the same on both ends. The
// value's shape is parsed as for any value: contexts keep a value with
// its parsed shape, and the association path relies on it.
func (m *model) afterBlob(x *vctx, v []byte, ext int) {
	m.h = mix(m.h, 7^hashBytes(v)^uint64(ext)<<8)
	m.setLast(x, v, parseShape(v))
}

// blobBody appends the raw-section form of b: per chunk of blobChunk
// bytes (the last one shorter), uvarint 0 and the bytes, or uvarint
// n > 0 and n bytes of huff0 (1X below blob4X bytes, else 4X).
func (m *model) blobBody(c *coder, b []byte) {
	if m.huf == nil {
		m.huf = &huff0.Scratch{Reuse: huff0.ReusePolicyNone, WantLogLess: 5}
	}
	for len(b) > 0 {
		ch := b[:min(len(b), blobChunk)]
		b = b[len(ch):]
		var out []byte
		if len(ch) >= blobHuffMin && !random(ch) {
			var err error
			if len(ch) >= blob4X {
				out, _, err = huff0.Compress4X(ch, m.huf)
			} else {
				out, _, err = huff0.Compress1X(ch, m.huf)
			}
			if err != nil || len(out)+binary.MaxVarintLen32 >= len(ch) {
				out = nil
			}
		}
		if out == nil {
			c.raw = append(c.raw, 0)
			c.raw = append(c.raw, ch...)
			continue
		}
		c.raw = binary.AppendUvarint(c.raw, uint64(len(out)))
		c.raw = append(c.raw, out...)
	}
}

// decBlob decodes a blob after its flag: it appends the value and the
// bytes after it, and sets m.ext and m.extSt for the message loop.
func (m *model) decBlob(c *coder, x *vctx, dst []byte, limit int) []byte {
	vl := c.num(&m.blobLen, 0)
	ext := c.num(&m.blobExt, 0)
	room := uint64(limit - len(dst))
	if vl > room || ext > room-vl {
		m.fail("blob of %d+%d bytes overruns the message", vl, ext)
		return dst
	}
	if ext > 0 {
		st := uint8(c.tree(m.blobSt[:], 4, 0))
		if st >= nStates || st == stProse || st == stValDigits {
			m.fail("bad state %d after a blob", st)
			return dst
		}
		m.ext, m.extSt = int(ext), st
	}
	n := int(vl + ext)
	start := len(dst)
	dst = grow(dst, n, limit)
	for n > 0 {
		k := min(n, blobChunk)
		h, w := binary.Uvarint(c.rawIn)
		if w <= 0 {
			m.fail("bad blob chunk header")
			return dst
		}
		c.rawIn = c.rawIn[w:]
		if h == 0 {
			if k > len(c.rawIn) {
				m.fail("blob chunk overruns the raw section")
				return dst
			}
			dst = append(dst, c.rawIn[:k]...)
			c.rawIn = c.rawIn[k:]
			n -= k
			continue
		}
		if h > uint64(len(c.rawIn)) {
			m.fail("blob chunk overruns the raw section")
			return dst
		}
		comp := c.rawIn[:h]
		c.rawIn = c.rawIn[h:]
		s, rest, err := huff0.ReadTable(comp, m.huf)
		if err != nil {
			m.fail("blob chunk table: %v", err)
			return dst
		}
		m.huf = s
		buf := dst[len(dst) : len(dst) : len(dst)+k]
		var out []byte
		if k >= blob4X {
			out, err = s.Decoder().Decompress4X(buf, rest)
		} else {
			out, err = s.Decoder().Decompress1X(buf, rest)
		}
		if err != nil || len(out) != k {
			m.fail("blob chunk does not decode to %d bytes", k)
			return dst
		}
		if unsafe.SliceData(out) == unsafe.SliceData(buf[:1]) {
			dst = dst[:len(dst)+k]
		} else {
			dst = append(dst, out...)
		}
		n -= k
	}
	m.afterBlob(x, dst[start:start+int(vl)], int(ext))
	return dst
}

// random reports whether a chunk looks incompressible to an order-0
// code: a sample of 256 of its bytes, spread over it, has 7 bits of
// entropy or more. huff0 is not tried on it.
func random(ch []byte) bool {
	var w [blobMin]byte
	n := 0
	if len(ch) <= blobMin {
		n = copy(w[:], ch)
	} else {
		step := len(ch) / blobMin
		for i := range w {
			w[i] = ch[i*step]
		}
		n = blobMin
	}
	return sampleBits(w[:n]) >= 7*16*blobMin
}
