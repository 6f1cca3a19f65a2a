package xmltok

import (
	"math"
	"math/bits"
)

// prob is an adaptive binary probability: P(bit=0) = (probHalf+p)/probOne.
// Storing it as an offset from one half makes the zero value a valid,
// uninformed model, so model tables need no initialisation loops and
// lazily allocated contexts start in the same state on both ends.
type prob int16

const (
	probBits = 12
	probOne  = 1 << probBits
	probHalf = probOne / 2
	// moveBits sets the adaptation speed: 1/16 of the distance per bit.
	// Faster than LZMA's 1/32 because per-context histories are short.
	moveBits = 4
	rcTop    = 1 << 24
	// maxOverrun is how many bytes past the end of a payload the decoder
	// may read: the encoder drops up to 4 trailing zero bytes of its flush
	// (see finish) and the decoder reads zeros in their place.
	maxOverrun = 4
)

// coder is an LZMA-style binary range coder that runs in one of two
// directions. Its primitives (bit, bitH, tree, num, direct, numDirect)
// work both ways: when encoding they take the symbol and return it, when
// decoding they ignore the argument and return the decoded symbol. A few
// model steps are written once on top of them (codeLen, codeDelta,
// codeRingIdx). Most of the models are not: they are hand-mirrored pairs,
// an encoder half that searches for what to code (a successor, a base, a
// ring index, a blob's end) and a decoder half that validates what it
// reads: encMark/decMark, encMarkModel/decMarkModel, encValue/decValue,
// encValueModel/decValueModel, codePieces/decPieces, encProse/decProse
// (encWord/decOtherWord, encNum/decNum, encProseNum/decProseNum),
// encBlob/decBlob, and treeEnc/treeDec here. Nothing in the code ties a
// pair together: FORMAT.md specifies what both halves must do, and the
// golden payloads (TestGoldenPayloads), the round-trip and fuzz tests
// (which compare both ends' Digest) and TestTokenFormatPinned check that
// they do. A change to one half needs the same change to the other.
type coder struct {
	dec bool
	rng uint32

	// encoder
	low       uint64
	cache     byte
	cacheSize int64
	skip      bool // the first byte shiftLow emits is always 0: drop it
	discard   bool // count nothing, write nothing (model replay of stored messages)
	out       []byte
	raw       []byte // verbatim section: secrets, never range-coded

	// decoder
	code    uint32
	in      []byte
	pos     int
	overrun int
	rawIn   []byte
}

func (c *coder) initEnc(out, raw []byte, discard bool) {
	*c = coder{rng: 0xFFFFFFFF, cacheSize: 1, skip: true, discard: discard, out: out, raw: raw}
}

func (c *coder) initDec(in, raw []byte) {
	*c = coder{dec: true, rng: 0xFFFFFFFF, in: in, rawIn: raw}
	for range 4 {
		c.code = c.code<<8 | uint32(c.next())
	}
}

func (c *coder) next() byte {
	if c.pos < len(c.in) {
		b := c.in[c.pos]
		c.pos++
		return b
	}
	c.overrun++
	return 0
}

func (c *coder) shiftLow() {
	if uint32(c.low) < 0xFF000000 || c.low>>32 != 0 {
		carry := byte(c.low >> 32)
		t := c.cache
		for {
			if c.skip {
				c.skip = false
			} else if !c.discard {
				c.out = append(c.out, t+carry)
			}
			t = 0xFF
			c.cacheSize--
			if c.cacheSize == 0 {
				break
			}
		}
		c.cache = byte(c.low >> 24)
	}
	c.cacheSize++
	c.low = (c.low & 0x00FFFFFF) << 8
}

// finish flushes the encoder and returns the output. It picks the value
// in the final interval with the most trailing zero bytes and drops
// them: the decoder reads zeros past the end, so a message whose
// symbols were all well predicted costs one or two bytes, not five.
func (c *coder) finish() []byte {
	k := 0
	for kk := 4; kk >= 1; kk-- {
		mask := uint64(1)<<(8*kk) - 1
		v := (c.low + mask) &^ mask
		if v < c.low+uint64(c.rng) {
			c.low = v
			k = kk
			break
		}
	}
	for range 5 {
		c.shiftLow()
	}
	if !c.discard {
		c.out = c.out[:len(c.out)-k]
	}
	return c.out
}

// bit codes one binary decision with adaptive probability p.
func (c *coder) bit(p *prob, b uint32) uint32 {
	pv := uint32(int32(*p) + probHalf)
	bound := (c.rng >> probBits) * pv
	if c.dec {
		if c.code < bound {
			c.rng = bound
			*p += prob((probOne - pv) >> moveBits)
			b = 0
		} else {
			c.code -= bound
			c.rng -= bound
			*p -= prob(pv >> moveBits)
			b = 1
		}
		for c.rng < rcTop {
			c.rng <<= 8
			c.code = c.code<<8 | uint32(c.next())
		}
		return b
	}
	if b == 0 {
		c.rng = bound
		*p += prob((probOne - pv) >> moveBits)
	} else {
		c.low += uint64(bound)
		c.rng -= bound
		*p -= prob(pv >> moveBits)
	}
	for c.rng < rcTop {
		c.rng <<= 8
		c.shiftLow()
	}
	return b
}

// direct codes the n low bits of v (n <= 16) with probability one half
// and no model: what it codes leaves no trace in the model state, which
// is why secrets and random uuids use it. All n bits go in one step, by
// splitting the range in 2^n equal parts (the range is at least 2^24
// before and 2^8 after the shift, so the rounding loss is under 1/256
// of a bit); a uuid's 128 bits cost 8 steps, not 128.
func (c *coder) direct(v uint32, n int) uint32 {
	c.rng >>= uint(n)
	mask := uint32(1)<<uint(n) - 1
	if c.dec {
		// A valid stream keeps code < rng<<n; a hostile one may not, and
		// then decodes to garbage, clamped so it stays in n bits.
		v = min(c.code/c.rng, mask)
		c.code -= v * c.rng
		for c.rng < rcTop {
			c.rng <<= 8
			c.code = c.code<<8 | uint32(c.next())
		}
		return v
	}
	v &= mask
	c.low += uint64(v) * uint64(c.rng)
	for c.rng < rcTop {
		c.rng <<= 8
		c.shiftLow()
	}
	return v
}

// rawBytes moves n bytes through the verbatim section: the encoder
// appends v, the decoder takes the next n bytes (nil if there are not
// enough).
func (c *coder) rawBytes(v []byte, n int) []byte {
	if !c.dec {
		if !c.discard {
			c.raw = append(c.raw, v...)
		}
		return v
	}
	if n > len(c.rawIn) {
		return nil
	}
	v, c.rawIn = c.rawIn[:n], c.rawIn[n:]
	return v
}

// tree codes an n-bit symbol with a binary tree of adaptive
// probabilities; p must hold at least 1<<n entries.
func (c *coder) tree(p []prob, n int, v uint32) uint32 {
	if c.dec {
		return c.treeDec(p, n, 1) - 1<<uint(n)
	}
	c.treeEnc(p, n, 1, v)
	return v & (1<<uint(n) - 1)
}

// treeEnc codes the n low bits of v, high first, down a tree from node
// on; bit's encoding step with the range and low end in locals, as in
// treeDec.
func (c *coder) treeEnc(p []prob, n int, node, v uint32) {
	rng, low := c.rng, c.low
	for i := n - 1; i >= 0; i-- {
		b := v >> uint(i) & 1
		pp := &p[node]
		pv := uint32(int32(*pp) + probHalf)
		bound := (rng >> probBits) * pv
		if b == 0 {
			rng = bound
			*pp += prob((probOne - pv) >> moveBits)
		} else {
			low += uint64(bound)
			rng -= bound
			*pp -= prob(pv >> moveBits)
		}
		for rng < rcTop {
			rng <<= 8
			c.low = low
			c.shiftLow()
			low = c.low
		}
		node = node<<1 | b
	}
	c.rng, c.low = rng, low
}

// treeDec decodes n bits of a tree from node on and returns the final
// node. It is bit's decoding step with the range and code in local
// variables: through c they were reloaded after every probability
// update, which the compiler cannot prove does not alias them.
func (c *coder) treeDec(p []prob, n int, node uint32) uint32 {
	rng, code := c.rng, c.code
	for range n {
		pp := &p[node]
		pv := uint32(int32(*pp) + probHalf)
		bound := (rng >> probBits) * pv
		if code < bound {
			rng = bound
			*pp += prob((probOne - pv) >> moveBits)
			node <<= 1
		} else {
			code -= bound
			rng -= bound
			*pp -= prob(pv >> moveBits)
			node = node<<1 | 1
		}
		for rng < rcTop {
			rng <<= 8
			code = code<<8 | uint32(c.next())
		}
	}
	c.rng, c.code = rng, code
	return node
}

// flatStep is the branchless step treeEncFlat and treeDecFlat share, for a bit given as
// one (all ones for a 1, zero for a 0) whose probability *pp was pv: it adapts *pp to the
// bit and returns the new range (bound for a 0, rng-bound for a 1).
func flatStep(pp *prob, pv, bound, rng, one uint32) uint32 {
	*pp += prob(int32((probOne-pv)>>moveBits)&^int32(one) - int32(pv>>moveBits)&int32(one))
	return bound&^one | (rng-bound)&one
}

// treeEncFlat is treeEnc without branches on the bits, for the same bits as treeDecFlat.
func (c *coder) treeEncFlat(p []prob, n int, node, v uint32) {
	rng, low := c.rng, c.low
	for i := n - 1; i >= 0; i-- {
		b := v >> uint(i) & 1
		one := -b // all ones for a 1 bit
		pp := &p[node]
		pv := uint32(int32(*pp) + probHalf)
		bound := (rng >> probBits) * pv
		low += uint64(bound & one)
		rng = flatStep(pp, pv, bound, rng, one)
		for rng < rcTop {
			rng <<= 8
			c.low = low
			c.shiftLow()
			low = c.low
		}
		node = node<<1 | b
	}
	c.rng, c.low = rng, low
}

// treeDecFlat is treeDec without branches on the bits: for the bits of wide numbers
// (numRest), which are near one half, so that a branch on them mispredicts every other
// time. Where a tree's bits are well predicted (lengths, units, bytes) treeDec is faster.
func (c *coder) treeDecFlat(p []prob, n int, node uint32) uint32 {
	rng, code := c.rng, c.code
	for range n {
		pp := &p[node]
		pv := uint32(int32(*pp) + probHalf)
		bound := (rng >> probBits) * pv
		one := uint32(^((int64(code) - int64(bound)) >> 63)) // all ones for a 1 bit
		code -= bound & one
		rng = flatStep(pp, pv, bound, rng, one)
		node = node<<1 | one&1
		for rng < rcTop {
			rng <<= 8
			code = code<<8 | uint32(c.next())
		}
	}
	c.rng, c.code = rng, code
	return node
}

// byte1 codes a byte with an order-1 literal model row.
func (c *coder) byte1(p *[256]prob, v byte) byte {
	return byte(c.tree(p[:], 8, uint32(v)))
}

// numModel codes unsigned integers: the bit length n (0..64) with a
// 6-bit tree of adaptive probabilities, then the top five bits below the
// leading one with a tree per length, then the rest as direct bits.
// Small alphabets (day offsets, row counters, employee ids) approach
// their entropy; wide random numbers cost about their width. The length
// tree takes six decisions whatever the length, where a unary length
// took n+1: random prices and ids of 10 to 20 bits code and cost
// in half the steps.
//
// The rows of top are allocated on first use: a context's numbers have a
// few lengths, and a model with every row was 896 bytes where one with
// the rows it uses is about 300 (per-connection state, issue 19). A
// missing row stands for a row of zero probabilities, so allocating one
// changes no coding.
type numModel struct {
	ln  [64]prob
	top [12]*[32]prob
}

// numTop is how many bits below the leading one numModel models.
const numTop = 5

// numLen codes the bit length of a number: lengths 63 and 64 share the
// tree's last leaf and a direct bit tells them apart.
func (c *coder) numLen(ln *[64]prob, n int) int {
	l := int(c.tree(ln[:], 6, uint32(min(n, 63))))
	if l == 63 {
		l += int(c.direct(uint32(n-63), 1))
	}
	return l
}

func (c *coder) num(m *numModel, v uint64) uint64 {
	nn := c.numLen(&m.ln, bits.Len64(v))
	if nn <= 1 {
		return uint64(nn) // no bits below the leading one
	}
	i := min(nn, len(m.top)-1)
	if m.top[i] == nil {
		m.top[i] = new([32]prob)
	}
	return c.numRest(m.top[i][:], numTop, nn, v)
}

// numRest codes the bits of v below its leading one, given its bit
// length nn: up to topBits of them with the tree tp, the rest direct.
func (c *coder) numRest(tp []prob, topBits, nn int, v uint64) uint64 {
	if nn == 0 {
		return 0
	}
	rem := nn - 1
	r := uint64(1)
	t := min(rem, topBits)
	if c.dec {
		r = uint64(c.treeDecFlat(tp, t, 1)) // the leading one, then the t bits
	} else {
		top := uint32(v>>uint(rem-t)) & (1<<uint(t) - 1)
		c.treeEncFlat(tp, t, 1, top)
		r = r<<uint(t) | uint64(top)
	}
	rem -= t
	for rem > 0 {
		k := min(rem, 16)
		b := c.direct(uint32(v>>uint(rem-k))&(1<<uint(k)-1), k)
		r = r<<uint(k) | uint64(b)
		rem -= k
	}
	return r
}

// costTab[pv] is -log2(pv/probOne) in 1/16 bit, for the encoder's
// choice between equivalent codings (delta base and unit).
var costTab [probOne + 1]uint16

func init() {
	for pv := 1; pv <= probOne; pv++ {
		costTab[pv] = uint16(math.Round(-16 * math.Log2(float64(pv)/probOne)))
	}
}

func costBit(p prob, b uint32) int {
	pv := int32(p) + probHalf
	if b != 0 {
		pv = probOne - pv
	}
	return int(costTab[pv])
}

func costTree(p []prob, n int, v uint32) int {
	node, c := uint32(1), 0
	for i := n - 1; i >= 0; i-- {
		b := v >> uint(i) & 1
		c += costBit(p[node], b)
		node = node<<1 | b
	}
	return c
}

// numDirect is num without a model, for lengths of secrets.
func (c *coder) numDirect(v uint64) uint64 {
	n := bits.Len64(v)
	nn := 0
	for nn < 64 {
		var b uint32
		if nn < n {
			b = 1
		}
		if c.direct(b, 1) == 0 {
			break
		}
		nn++
	}
	if nn == 0 {
		return 0
	}
	r := uint64(1)
	for rem := nn - 1; rem > 0; {
		k := min(rem, 16)
		b := c.direct(uint32(v>>uint(rem-k))&(1<<uint(k)-1), k)
		r = r<<uint(k) | uint64(b)
		rem -= k
	}
	return r
}

func zigzag(d int64) uint64   { return uint64(d<<1) ^ uint64(d>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// hprob is a high-precision adaptive probability for decisions that are
// almost always the same, like "the match model's prediction is right":
// P(bit=0) = (prior+p)/hprobOne, where prior is fixed per slot by the
// caller of bitH (history.confidence, markConfidence). With 16 bits and
// a 1/32 adaptation step it saturates at about 1/2000, so a confirmed
// prediction costs under a thousandth of a bit where a 12-bit prob costs
// a hundredth.
type hprob int32

const (
	hprobBits = 16
	hprobOne  = 1 << hprobBits
	hprobHalf = hprobOne / 2
	hmoveBits = 5
)

// bitH codes one binary decision with the high-precision probability p,
// whose zero value means P(bit=0) = prior/hprobOne: a context that is
// known to be almost always right starts out cheap rather than at one
// half. The range is at least 2^24, so (rng>>16)*pv keeps 8 bits of
// precision.
func (c *coder) bitH(p *hprob, prior int32, b uint32) uint32 {
	pv := uint32(int32(*p) + prior)
	bound := (c.rng >> hprobBits) * pv
	if c.dec {
		if c.code < bound {
			c.rng = bound
			*p += hprob((hprobOne - pv) >> hmoveBits)
			b = 0
		} else {
			c.code -= bound
			c.rng -= bound
			*p -= hprob(pv >> hmoveBits)
			b = 1
		}
		for c.rng < rcTop {
			c.rng <<= 8
			c.code = c.code<<8 | uint32(c.next())
		}
		return b
	}
	if b == 0 {
		c.rng = bound
		*p += hprob((hprobOne - pv) >> hmoveBits)
	} else {
		c.low += uint64(bound)
		c.rng -= bound
		*p -= hprob(pv >> hmoveBits)
	}
	for c.rng < rcTop {
		c.rng <<= 8
		c.shiftLow()
	}
	return b
}
