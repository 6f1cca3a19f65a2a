package xmltok

import "math/bits"

// The match model predicts from history. Both ends append every markup
// token and every short value they code to one history stream shared by
// all messages of the direction. While the current message repeats an
// earlier stretch of that stream (the same DataSet rows as the last
// response, the same header blocks, the same Security header), a
// pointer walks along it, and each token is coded first as one
// high-precision "as predicted" decision. A confirmed prediction costs
// under a thousandth of a bit and skips every other model, which is what
// makes a repeated 300 KB DataSet cost a handful of bytes, and cost them
// fast. When a prediction fails the pointer resynchronises on the next
// value that occurred before (a hash of its context and bytes names
// where the stream went on after it); a value that merely changed keeps
// the pointer walking, as a changed cell in a repeated row should.
//
// Memory is bounded by the dictionary budget: the record ring holds
// DictBytes/16 records of 16 bytes and the value arena DictBytes bytes,
// each rounded down to a power of two and grown on demand, so a
// connection of small messages uses little. Evicting is overwriting the
// oldest, identically on both ends.

const (
	maxMatchVal   = 256 // longest value kept in the history
	matchHashBits = 15
	matchLenCap   = 31 // consecutive hits counted, for the confidence contexts
)

// histRec is one token of the history: a markup entry id, or a value
// (id 0) with its context key and where its bytes are in the arena.
type histRec struct {
	id  uint32
	ctx uint32
	off uint32 // low 32 bits of the arena position
	n   uint32
}

type history struct {
	recs   []histRec // ring, grown up to recCap
	recCap int
	n      uint64 // records ever written

	arena    []byte // ring of value bytes, grown up to arenaCap
	arenaCap int
	pos      uint64 // arena bytes ever written (including skips)

	head []uint32 // hash of (context, value) -> record after it, +1; lazily allocated

	ptr   uint64 // the record predicted next
	ok    bool   // ptr is set
	run   int    // predictions confirmed in a row, capped at matchLenCap
	vmiss int    // values mispredicted in a row
	pMark [matchLenCap/2 + 1]hprob
}

// init sizes the rings from the dictionary budget, rounded down to powers
// of two: positions wrap with a mask, where a remainder by a variable
// was a 64-bit division per token, on both ends.
func (h *history) init(dictBytes int) {
	h.recCap = floorPow2(max(1024, dictBytes/16))
	h.arenaCap = floorPow2(max(4096, dictBytes))
}

func floorPow2(n int) int { return 1 << (bits.Len(uint(n)) - 1) }

func ctxKey32(prev2, prev uint32) uint32 {
	return uint32((uint64(prev2)<<32 | uint64(prev)) * 0x9E3779B97F4A7C15 >> 32)
}

// next returns the record ptr names, if it is still in the ring.
func (h *history) next() *histRec {
	if !h.ok || h.ptr >= h.n || h.n-h.ptr > uint64(len(h.recs)) {
		h.ok = false
		return nil
	}
	return &h.recs[h.ptr&uint64(h.recCap-1)]
}

// value returns the bytes of value record r, nil if the arena has
// overwritten them.
func (h *history) value(r *histRec) []byte {
	back := uint64(uint32(h.pos) - r.off) // how far back it starts
	if back > uint64(h.arenaCap) || uint64(r.n) > back {
		return nil
	}
	i := (h.pos - back) & uint64(h.arenaCap-1)
	return h.arena[i : i+uint64(r.n)]
}

func (h *history) add(r histRec) {
	if len(h.recs) < h.recCap {
		h.recs = append(h.recs, r)
	} else {
		h.recs[h.n&uint64(h.recCap-1)] = r
	}
	h.n++
}

// store copies v into the arena and returns its offset.
func (h *history) store(v []byte) uint64 {
	i := h.pos & uint64(h.arenaCap-1)
	if i+uint64(len(v)) > uint64(h.arenaCap) {
		// Values do not wrap: skip to the start of the ring.
		h.pos += uint64(h.arenaCap) - i
		i = 0
	}
	if end := int(i) + len(v); end > len(h.arena) {
		if end > cap(h.arena) {
			a := make([]byte, end, min(h.arenaCap, max(2*cap(h.arena), end, 4096)))
			copy(a, h.arena)
			h.arena = a
		}
		h.arena = h.arena[:end]
	}
	copy(h.arena[i:], v)
	off := h.pos
	h.pos += uint64(len(v))
	return off
}

// hit moves the pointer on after a confirmed prediction.
func (h *history) hit() {
	h.ptr++
	h.run = min(h.run+1, matchLenCap)
}

// valueHit and valueMiss follow a value decision. A value that merely
// changed (a cell of a repeated row) keeps the pointer walking; a second
// miss in a row means the stream has shifted (a row inserted or
// dropped), and the pointer is dropped so the next value resynchronises
// it.
func (h *history) valueHit() {
	h.hit()
	h.vmiss = 0
}

func (h *history) valueMiss() {
	h.ptr++
	h.run = 0
	if h.vmiss++; h.vmiss >= 2 {
		h.ok = false
		h.vmiss = 0
	}
}

// confidence is the probability slot of a value prediction: a context's
// own record of whether its values repeat, kept apart for a pointer that
// has just been set and one that has held for a long run (a repeated
// DataSet), which differ a lot.
// The second result is the slot's prior probability of a miss (bit 0).
func (h *history) confidence(x *vctx) (*hprob, int32) {
	switch {
	case h.run >= matchLenCap:
		return &x.pMatch[2], hprobOne / 64
	case h.run >= 8:
		return &x.pMatch[1], hprobOne / 16
	}
	return &x.pMatch[0], hprobHalf
}

// markConfidence is the same for markup, by run length alone: structure
// repeats or does not whatever the token.
func (h *history) markConfidence() (*hprob, int32) {
	i := h.run >> 1
	return &h.pMark[i], hprobHalf >> min(i/2, 6)
}

// recordMark appends the markup token just coded (m.prev; 0 for a token
// the dictionary did not take, which never predicts).
func (m *model) recordMark() {
	m.hist.add(histRec{id: m.prev})
}

// recordValue appends value v of context ctx, and resynchronises the
// pointer on it if it has none.
func (m *model) recordValue(ctx uint32, v []byte) {
	h := &m.hist
	if len(v) > maxMatchVal {
		h.add(histRec{ctx: ctx, n: ^uint32(0)})
		return
	}
	slot := h.slot(ctx, v)
	if !h.ok {
		if at := h.head[slot]; at != 0 {
			// head holds the low 32 bits of the record index after the
			// earlier occurrence; rebuild it near n.
			cand := h.n&^0xFFFFFFFF | uint64(at-1)
			if cand > h.n {
				cand -= 1 << 32
			}
			if cand < h.n && h.n-cand <= uint64(len(h.recs)) {
				h.ptr, h.ok, h.run = cand, true, 0
			}
		}
	}
	h.add(histRec{ctx: ctx, off: uint32(h.store(v)), n: uint32(len(v))})
	h.head[slot] = uint32(h.n) + 1
	if h.ok && h.ptr == h.n {
		// The earlier occurrence was the record just written: nothing to
		// predict yet.
		h.ok = false
	}
}

// recordHit appends value v of context ctx that the history predicted:
// the new record names the bytes of the record that predicted it, r,
// instead of copying them, so a repeated DataSet streams through the
// arena once, not once per repetition. The bytes stay valid as long as
// r's did (value checks how far back they are), and the new record
// is evicted from the ring long before its offset, 32 bits, could wrap.
func (m *model) recordHit(ctx uint32, v []byte, r histRec) {
	h := &m.hist
	slot := h.slot(ctx, v)
	h.add(histRec{ctx: ctx, off: r.off, n: r.n})
	h.head[slot] = uint32(h.n) + 1
}

// slot is the resynchronisation table slot of value v in context ctx.
func (h *history) slot(ctx uint32, v []byte) uint32 {
	if h.head == nil {
		h.head = make([]uint32, 1<<matchHashBits)
	}
	return uint32((hashBytes(v)^uint64(ctx)*0x9E3779B97F4A7C15)>>(64-matchHashBits)) & (1<<matchHashBits - 1)
}

// succIndex is where id is among the successors of the current token,
// -1 if it is not one.
func (m *model) succIndex(id uint32) int {
	p := m.entry(m.prev)
	for k, s := range p.succ {
		if s == id {
			return k
		}
	}
	return -1
}

// matchMark returns the markup entry the history predicts in state st,
// if any.
func (m *model) matchMark(st uint8) (uint32, *entry) {
	r := m.hist.next()
	if r == nil {
		return 0, nil
	}
	if r.id == 0 || !m.t.alive(r.id) {
		m.hist.ok = false
		return 0, nil
	}
	e := m.t.get(r.id)
	if e.kind != kMark || e.start != st {
		m.hist.ok = false
		return 0, nil
	}
	return r.id, e
}

// matchValue returns the value the history predicts in context ctx, if
// any, and its record.
func (m *model) matchValue(ctx uint32) ([]byte, histRec) {
	r := m.hist.next()
	if r == nil {
		return nil, histRec{}
	}
	if r.id != 0 || r.ctx != ctx || r.n > maxMatchVal {
		m.hist.ok = false
		return nil, histRec{}
	}
	v := m.hist.value(r)
	if v == nil {
		m.hist.ok = false
	}
	return v, *r
}

func (m *model) encMark(c *coder, b []byte, pos int, st uint8) (int, uint8) {
	if id, e := m.matchMark(st); e != nil {
		pm, pr := m.hist.markConfidence()
		rest := b[pos:]
		hit := len(rest) >= len(e.s) && string(rest[:len(e.s)]) == e.s && validEnd(b, pos+len(e.s), e.end)
		if c.bitH(pm, pr, b2u(hit)) == 1 {
			m.useMark(id, m.succIndex(id))
			m.hist.hit()
			m.recordMark()
			return len(e.s), e.end
		}
		m.hist.ok = false
	}
	n, next := m.encMarkModel(c, b, pos, st)
	m.recordMark()
	return n, next
}

func (m *model) decMark(c *coder, dst []byte, limit int, st uint8) ([]byte, uint8) {
	if id, e := m.matchMark(st); e != nil {
		pm, pr := m.hist.markConfidence()
		if c.bitH(pm, pr, 0) == 1 {
			if len(e.s) > limit-len(dst) {
				m.fail("markup token overruns the message")
				return dst, st
			}
			dst = grow(dst, len(e.s), limit)
			dst = append(dst, e.s...)
			m.useMark(id, m.succIndex(id))
			m.hist.hit()
			m.recordMark()
			return dst, e.end
		}
		m.hist.ok = false
	}
	dst, st = m.decMarkModel(c, dst, limit, st)
	m.recordMark()
	return dst, st
}

func (m *model) encValue(c *coder, v []byte, st uint8) {
	if m.isSecret(st) {
		m.encValueModel(c, v, st)
		return
	}
	ctx := ctxKey32(m.prev2, m.prev)
	if pred, r := m.matchValue(ctx); pred != nil {
		// Whether a field repeats is a property of the field (a DataSet
		// cell does, a price does not): the decision is modelled per
		// value context.
		x := m.vctx()
		pm, pr := m.hist.confidence(x)
		if c.bitH(pm, pr, b2u(string(pred) == string(v))) == 1 {
			m.h = mix(m.h, 7)
			m.setLast(x, v, shapeOf(x, v))
			m.hist.valueHit()
			m.recordHit(ctx, v, r)
			return
		}
		m.hist.valueMiss()
	}
	m.noRecord = false
	m.encValueModel(c, v, st)
	if m.noRecord {
		m.noRecord = false
		return
	}
	m.recordValue(ctx, v)
}

func (m *model) decValue(c *coder, dst []byte, limit int, st uint8) []byte {
	if m.isSecret(st) {
		return m.decValueModel(c, dst, limit, st)
	}
	ctx := ctxKey32(m.prev2, m.prev)
	if pred, r := m.matchValue(ctx); pred != nil {
		x := m.vctx()
		pm, pr := m.hist.confidence(x)
		if c.bitH(pm, pr, 0) == 1 {
			m.h = mix(m.h, 7)
			start := len(dst)
			if dst = m.finishValue(x, dst, pred, shapeOf(x, pred), limit); m.err != nil {
				return dst
			}
			m.hist.valueHit()
			m.recordHit(ctx, dst[start:], r)
			return dst
		}
		m.hist.valueMiss()
	}
	m.noRecord = false
	start := len(dst)
	dst = m.decValueModel(c, dst, limit, st)
	if m.noRecord || m.err != nil {
		m.noRecord = false
		return dst
	}
	m.recordValue(ctx, dst[start:])
	return dst
}
