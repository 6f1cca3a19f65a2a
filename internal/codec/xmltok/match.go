package xmltok

import (
	"encoding/binary"
	"math/bits"
)

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
// Memory grows with what the traffic needs, up to a bound set by the
// dictionary budget. The history is two rings. The record ring holds one
// record per token, a few bytes each: a markup token its entry id, a
// value its length and where its bytes are in the value arena, which
// holds each value's bytes once (a record of a value the history
// predicted names the bytes of the record that predicted it). A repeated
// 426 KB DataSet of 24,000 tokens takes about 85 KB of records and 96 KB
// of values the first time, 70-90 KB of records and next to no values
// each time after. Both rings start at 16 KiB and double, keeping what
// they hold, when one message fills half of one, up to DictBytes/4 for
// records and DictBytes/8 for values (256 and 128 KiB by default): a
// connection of small messages keeps 32 KiB of rings (and the 32 KiB
// resync table), one that carries DataSets 384 KiB, enough to predict a
// DataSet from any of the three before it. (Records of 16 bytes and a value arena, each sized by
// the budget and filled by any traffic, were 2 MiB per model at the
// default budget: most of a connection's codec state, issue 19.)
// Evicting is overwriting the oldest, identically on both ends.

const (
	maxMatchVal   = 256 // longest value kept in the history
	matchHashBits = 13
	matchLenCap   = 31       // consecutive hits counted, for the confidence contexts
	ringMin       = 16 << 10 // first size of either ring
)

// Record headers: a uvarint whose low two bits are the kind.
const (
	recMark = 0 // id << 2: a markup token (id 0: one the dictionary did not take)
	recVal  = 1 // len << 2 | 1, then the low 32 bits of the bytes' arena position
	recLong = 2 // a value longer than maxMatchVal: predicts nothing
)

// histRec is one record of the history, parsed: a markup token (val
// false) or a value, with its bytes, which alias the arena; end is where
// the next record starts.
type histRec struct {
	id   uint32
	val  bool
	long bool
	off  uint32 // low 32 bits of the arena position of the bytes
	n    uint32
	v    []byte // nil if the arena no longer holds them
	end  uint64
}

type history struct {
	ring              []byte // records: a circular buffer of histCap bytes
	histCap, histMax  int
	pos, floor, start uint64 // bytes ever written; no record starts below floor; pos when the message began
	growAt            uint64 // the ring doubles before pos passes this (0: not allocated)
	n                 uint64 // records ever written

	arena                []byte // value bytes: a ring of arenaCap bytes
	arenaCap, arenaMax   int
	apos, afloor, astart uint64

	head []uint32 // hash of (context, value) -> position after it, +1; lazily allocated

	ptr   uint64  // where the record predicted next starts
	ok    bool    // ptr is set
	cur   histRec // the record next returned
	run   int     // predictions confirmed in a row, capped at matchLenCap
	vmiss int     // values mispredicted in a row
	pMark [matchLenCap/2 + 1]hprob
}

// init sets the rings' bounds from the dictionary budget, rounded down
// to powers of two: positions wrap with a mask, where a remainder by a
// variable was a 64-bit division per token, on both ends.
func (h *history) init(dictBytes int) {
	h.histMax = floorPow2(max(4096, dictBytes/4))
	h.arenaMax = floorPow2(max(4096, dictBytes/8))
	h.histCap = min(ringMin, h.histMax)
	h.arenaCap = min(ringMin, h.arenaMax)
}

func floorPow2(n int) int { return 1 << (bits.Len(uint(n)) - 1) }

func ctxKey32(prev2, prev uint32) uint32 {
	return uint32((uint64(prev2)<<32 | uint64(prev)) * 0x9E3779B97F4A7C15 >> 32)
}

// begin marks the start of a message: the rings grow by what one
// message writes.
func (h *history) begin() {
	h.start, h.astart = h.pos, h.apos
	if h.ring != nil {
		h.setGrowAt()
	}
}

// setGrowAt sets where the record ring doubles: when the message has
// written half of it, unless it is at its bound.
func (h *history) setGrowAt() {
	h.growAt = ^uint64(0)
	if h.histCap < h.histMax {
		h.growAt = h.start + uint64(h.histCap/2)
	}
}

// live reports whether a record starting at p is still whole in the
// ring.
func (h *history) live(p uint64) bool {
	return p >= h.floor && p < h.pos && h.pos-p <= uint64(h.histCap)
}

// next returns the record ptr names, if it is still in the ring.
func (h *history) next() *histRec {
	p := h.ptr
	// live(p), with one comparison for p < pos && pos-p <= histCap.
	if !h.ok || p < h.floor || h.pos-p-1 >= uint64(h.histCap) {
		h.ok = false
		return nil
	}
	r := &h.cur
	i := p & uint64(h.histCap-1)
	if i+6 > uint64(len(h.ring)) {
		return h.nextSlow()
	}
	// The common case, not at the ring's end: a header of one or two
	// bytes (every markup id below 2^12, every value of the history).
	rg := h.ring[i : i+6 : i+6]
	x := uint32(rg[0])
	k := uint64(1)
	if x >= 0x80 {
		if rg[1] >= 0x80 {
			return h.nextSlow()
		}
		x = x&0x7f | uint32(rg[1])<<7
		k = 2
	}
	if x&3 == recMark {
		r.id, r.val, r.end = x>>2, false, p+k
		return r
	}
	if x&3 == recVal {
		off := uint32(rg[k]) | uint32(rg[k+1])<<8 | uint32(rg[k+2])<<16 | uint32(rg[k+3])<<24
		r.val, r.long, r.n, r.off, r.end = true, false, x>>2, off, p+k+4
		r.v = h.value(off, x>>2)
		return r
	}
	r.val, r.long, r.end = true, true, p+k
	return r
}

// nextSlow reads a record byte by byte: one that wraps around the end
// of the ring, or a markup id of 2^12 or more.
func (h *history) nextSlow() *histRec {
	mask := uint64(h.histCap - 1)
	p := h.ptr
	var x uint64
	for s := uint(0); s < 64; s += 7 {
		b := h.ring[p&mask]
		p++
		x |= uint64(b&0x7f) << s
		if b < 0x80 {
			break
		}
	}
	r := &h.cur
	switch x & 3 {
	case recMark:
		*r = histRec{id: uint32(x >> 2), end: p}
	case recVal:
		var off uint32
		for k := range uint64(4) {
			off |= uint32(h.ring[(p+k)&mask]) << (8 * k)
		}
		n := uint32(x >> 2)
		*r = histRec{val: true, n: n, off: off, v: h.value(off, n), end: p + 4}
	default:
		*r = histRec{val: true, long: true, end: p}
	}
	return r
}

// addMark writes the record of a markup token.
func (h *history) addMark(id uint32) {
	x := id << 2
	if x >= 1<<14 {
		h.add(uint64(x), 0)
		return
	}
	l := uint64(1)
	if x >= 0x80 {
		l = 2
	}
	if h.pos+l > h.growAt {
		h.growRing()
	}
	i := h.pos & uint64(h.histCap-1)
	if i+2 > uint64(h.histCap) {
		h.write(uint64(x), 0)
		return
	}
	if l == 1 {
		h.ring[i] = byte(x)
	} else {
		h.ring[i], h.ring[i+1] = byte(x)|0x80, byte(x>>7)
	}
	h.pos += l
	h.n++
}

// addVal writes the record of a value of n bytes (at most maxMatchVal)
// at arena offset off.
func (h *history) addVal(n, off uint32) {
	x := n<<2 | recVal
	l := uint64(5)
	if x >= 0x80 {
		l = 6
	}
	if h.pos+l > h.growAt {
		h.growRing()
	}
	i := h.pos & uint64(h.histCap-1)
	if i+6 > uint64(h.histCap) {
		h.write(uint64(x), off)
		return
	}
	rg := h.ring[i : i+6]
	if l == 5 {
		rg[0] = byte(x)
	} else {
		rg[0], rg[1] = byte(x)|0x80, byte(x>>7)
	}
	binary.LittleEndian.PutUint32(rg[l-4:], off)
	h.pos += l
	h.n++
}

// add writes any record: header x, then for a value the low 32 bits of
// its bytes' arena position.
func (h *history) add(x uint64, off uint32) {
	l := uint64(uvarintLen(x))
	if x&3 == recVal {
		l += 4
	}
	if h.pos+l > h.growAt {
		h.growRing()
	}
	h.write(x, off)
}

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// write writes a record byte by byte, wrapping around the ring's end.
func (h *history) write(x uint64, off uint32) {
	var rec [binary.MaxVarintLen64 + 4]byte
	l := binary.PutUvarint(rec[:], x)
	if x&3 == recVal {
		binary.LittleEndian.PutUint32(rec[l:], off)
		l += 4
	}
	mask := uint64(h.histCap - 1)
	for k := range l {
		h.ring[(h.pos+uint64(k))&mask] = rec[k]
	}
	h.pos += uint64(l)
	h.n++
}

// growRing allocates the record ring, or doubles it.
func (h *history) growRing() {
	if h.ring == nil {
		h.ring = make([]byte, h.histCap)
	} else {
		h.ring, h.floor = regrow(h.ring, h.pos, h.floor)
		h.histCap = len(h.ring)
	}
	h.setGrowAt()
}

// regrow returns a ring twice the size of r holding the same bytes at
// the same positions (mod its size), with the position below which the
// new ring holds nothing.
func regrow(r []byte, pos, floor uint64) ([]byte, uint64) {
	g := make([]byte, 2*len(r))
	oldMask, newMask := uint64(len(r)-1), uint64(len(g)-1)
	lo := max(floor, pos-min(pos, uint64(len(r))))
	for p := lo; p < pos; {
		// Copy runs that wrap in neither ring.
		i, j := p&oldMask, p&newMask
		k := min(pos-p, uint64(len(r))-i, uint64(len(g))-j)
		copy(g[j:j+k], r[i:i+k])
		p += k
	}
	return g, lo
}

// value returns the n bytes at arena offset off, nil if the arena no
// longer holds them.
func (h *history) value(off, n uint32) []byte {
	back := uint64(uint32(h.apos) - off) // how far back it starts
	if back > uint64(h.arenaCap) || uint64(n) > back || h.apos-back < h.afloor {
		return nil
	}
	i := (h.apos - back) & uint64(h.arenaCap-1)
	if i+uint64(n) > uint64(len(h.arena)) {
		return nil
	}
	return h.arena[i : i+uint64(n)]
}

// store copies v into the arena and returns its offset.
func (h *history) store(v []byte) uint64 {
	if h.apos+uint64(len(v))-h.astart > uint64(h.arenaCap/2) && h.arenaCap < h.arenaMax || h.arena == nil {
		h.growArena()
	}
	i := h.apos & uint64(h.arenaCap-1)
	if i+uint64(len(v)) > uint64(h.arenaCap) {
		// Values do not wrap: skip to the start of the ring.
		h.apos += uint64(h.arenaCap) - i
		i = 0
	}
	copy(h.arena[i:], v)
	off := h.apos
	h.apos += uint64(len(v))
	return off
}

// growArena allocates the value arena, or doubles it.
func (h *history) growArena() {
	if h.arena == nil {
		h.arena = make([]byte, h.arenaCap)
		return
	}
	h.arena, h.afloor = regrow(h.arena, h.apos, h.afloor)
	h.arenaCap = len(h.arena)
}

// hit moves the pointer on after a confirmed prediction.
func (h *history) hit() {
	h.ptr = h.cur.end
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
	h.ptr = h.cur.end
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
	m.hist.addMark(m.prev)
}

// recordValue appends value v of context ctx, and resynchronises the
// pointer on it if it has none.
func (m *model) recordValue(ctx uint32, v []byte) {
	h := &m.hist
	if len(v) > maxMatchVal {
		h.add(recLong, 0)
		return
	}
	slot := h.slot(ctx, v)
	if !h.ok {
		if at := h.head[slot]; at != 0 {
			// head holds the low 32 bits of the position after the
			// earlier occurrence; rebuild it near pos.
			cand := h.pos&^0xFFFFFFFF | uint64(at-1)
			if cand > h.pos {
				cand -= 1 << 32
			}
			if h.live(cand) {
				h.ptr, h.ok, h.run = cand, true, 0
			}
		}
	}
	var off uint32
	if h.keeps() {
		off = h.place(slot, v)
	} else {
		off = uint32(h.store(v))
	}
	h.addVal(uint32(len(v)), off)
	h.head[slot] = uint32(h.pos) + 1
}

// keeps reports whether the arena keeps the bytes its records go on
// naming (recordHit, place): once the connection's messages have grown
// it past its first size, as DataSets do. A connection of small
// messages does without, as the format did before (TokenFormat 5): for
// it a value the arena lost is cheap to code again, and the lookups
// would cost it about 1 % of its instructions for nothing.
func (h *history) keeps() bool { return h.arenaCap > ringMin }

// recordHit appends value v of context ctx that the history predicted:
// the new record names the bytes of the record that predicted it, r,
// instead of copying them, so a repeated DataSet goes through the arena
// once, not once per repetition. The new record is evicted from the
// ring long before its offset, 32 bits, could wrap.
//
// If the arena keeps, bytes in its older half are placed anew (a copy
// at the arena's head, or a younger copy of the same value): the arena
// is overwritten oldest first, and bytes that every DataSet's records
// go on naming would otherwise be overwritten under them once new
// values have filled it. Each record naming lost bytes was then coded
// by the models and stored again, which overwrote the next oldest: a
// 128 KiB arena under a 60-100 KB table never settled again (issue 19:
// 766 bytes per Northwind response over 200 responses, 106 with this).
// A value still named is copied forward before it is lost, for free on
// the wire; one no record has named for half the arena's writes ages
// out.
func (m *model) recordHit(ctx uint32, v []byte, r *histRec) {
	h := &m.hist
	slot := h.slot(ctx, v)
	off := r.off
	if h.keeps() && uint32(h.apos)-off > uint32(h.arenaCap/2) {
		off = h.place(slot, v)
	}
	h.addVal(r.n, off)
	h.head[slot] = uint32(h.pos) + 1
}

// place returns the arena offset of v for a new record in resync slot
// slot: that of the slot's latest record if it names the same bytes in
// the younger half of the arena, else that of a new copy. A value that
// repeats in its context (a customer's name on each of its orders) is
// so copied forward once, not once per record that names it.
func (h *history) place(slot uint32, v []byte) uint32 {
	if off, ok := h.latest(slot, v); ok {
		return off
	}
	return uint32(h.store(v))
}

// latest returns the arena offset named by the value record that ends
// where resync slot slot points, if that record is whole in the ring,
// is of len(v) bytes, and names bytes equal to v in the younger half of
// the arena.
func (h *history) latest(slot uint32, v []byte) (uint32, bool) {
	at := h.head[slot]
	if at == 0 {
		return 0, false
	}
	p := h.pos&^0xFFFFFFFF | uint64(at-1)
	if p > h.pos {
		p -= 1 << 32
	}
	x := uint64(len(v))<<2 | recVal
	l := uint64(uvarintLen(x)) + 4
	if p < l || !h.live(p-l) {
		return 0, false
	}
	mask := uint64(h.histCap - 1)
	var rec [6]byte
	for k := range l {
		rec[k] = h.ring[(p-l+k)&mask]
	}
	if y, n := binary.Uvarint(rec[:l-4]); y != x || uint64(n) != l-4 {
		return 0, false
	}
	off := binary.LittleEndian.Uint32(rec[l-4:])
	if uint32(h.apos)-off > uint32(h.arenaCap/2) {
		return 0, false
	}
	if b := h.value(off, uint32(len(v))); b == nil || string(b) != string(v) {
		return 0, false
	}
	return off, true
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
	if r.val || r.id == 0 || !m.t.alive(r.id) {
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
// any. The bytes alias the ring: use them before the next record.
func (m *model) matchValue(ctx uint32) ([]byte, *histRec) {
	r := m.hist.next()
	if r == nil {
		return nil, nil
	}
	if !r.val || r.long || r.v == nil {
		m.hist.ok = false
		return nil, nil
	}
	return r.v, r
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
