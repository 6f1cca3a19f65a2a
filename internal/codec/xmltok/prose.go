package xmltok

import "math/bits"

// Prose: a long text value with spaces (a weather report, a fault
// message, a description) is coded as its tokens, alternating words
// (non-digit runs) and numbers (digit runs), against the tokens the same
// field had in earlier messages, position by position. Such a text is
// usually a template with a few words and many figures filled in: the
// word at position i is the word position i had last time, and the
// figure at position i comes from position i's own distribution (a
// humidity, a minute, a fraction digit).
//
// Each position (slot) of a field has its own small model: the words
// seen there (most recent first), and for numbers the last value, an
// absolute-value and a delta model, and the digit count. A predicted
// word costs one adaptive decision; a number a dozen. The slots are
// indexed, not hashed, and prose tokens are not recorded in the match
// history: a 2 KB report of 180 tokens decodes at a fraction of the work
// the general markup and value models would do per token. A word the
// slot does not know goes through the markup model (successors of the
// previous word, dictionary, literal), which also realigns a text whose
// sentences moved.

const (
	proseMin      = 48   // shortest text value coded as prose
	proseRing     = 8    // words remembered per slot
	maxProseSlots = 256  // slots per field; later tokens share the spill slot
	maxProseTotal = 1024 // slots per model, over all fields
)

// proseState is the slots of one prose field (a value context).
type proseState struct {
	slots []proseSlot
}

// proseSlot models one token position of a prose field.
type proseSlot struct {
	// The word last seen here, the prediction, kept with its id and end
	// state so that a predicted word touches nothing but its slot. It
	// predicts even after the dictionary has evicted its entry.
	word    string
	wordID  uint32
	wordEnd uint8
	hasWord bool

	ring         [proseRing]uint32 // words seen here, most recent first (ring[0] = wordID)
	idx          [proseRing]prob   // tree3 over ring positions
	pSame, pRing prob

	n              uint8 // the digit count of the last number here
	pWidth, pCanon prob
	num            proseNumModel
}

// proseNumModel codes the numbers of one slot: a 5-bit tree whose
// leaves are the values 0 to 15 or, for larger values, the bit length
// (5 to 19, and 20 or more), then three modelled bits below the leading
// one and the rest direct. A digit or a small count costs five
// decisions, a wide figure eight and its low bits.
type proseNumModel struct {
	sym [32]prob
	// top is allocated on the first value of 16 or more: many slots
	// never see one, and a slot without it is a third of the size, which
	// keeps a report's slots in the cache.
	top *[16][8]prob
}

// isProse reports whether text value v is coded as prose: 48 bytes or
// more, at least one in 16 of them spaces.
func isProse(v []byte) bool {
	if len(v) < proseMin {
		return false
	}
	need, spaces := (len(v)+15)/16, 0
	for _, c := range v {
		if c == ' ' {
			if spaces++; spaces >= need {
				return true
			}
		}
	}
	return false
}

// proseSlot returns slot i of field x, adding it if it is the next one
// and the budgets allow, else the model's spill slot. Slots are added
// and dropped identically on both ends.
func (m *model) proseSlot(x *vctx, i int) *proseSlot {
	p := x.prose
	if p == nil {
		p = &proseState{}
		x.prose = p
	}
	if i < len(p.slots) {
		return &p.slots[i]
	}
	if i == len(p.slots) && i < maxProseSlots && m.proseSlots < maxProseTotal {
		p.slots = append(p.slots, proseSlot{})
		m.proseSlots++
		return &p.slots[i]
	}
	return &m.proseSpill
}

// dropProse releases x's slots (its context slot is being reused).
func (m *model) dropProse(x *vctx) {
	if x.prose != nil {
		m.proseSlots -= len(x.prose.slots)
		x.prose = nil
	}
}

// use makes word e (id) the most recent word of s.
func (s *proseSlot) use(id uint32, e *entry) {
	k := 0
	for k < proseRing-1 && s.ring[k] != id {
		k++
	}
	copy(s.ring[1:k+1], s.ring[:k])
	s.ring[0] = id
	s.word, s.wordID, s.wordEnd, s.hasWord = e.s, id, e.end, true
}

// proseRingAlive reports whether s remembers a live word besides ring[0].
func (m *model) proseRingAlive(s *proseSlot) bool {
	for _, id := range s.ring[1:] {
		if m.t.alive(id) {
			return true
		}
	}
	return false
}

// word returns the live prose word entry id names, or nil.
func (m *model) word(id uint32) *entry {
	if !m.t.alive(id) || id < firstDyn {
		return nil
	}
	e := m.t.get(id)
	if e.kind != kMark || e.start != stProse {
		return nil
	}
	return e
}

// wordFits reports whether word e is how the scanner cuts v at pos.
func wordFits(e *entry, v []byte, pos int) bool {
	return hasPrefix(v[pos:], e.s) && validEnd(v, pos+len(e.s), e.end)
}

// proseWord makes id the current word, as useMark does for markup, but
// leaves the successor lists alone: a slot predicts the word, and the
// successors only serve words the slot did not know.
func (m *model) proseWord(id uint32) {
	m.prev2, m.prev = m.prev, id
	m.h = mix(m.h, uint64(id))
}

// learnWord makes the word the markup model just coded (m.prev; 0 if
// the dictionary did not take it) the slot's prediction.
func (m *model) learnWord(s *proseSlot) {
	if e := m.word(m.prev); e != nil {
		s.use(m.prev, e)
	}
}

func (m *model) encProse(c *coder, x *vctx, v []byte) {
	sp, sp2 := m.prev, m.prev2
	st := uint8(stProse)
	for pos, i := 0, 0; pos < len(v); i++ {
		s := m.proseSlot(x, i)
		if st == stValDigits {
			end := scanValue(v, pos, st)
			m.encNum(c, s, v[pos:end])
			pos, st = end, stProse
			continue
		}
		n, next := m.encWord(c, s, v, pos)
		pos, st = pos+n, next
	}
	m.prev, m.prev2 = sp, sp2
}

func (m *model) encWord(c *coder, s *proseSlot, v []byte, pos int) (int, uint8) {
	if s.hasWord {
		hit := hasPrefix(v[pos:], s.word) && validEnd(v, pos+len(s.word), s.wordEnd)
		if c.bit(&s.pSame, b2u(hit)) == 1 {
			m.proseWord(s.wordID)
			return len(s.word), s.wordEnd
		}
		if m.proseRingAlive(s) {
			k := 0
			for j := 1; j < proseRing; j++ {
				if e := m.word(s.ring[j]); e != nil && wordFits(e, v, pos) {
					k = j
					break
				}
			}
			if c.bit(&s.pRing, b2u(k > 0)) == 1 {
				c.tree(s.idx[:], 3, uint32(k))
				id := s.ring[k]
				e := m.t.get(id)
				s.use(id, e)
				m.proseWord(id)
				return len(e.s), e.end
			}
		}
	}
	n, next := m.encMarkModel(c, v, pos, stProse)
	m.learnWord(s)
	return n, next
}

func (m *model) decProse(c *coder, x *vctx, dst []byte, n int) []byte {
	sp, sp2 := m.prev, m.prev2
	st := uint8(stProse)
	end := len(dst) + n
	empties := 0
	// Every token appends a byte or counts as empty, three empties in a
	// row fail: at most 3n tokens, however hostile the payload, so a
	// truncated one is reported after the loop rather than checked for
	// on every token.
	for i := 0; len(dst) < end; i++ {
		var s *proseSlot
		if p := x.prose; p != nil && i < len(p.slots) {
			s = &p.slots[i]
		} else {
			s = m.proseSlot(x, i)
		}
		before := len(dst)
		switch {
		case st == stValDigits:
			dst = m.decNum(c, s, dst, end)
			st = stProse
		case s.hasWord && c.bit(&s.pSame, 0) == 1:
			// The word of the slot, most of a report: inline.
			if len(s.word) > end-len(dst) {
				m.fail("text word overruns the message")
				break
			}
			m.proseWord(s.wordID)
			dst, st = append(dst, s.word...), s.wordEnd
		default:
			dst, st = m.decOtherWord(c, s, dst, end)
			if st != stProse && st != stValDigits {
				m.fail("bad state %d in text", st)
			}
		}
		if m.err != nil {
			break
		}
		if len(dst) == before {
			if empties++; empties > 2 {
				m.fail("no progress in text")
				break
			}
		} else {
			empties = 0
		}
	}
	if c.overrun > maxOverrun {
		m.fail("truncated payload")
	}
	m.prev, m.prev2 = sp, sp2
	return dst
}

// decOtherWord decodes a word that is not the one slot s predicts
// (decProse has decoded that decision): one of the slot's earlier words,
// or any token through the markup model.
func (m *model) decOtherWord(c *coder, s *proseSlot, dst []byte, limit int) ([]byte, uint8) {
	if s.hasWord {
		if m.proseRingAlive(s) && c.bit(&s.pRing, 0) == 1 {
			k := c.tree(s.idx[:], 3, 0)
			id := s.ring[k]
			e := m.word(id)
			if k == 0 || e == nil {
				m.fail("text word %d of slot is not a live word", k)
				return dst, stProse
			}
			if len(e.s) > limit-len(dst) {
				m.fail("text word overruns the message")
				return dst, stProse
			}
			s.use(id, e)
			m.proseWord(id)
			return append(dst, e.s...), e.end
		}
	}
	dst, st := m.decMarkModel(c, dst, limit, stProse)
	if m.err == nil {
		m.learnWord(s)
	}
	return dst, st
}

// encNum codes a digit run t in slot s: its value, then
// its digit count (leading zeros): the value's own, the slot's last
// count, or explicit. A step from the slot's last value was tried: a
// slot's figures are mostly independent draws (today's humidity, a
// wind speed), and splitting them between two models cost more than
// the steps saved.
func (m *model) encNum(c *coder, s *proseSlot, t []byte) {
	var u uint64
	n := len(t)
	for _, ch := range t {
		u = u*10 + uint64(ch-'0')
	}
	c.encProseNum(&s.num, u)
	m.encDigits(c, s, decDigits(u), n)
	m.numDone(s, u, n)
}

// numDone records number u of n digits in slot s and the digest.
func (m *model) numDone(s *proseSlot, u uint64, n int) {
	s.n = uint8(n)
	m.h = mix(m.h, u<<5^uint64(n))
}

// encDigits codes the digit count n of a value of dd digits: the
// slot's last count, the value's own, or explicit.
func (m *model) encDigits(c *coder, s *proseSlot, dd, n int) {
	if int(s.n) > dd {
		if c.bit(&s.pWidth, b2u(n == int(s.n))) == 1 {
			return
		}
	}
	if c.bit(&s.pCanon, b2u(n == dd)) == 1 {
		return
	}
	c.direct(uint32(n-dd-1), 5)
}

func (m *model) decNum(c *coder, s *proseSlot, dst []byte, limit int) []byte {
	u, n, ok := c.decProseNum(s)
	if !ok {
		m.fail("text number too long")
		return dst
	}
	if n > maxDigits || n > limit-len(dst) {
		m.fail("text number of %d digits overruns the message", n)
		return dst
	}
	switch {
	case n == 1:
		dst = append(dst, '0'+byte(u))
	case n == 2 && u < 100: // most figures of a report: no digit loop
		dst = append(dst, '0'+byte(u/10), '0'+byte(u%10))
	default:
		dst = appendPad(dst, u, n)
	}
	m.numDone(s, u, n)
	return dst
}

// decProseNum decodes what encProseNum and encDigits code for a number
// of slot s: its value and digit count. Like most of the models (see
// coder), the two ends are written apart; here even the number's tree
// and digit count, which could share codeDelta-style two-way helpers, are
// inlined: through those helpers the decoder's number went through three
// calls that spilled the prose loop's state, about 5% of decoding a
// report. FORMAT.md (Prose) specifies both halves; the golden payloads,
// the round-trip tests and the pinned format digest hold them to each
// other.
func (c *coder) decProseNum(s *proseSlot) (u uint64, n int, ok bool) {
	node := c.treeDec(s.num.sym[:], 5, 1)
	sym := node - 32
	if sym < 16 {
		u = uint64(sym)
	} else {
		nb := int(sym) - 16 + 5
		if nb == 20 {
			if nb += int(c.direct(0, 6)); nb > 64 {
				return 0, 0, false
			}
		}
		if s.num.top == nil {
			s.num.top = new([16][8]prob)
		}
		if u = c.numRest(s.num.top[sym-16][:], 3, nb, 0); u >= uint64(pow10[maxDigits]) {
			return 0, 0, false
		}
	}
	dd := decDigits(u)
	if int(s.n) > dd && c.bit(&s.pWidth, 0) == 1 {
		return u, int(s.n), true
	}
	if c.bit(&s.pCanon, 0) == 1 {
		return u, dd, true
	}
	return u, dd + 1 + int(c.direct(0, 5)), true
}

// encProseNum codes v with m: the symbol (v itself below 16, else its
// bit length) with a 5-bit tree, then three modelled bits below the
// leading one and the rest direct. decProseNum decodes it.
func (c *coder) encProseNum(m *proseNumModel, v uint64) {
	nn := bits.Len64(v)
	sym := uint32(v)
	if v >= 16 {
		sym = 16 + uint32(min(nn-5, 15))
	}
	c.treeEnc(m.sym[:], 5, 1, sym)
	if sym < 16 {
		return
	}
	if nn >= 20 {
		c.direct(uint32(nn-20), 6)
	}
	if m.top == nil {
		m.top = new([16][8]prob)
	}
	c.numRest(m.top[sym-16][:], 3, nn, v)
}
