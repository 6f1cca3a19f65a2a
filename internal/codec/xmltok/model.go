package xmltok

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/klauspost/compress/huff0"
)

const (
	nSucc       = 4    // successors remembered per markup token
	nMP         = 1024 // markup decision contexts (hashed by previous token; 4096 coded the corpus alike)
	nCtx        = 1024 // value contexts (hashed by the two previous tokens)
	ringN       = 32   // recent distinct values per value context
	maxLast     = 512  // longest value remembered as a context's last value
	maxValEntry = 256  // longest value entered in the dictionary
	pieceBits   = 10   // static piece ids are coded in this many bits
)

// vctx is the model of one value position: the values that follow a
// given pair of markup tokens. It predicts the next value as the last
// one (plus the last numeric step), and remembers recent distinct values.
type vctx struct {
	key   uint64
	last  []byte
	has   bool
	sh    shape
	delta int64
	ring  [ringN]uint32
	assoc []assocEnt // nAssoc entries once used

	pHit, pAssoc, pNum, pRing, pSame, pRef, pProse, pUUID prob
	pMatch                                                [3]hprob // the match model's prediction is right (history.confidence)
	base                                                  [4]prob
	unit                                                  [4][8]prob // per delta base
	pSameUnit                                             [4]prob    // the unit is the base's last one
	lastUnit                                              [4]uint8
	idx                                                   [ringN]prob
	d                                                     [4]*numModel // per delta base, allocated on first use
	ln                                                    numModel

	prose *proseState // the slots of a prose field (prose.go)
}

// assocEnt remembers the value a context had the last time the message's
// key (its latest non-numeric value: a customer id, a symbol, a city)
// was the same. A DataSet row's name, address and postal code then
// follow from its customer id, and a price walks from the last price of
// its symbol rather than of the previous row.
type assocEnt struct {
	key uint64
	v   []byte
	sh  shape
}

const (
	nAssoc    = 16 // 64 coded the corpus within 0.2% and held 3 KiB per context
	maxAssoc  = 64
	baseCtx   = 0 // delta from the context's last value
	baseTime  = 1 // delta from the last time value seen anywhere
	baseAssoc = 2 // delta from the associated value
	baseZero  = 3 // the number itself, in the layout of the last value
)

type markProbs struct {
	succ [nSucc]prob
	ref  prob
}

// pieceModel is the order-1 model of literal bytes. Its rows are
// allocated on first use: literals follow a few dozen distinct bytes, and
// all 256 rows were 128 KiB per model (per-connection state, issue 19).
// A missing row stands for a row of zero probabilities, so allocating
// one changes no coding.
type pieceModel struct {
	flag [256]prob
	lit  [256]*[256]prob
}

func (pm *pieceModel) row(prev byte) *[256]prob {
	r := pm.lit[prev]
	if r == nil {
		r = new([256]prob)
		pm.lit[prev] = r
	}
	return r
}

// model is the state both ends keep for one direction. Encoder and
// Decoder each own one and update it identically: the decoder through the
// dec* halves of the mirrored model pairs (see coder), and through the
// encoder's own code when it replays a stored message. FORMAT.md
// specifies the updates.
type model struct {
	t    table
	root entry // successors of the start of a message (id 0)
	mp   [nMP]markProbs
	ctx  [nCtx]*vctx

	markPieces, valPieces pieceModel
	pieceIdx              [1 << pieceBits]prob
	endP                  [16]prob
	markLen, markRef      numModel
	valRef                numModel
	pLen                  prob
	lenNum                numModel
	lastLen               int

	pBlob            prob
	blobLen, blobExt numModel
	blobSt           [16]prob
	huf              *huff0.Scratch

	gt   []byte // last time value seen, a second delta base
	gtSh shape
	gtOK bool

	// per message
	prev, prev2 uint32
	sens        bool // inside a secret element
	attrSens    bool // the value that follows is a secret attribute
	lastRing    int
	key         uint64 // hash of the latest non-numeric value, 0 = none
	pred        []byte
	msg         []byte // the message being encoded
	vpos        int    // where in msg the value being encoded starts
	ext         int    // bytes a blob took past its value, 0 = none
	extSt       uint8  // the state after them

	baseBuf  baseSet // what bases fills
	hist     history // earlier messages' tokens, for the match model
	noRecord bool    // the value being coded went as a blob

	proseSlots int       // prose slots allocated, over all fields
	proseSpill proseSlot // the slot of tokens past the budgets

	h   uint64 // running digest of every model update
	tmp []byte
	err error // first decoding error
}

func newModel(o Options) *model {
	if o.DictBytes <= 0 {
		o.DictBytes = DefaultDictBytes
	}
	m := &model{}
	m.t.init(max(o.DictBytes/4, 1024))
	m.hist.init(o.DictBytes)
	m.h = 0x736f617067770001 ^ uint64(o.DictBytes)
	return m
}

func mix(h, x uint64) uint64 {
	h ^= x
	h *= 0x9E3779B97F4A7C15
	return bits.RotateLeft64(h, 29) ^ h>>32
}

// hashBytes hashes a value or token for the digest and the association
// key. It takes eight bytes per multiply (a 2 KB weather report is
// hashed twice per message); both ends must compute the same function.
//
// The last 1 to 8 bytes are read in at most two loads, not a byte at a
// time: a value ends there whatever its length. A tail of 8 bytes or more
// overlaps the blocks before it, one of 4 to 7 is two overlapping words,
// one of 1 to 3 is its first, middle and last byte; each covers every
// byte of the tail, and the length is in the seed.
func hashBytes(b []byte) uint64 {
	n := len(b)
	h := uint64(0xcbf29ce484222325) ^ uint64(n)*0x100000001b3
	var t uint64
	switch {
	case n >= 8:
		for i := 0; i+8 < n; i += 8 {
			h = (h ^ binary.LittleEndian.Uint64(b[i:])) * 0x9E3779B97F4A7C15
			h ^= h >> 29
		}
		t = binary.LittleEndian.Uint64(b[n-8:])
	case n >= 4:
		t = uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint32(b[n-4:]))<<32
	case n > 0:
		t = uint64(b[0]) | uint64(b[n>>1])<<8 | uint64(b[n-1])<<16
	}
	h = (h ^ t) * 0x9E3779B97F4A7C15
	return h ^ h>>32
}

func (m *model) digest() uint64 {
	h := mix(m.h, uint64(m.t.next))
	h = mix(h, uint64(m.t.head))
	h = mix(h, uint64(m.t.size))
	h = mix(h, m.hist.n^m.hist.pos<<32)
	h = mix(h, m.hist.ptr^uint64(b2u(m.hist.ok))<<63)
	return mix(h, uint64(m.lastLen))
}

func (m *model) fail(format string, args ...any) {
	if m.err == nil {
		m.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

func (m *model) begin() {
	m.hist.begin()
	m.prev, m.prev2 = 0, 0
	m.sens, m.attrSens = false, false
	m.lastRing = -1
	m.key = 0
	m.ext = 0
}

func (m *model) entry(id uint32) *entry {
	if !m.t.alive(id) {
		return &m.root
	}
	return m.t.get(id)
}

// ---- message -----------------------------------------------------------

func (m *model) encode(c *coder, msg []byte) {
	m.begin()
	m.codeLen(c, len(msg))
	m.msg = msg
	st := uint8(stText)
	for pos := 0; pos < len(msg); {
		if isValue(st) {
			end := scanValue(msg, pos, st)
			m.vpos = pos
			m.encValue(c, msg[pos:end], st)
			if m.ext > 0 {
				pos, st = end+m.ext, m.extSt
				m.ext = 0
				continue
			}
			pos, st = end, afterValue(st)
			continue
		}
		n, next := m.encMark(c, msg, pos, st)
		pos, st = pos+n, next
	}
	m.msg = nil
	m.h = mix(m.h, 0xE0)
}

func (m *model) codeLen(c *coder, n int) int {
	same := c.bit(&m.pLen, b2u(n == m.lastLen))
	if same == 0 {
		d := c.num(&m.lenNum, zigzag(int64(n)-int64(m.lastLen)))
		n = int(int64(m.lastLen) + unzigzag(d))
	} else {
		n = m.lastLen
	}
	m.lastLen = n
	return n
}

func (m *model) decode(c *coder, dst []byte, max int) ([]byte, error) {
	m.begin()
	m.err = nil
	n := m.codeLen(c, 0)
	if n < 0 || n > max {
		if n > max {
			return dst, fmt.Errorf("%w: message claims %d bytes, limit %d", ErrTooLarge, n, max)
		}
		return dst, fmt.Errorf("%w: negative message length", ErrCorrupt)
	}
	base := len(dst)
	limit := base + n
	st := uint8(stText)
	empties := 0
	for len(dst) < limit {
		before := len(dst)
		if isValue(st) {
			dst = m.decValue(c, dst, limit, st)
			st = afterValue(st)
			if m.ext > 0 {
				st = m.extSt
				m.ext = 0
			}
		} else {
			dst, st = m.decMark(c, dst, limit, st)
		}
		if m.err != nil {
			return dst, m.err
		}
		if len(dst) == before {
			if empties++; empties > 2 {
				return dst, fmt.Errorf("%w: no progress", ErrCorrupt)
			}
		} else {
			empties = 0
		}
		if c.overrun > maxOverrun {
			return dst, fmt.Errorf("%w: truncated payload", ErrCorrupt)
		}
	}
	if len(c.rawIn) != 0 {
		return dst, fmt.Errorf("%w: %d unused bytes in the raw section", ErrCorrupt, len(c.rawIn))
	}
	if c.overrun > maxOverrun || c.pos != len(c.in) {
		return dst, fmt.Errorf("%w: payload length mismatch (%d of %d bytes used)", ErrCorrupt, c.pos, len(c.in))
	}
	m.h = mix(m.h, 0xE0)
	return dst, nil
}

// grow makes room for n more bytes without ever letting the capacity
// pass limit (the declared message end), so hostile payloads cannot make
// the decoder allocate more than the message it claims.
func grow(dst []byte, n, limit int) []byte {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	c := max(2*cap(dst), len(dst)+n, 512)
	c = min(c, limit)
	out := make([]byte, len(dst), c)
	copy(out, dst)
	return out
}

// ---- markup ------------------------------------------------------------

func (m *model) mprobs(id uint32) *markProbs {
	return &m.mp[(id*0x9E3779B1)>>(32-10)&(nMP-1)]
}

// useMark makes id the current markup token: it becomes the first
// successor of the previous one and the context of what follows.
func (m *model) useMark(id uint32, k int) {
	p := m.entry(m.prev)
	if k < 0 {
		k = nSucc - 1
	}
	for ; k > 0; k-- { // not copy: a call for at most 12 bytes
		p.succ[k] = p.succ[k-1]
	}
	p.succ[0] = id
	e := m.entry(id)
	switch e.sens {
	case sensSet:
		m.sens = true
	case sensClear:
		m.sens = false
	}
	m.attrSens = e.attrSens
	m.prev2, m.prev = m.prev, id
	m.h = mix(m.h, uint64(id))
}

func (m *model) encMarkModel(c *coder, b []byte, pos int, st uint8) (int, uint8) {
	p := m.entry(m.prev)
	mp := m.mprobs(m.prev)
	rest := b[pos:]
	for k := range nSucc {
		id := p.succ[k]
		if !m.t.alive(id) {
			continue
		}
		e := m.t.get(id)
		hit := e.start == st && len(rest) >= len(e.s) && string(rest[:len(e.s)]) == e.s && validEnd(b, pos+len(e.s), e.end)
		if c.bit(&mp.succ[k], b2u(hit)) == 1 {
			m.useMark(id, k)
			return len(e.s), e.end
		}
	}
	end, next := scanMarkup(b, pos, st)
	tok := b[pos:end]
	// A reference must name an entry that ends in the state the scan
	// ended in: the decoder takes the state from the entry, and the same
	// bytes can end in different states (a token at the end of a message,
	// a word cut at maxWord). Otherwise the token goes literal and the new
	// entry takes over the bytes.
	if id, ok := m.t.mark[st][string(tok)]; ok && m.t.get(id).end == next {
		c.bit(&mp.ref, 1)
		c.num(&m.markRef, uint64(m.t.next-1-id))
		m.useMark(id, -1)
		return len(tok), next
	}
	c.bit(&mp.ref, 0)
	c.num(&m.markLen, uint64(len(tok)))
	m.codePieces(c, &m.markPieces, tok, len(tok))
	c.tree(m.endP[:], 4, uint32(next))
	m.newMark(tok, st, next)
	return len(tok), next
}

// newMark enters a literal markup token. Tokens too long for the
// dictionary still set the secret flags, through a throwaway entry.
func (m *model) newMark(tok []byte, st, next uint8) {
	m.h = mix(m.h, hashBytes(tok)^uint64(next)<<56)
	id := m.t.insert(kMark, st, next, tok)
	if id != 0 {
		m.useMark(id, -1)
		return
	}
	sens, attrSens := analyze(tok, st, next)
	switch sens {
	case sensSet:
		m.sens = true
	case sensClear:
		m.sens = false
	}
	m.attrSens = attrSens
	m.prev2, m.prev = m.prev, 0
}

func (m *model) decMarkModel(c *coder, dst []byte, limit int, st uint8) ([]byte, uint8) {
	p := m.entry(m.prev)
	mp := m.mprobs(m.prev)
	for k := range nSucc {
		id := p.succ[k]
		if !m.t.alive(id) {
			continue
		}
		if c.bit(&mp.succ[k], 0) == 1 {
			e := m.t.get(id)
			if len(e.s) > limit-len(dst) {
				m.fail("markup token overruns the message")
				return dst, st
			}
			dst = grow(dst, len(e.s), limit)
			dst = append(dst, e.s...)
			m.useMark(id, k)
			return dst, e.end
		}
	}
	if c.bit(&mp.ref, 0) == 1 {
		d := c.num(&m.markRef, 0)
		if d >= uint64(m.t.next-1) {
			m.fail("markup index %d out of range", d)
			return dst, st
		}
		id := m.t.next - 1 - uint32(d)
		if !m.t.alive(id) {
			m.fail("markup reference to evicted entry %d", id)
			return dst, st
		}
		e := m.t.get(id)
		if e.kind != kMark {
			m.fail("markup reference to a value entry %d", id)
			return dst, st
		}
		if len(e.s) > limit-len(dst) {
			m.fail("markup token overruns the message")
			return dst, st
		}
		dst = grow(dst, len(e.s), limit)
		dst = append(dst, e.s...)
		m.useMark(id, -1)
		return dst, e.end
	}
	n := c.num(&m.markLen, 0)
	if n > uint64(limit-len(dst)) {
		m.fail("markup literal of %d bytes overruns the message", n)
		return dst, st
	}
	start := len(dst)
	dst = m.decPieces(c, &m.markPieces, dst, int(n), limit)
	if m.err != nil {
		return dst, st
	}
	next := uint8(c.tree(m.endP[:], 4, 0))
	if next >= nStates {
		m.fail("bad scanner state %d", next)
		return dst, st
	}
	m.newMark(dst[start:], st, next)
	return dst, next
}

// codePieces codes n bytes as a run of literal bytes (order-1 model) and
// static-table strings. s is the input when encoding.
func (m *model) codePieces(c *coder, pm *pieceModel, s []byte, n int) {
	prev := byte(0)
	for i := 0; i < n; {
		if id, l := staticMatch(s[i:]); l > 0 {
			c.bit(&pm.flag[prev], 1)
			c.tree(m.pieceIdx[:], pieceBits, id)
			i += l
			prev = s[i-1]
			continue
		}
		c.bit(&pm.flag[prev], 0)
		c.byte1(pm.row(prev), s[i])
		prev = s[i]
		i++
	}
}

func (m *model) decPieces(c *coder, pm *pieceModel, dst []byte, n, limit int) []byte {
	dst = grow(dst, n, limit)
	prev := byte(0)
	for end := len(dst) + n; len(dst) < end; {
		if c.bit(&pm.flag[prev], 0) == 1 {
			id := c.tree(m.pieceIdx[:], pieceBits, 0)
			if id == 0 || id >= firstDyn {
				m.fail("static index %d out of range", id)
				return dst
			}
			s := staticTable[id-1]
			if len(s) > end-len(dst) {
				m.fail("static piece overruns its string")
				return dst
			}
			dst = append(dst, s...)
			prev = s[len(s)-1]
			continue
		}
		prev = c.byte1(pm.row(prev), 0)
		dst = append(dst, prev)
	}
	return dst
}

// ---- values ------------------------------------------------------------

func (m *model) isSecret(st uint8) bool {
	switch st {
	case stValText, stValCDATA:
		return m.sens
	case stValDQ, stValSQ:
		return m.attrSens
	}
	return false
}

// vctx returns the context of the value that follows the current pair
// of markup tokens. Contexts live in a fixed hashed array: a collision
// resets the slot, identically on both ends, so memory stays bounded
// without any eviction protocol.
func (m *model) vctx() *vctx {
	key := uint64(m.prev2)<<32 | uint64(m.prev)
	slot := (key * 0x9E3779B97F4A7C15) >> (64 - 10) & (nCtx - 1)
	x := m.ctx[slot]
	if x == nil {
		x = &vctx{key: key}
		m.ctx[slot] = x
		return x
	}
	if x.key != key {
		// Keep the buffers: prose contexts collide often, and a fresh
		// association table per collision was most of the garbage.
		last, assoc := x.last[:0], x.assoc
		m.dropProse(x)
		for i := range assoc {
			assoc[i].key = 0
		}
		*x = vctx{key: key, last: last, assoc: assoc}
	}
	return x
}

// predict returns the predicted value of x: its last value, or that
// plus the last step, rebuilt in m.pred. The result may alias x.last:
// read it, never append to it.
func (m *model) predict(x *vctx) []byte {
	if x.delta != 0 && x.sh.kind != shNone {
		m.pred = recon(m.pred[:0], x.last, x.sh, x.sh.v+x.delta)
		return m.pred
	}
	return x.last
}

// predIsAssoc reports whether x predicts the associated value a; the
// hit decision is then not coded, since the association has just been
// coded as wrong. Numbers are compared before any formatting: a
// prediction whose number differs from a's counts as different, which
// in a layout that does not parse back to its own number merely codes a
// decision that could have been skipped. Both ends decide alike.
func (m *model) predIsAssoc(x *vctx, a *assocEnt) bool {
	return a != nil && m.predicts(x, a.v, a.sh)
}

// predicts reports whether x predicts v (of shape sh), formatting the
// prediction only when its number is v's: a miss costs no rebuild.
func (m *model) predicts(x *vctx, v []byte, sh shape) bool {
	if x.delta == 0 {
		return string(v) == string(x.last)
	}
	if sh.kind != x.sh.kind || sh.v != x.sh.v+x.delta {
		return false
	}
	return string(v) == string(m.predict(x))
}

// shapeOf is parseShape(v), taken from x when v is x's last value
// (setLast keeps x.sh = parseShape(x.last)): repeated values skip the
// parse.
func shapeOf(x *vctx, v []byte) shape {
	if x.has && string(v) == string(x.last) {
		return x.sh
	}
	return parseShape(v)
}

func (m *model) ringAlive(x *vctx) bool {
	for _, id := range x.ring {
		if m.t.alive(id) {
			return true
		}
	}
	return false
}

// setLast makes v the last value of x and updates the step prediction.
// sh must be parseShape(v): shapeOf relies on it.
func (m *model) setLast(x *vctx, v []byte, sh shape) {
	if x.has && sh.kind != shNone && sh.kind == x.sh.kind {
		x.delta = sh.v - x.sh.v
	} else {
		x.delta = 0
	}
	if len(v) <= maxLast {
		x.last = append(x.last[:0], v...)
		x.sh = sh
		x.has = true
	} else {
		x.has, x.sh, x.delta = false, shape{}, 0
	}
	if isTimeKind(sh.kind) {
		m.gt = append(m.gt[:0], v...)
		m.gtSh = sh
		m.gtOK = true
	}
	if m.key != 0 && len(v) <= maxAssoc {
		if x.assoc == nil {
			x.assoc = make([]assocEnt, nAssoc)
		}
		// Two-way sets, most recent first.
		set := x.assoc[assocSet(m.key):][:2]
		if set[0].key != m.key {
			// Either the key is in the second way, or the second way is
			// the least recent and gets overwritten: one swap does both.
			set[0], set[1] = set[1], set[0]
		}
		a := &set[0]
		a.key, a.v, a.sh = m.key, append(a.v[:0], v...), sh
	}
	if sh.kind == shNone {
		m.key = keyHash(v) | 1
	}
}

// keyHash is the association key of a non-numeric value. A value longer
// than maxLast (a report, a document) is keyed by its length and first
// bytes: hashing all of it cost a tenth of a prose message's decoding.
func keyHash(v []byte) uint64 {
	if len(v) > maxLast {
		return hashBytes(v[:maxAssoc]) ^ uint64(len(v))<<40
	}
	return hashBytes(v)
}

// assocFor returns the associated value for the current key, or nil.
func (m *model) assocFor(x *vctx) *assocEnt {
	if m.key == 0 || x.assoc == nil {
		return nil
	}
	set := x.assoc[assocSet(m.key):][:2]
	for i := range set {
		if set[i].key == m.key {
			return &set[i]
		}
	}
	return nil
}

// baseSet is the delta bases available for a value: layouts and bytes
// indexed by baseCtx/baseTime/baseAssoc/baseZero (kind shNone: not
// available), and how many there are.
type baseSet struct {
	sh [4]shape
	b  [4][]byte
	n  int
}

// bases fills m's baseSet with the delta bases available in x,
// identically on both ends. It works in place: returning the 200-byte
// set by value cost some 3% of the decoder's instructions on numeric
// messages.
func (m *model) bases(x *vctx, a *assocEnt) *baseSet {
	bs := &m.baseBuf
	bs.n = 0
	for i := range bs.sh {
		bs.sh[i].kind = shNone
	}
	if x.has && x.sh.kind != shNone {
		bs.sh[baseCtx], bs.b[baseCtx] = x.sh, x.last
		bs.sh[baseZero], bs.b[baseZero] = x.sh, x.last
		bs.sh[baseZero].v = 0
		bs.n += 2
	}
	if m.gtOK {
		bs.sh[baseTime], bs.b[baseTime] = m.gtSh, m.gt
		bs.n++
	}
	if a != nil && a.sh.kind != shNone {
		bs.sh[baseAssoc], bs.b[baseAssoc] = a.sh, a.v
		bs.n++
	}
	return bs
}

func (m *model) ringUse(x *vctx, k int) {
	id := x.ring[k]
	copy(x.ring[1:k+1], x.ring[:k])
	x.ring[0] = id
	m.lastRing = k
}

func (m *model) ringPush(x *vctx, id uint32) {
	copy(x.ring[1:], x.ring[:ringN-1])
	x.ring[0] = id
	m.lastRing = 0
}

func (m *model) codeRingIdx(c *coder, x *vctx, k int) int {
	if m.lastRing >= 0 {
		if c.bit(&x.pSame, b2u(k == m.lastRing)) == 1 {
			return m.lastRing
		}
	}
	return int(c.tree(x.idx[:], 5, uint32(k)))
}

// codeDelta codes d, a step between two values of shape bs, in the
// largest unit that divides it.
func (m *model) codeDelta(c *coder, x *vctx, b int, bs shape, d int64, u int) int64 {
	us := units(&bs)
	// Most fields keep their unit (cents, whole seconds): one decision
	// says so, the unit tree is coded only when it changes.
	if c.bit(&x.pSameUnit[b], b2u(u == int(x.lastUnit[b]))) == 1 {
		u = int(x.lastUnit[b])
	} else {
		u = int(c.tree(x.unit[b][:], 3, uint32(u)))
	}
	x.lastUnit[b] = uint8(u)
	if u >= len(us) {
		m.fail("bad delta unit %d", u)
		return 0
	}
	if x.d[b] == nil {
		x.d[b] = new(numModel)
	}
	if u == 0 { // most deltas: no division
		return unzigzag(c.num(x.d[b], zigzag(d)))
	}
	q := c.num(x.d[b], zigzag(d/us[u]))
	return unzigzag(q) * us[u]
}

// unitCost is what codeDelta spends on unit u of base b.
func (m *model) unitCost(x *vctx, b int, u int8) int {
	if u == int8(x.lastUnit[b]) {
		return costBit(x.pSameUnit[b], 1)
	}
	return costBit(x.pSameUnit[b], 0) + costTree(x.unit[b][:], 3, uint32(u))
}

// baseUnits finds, for each delta base that can rebuild v, the unit its
// delta is coded in; -1 marks a base that cannot. The unit is the
// largest that divides the delta (it gives the shortest number almost
// always); for a zero delta, the unit the model finds cheapest. Only
// the encoder calls it, to choose a base: the delta models of the bases
// not chosen learn nothing (training them too cost the decoder a third
// of its time on number-heavy messages and bought under 0.01% of size).
func (m *model) baseUnits(x *vctx, bsh *[4]shape, bb *[4][]byte, sh shape, v []byte) (unit [4]int8, q [4]uint64) {
	canon := int8(-1) // is v its own rebuild? computed on first need
	for b := range bsh {
		unit[b] = -1
		bs := &bsh[b]
		if bs.kind == shNone || bs.kind != sh.kind {
			continue
		}
		if b == baseZero {
			// Same layout as the context base: same rebuild.
			if unit[baseCtx] < 0 {
				continue
			}
		} else if !m.rebuilds(bb[b], bs, v, sh, &canon) {
			continue
		}
		d := sh.v - bs.v
		if d != 0 {
			us := units(bs)
			u := 0 // the units that divide d are the first few (see units)
			for u < len(us)-1 && d%us[u+1] == 0 {
				u++
			}
			unit[b], q[b] = int8(u), zigzag(d/us[u])
			continue
		}
		best, bestCost := 0, 1<<30
		for u := 4; u >= 0; u-- {
			if c := m.unitCost(x, b, int8(u)); c < bestCost {
				best, bestCost = u, c
			}
		}
		unit[b] = int8(best)
	}
	return unit, q
}

// rebuilds reports whether recon(base, bs, sh.v) is exactly want, whose
// shape is sh. Most numbers have the layout of their base (same prefix,
// fraction digits, padding and zone): then, if want is its own rebuild
// (canonical), so is the base's, without formatting anything. Otherwise
// a length check or the rebuild itself decides. canon caches whether
// want is canonical (-1: not known yet).
func (m *model) rebuilds(base []byte, bs *shape, want []byte, sh shape, canon *int8) bool {
	if bs.kind == shNum {
		if n := reconLenNum(bs, sh.v); n != len(want) {
			return false
		}
	}
	if bs.frac == sh.frac && bs.suf == sh.suf && string(base[len(base)-int(bs.suf):]) == string(want[len(want)-int(sh.suf):]) &&
		(bs.kind != shNum || bs.pre == sh.pre && string(base[:bs.pre]) == string(want[:sh.pre])) {
		// The rebuilds of want in its own layout and in the base's differ
		// at most in the zero padding of the integer part, which the
		// length check has ruled out for numbers.
		if *canon < 0 {
			*canon = int8(b2u(m.canonical(want, sh)))
		}
		if *canon == 1 {
			return true
		}
	}
	m.tmp = recon(m.tmp[:0], base, *bs, sh.v)
	return string(m.tmp) == string(want)
}

// canonical reports whether v is rebuilt from its own shape: a number
// always is, but for a negative zero ("-0.0": the sign is lost); a time
// is unless its fields are out of range ("2003-02-30" rebuilds as
// "2003-03-02").
func (m *model) canonical(v []byte, sh shape) bool {
	switch sh.kind {
	case shNum:
		return sh.v != 0 || v[sh.pre] != '-'
	case shDateTime, shDate, shTime:
		return timeFieldsValid(v, sh.kind)
	}
	return false
}

// timeFieldsValid reports whether the fields of a time value that
// parseTime accepted are in range, which is when recon gives it back:
// a real calendar date (any four-digit year), hours below 24 after a
// date, minutes and seconds below 60.
func timeFieldsValid(v []byte, kind uint8) bool {
	clock := 0
	if kind != shTime {
		y1, _ := d2(v, 0)
		y2, _ := d2(v, 2)
		mo, _ := d2(v, 5)
		d, _ := d2(v, 8)
		if mo < 1 || mo > 12 || d < 1 || d > daysIn(y1*100+y2, mo) {
			return false
		}
		if kind == shDate {
			return true
		}
		clock = 11
		if h, _ := d2(v, clock); h > 23 {
			return false
		}
	}
	mi, _ := d2(v, clock+3)
	s, _ := d2(v, clock+6)
	return mi < 60 && s < 60
}

func daysIn(y, m int64) int64 {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// reconLenNum is len(recon(base, bs, v)) for a number layout bs.
func reconLenNum(bs *shape, v int64) int {
	n := int(bs.pre) + int(bs.suf)
	u := uint64(v)
	if v < 0 {
		n++
		u = -u
	}
	if bs.frac > 0 {
		n += 1 + int(bs.frac)
		u /= uint64(pow10[bs.frac])
	}
	return n + max(int(bs.width), decDigits(u))
}

// decDigits is the number of decimal digits of u (1 for 0).
func decDigits(u uint64) int {
	n := 1
	for u >= 10 {
		u /= 10
		n++
	}
	return n
}

func (m *model) encValueModel(c *coder, v []byte, st uint8) {
	if m.isSecret(st) {
		// Never indexed: the length goes as direct bits, which leave no
		// trace in any model, the bytes verbatim in the raw section, and
		// no context, dictionary or digest sees them.
		c.numDirect(uint64(len(v)))
		c.rawBytes(v, len(v))
		return
	}
	x := m.vctx()
	sh := shapeOf(x, v)
	// The associated value goes first: where a key determines the value
	// it is right almost always, where it does not its miss costs little.
	a := m.assocFor(x)
	if a != nil {
		if c.bit(&x.pAssoc, b2u(string(a.v) == string(v))) == 1 {
			m.h = mix(m.h, 6)
			m.setLast(x, v, sh)
			return
		}
	}
	if x.has && !m.predIsAssoc(x, a) {
		if c.bit(&x.pHit, b2u(m.predicts(x, v, sh))) == 1 {
			m.h = mix(m.h, 1)
			m.setLast(x, v, sh)
			return
		}
	}
	if set := m.bases(x, a); set.n > 0 {
		bsh, bb, nb := &set.sh, &set.b, set.n
		best, bestU, bestCost := -1, 0, 1<<30
		var unit [4]int8
		var q [4]uint64
		if sh.kind != shNone {
			unit, q = m.baseUnits(x, bsh, bb, sh, v)
			for b := range bsh {
				u := unit[b]
				if u < 0 {
					continue
				}
				// The shortest delta wins, with what the unit and base
				// codes cost in this context; costing the delta's
				// modelled bits too changed sizes by under 0.01% and took
				// a fifth of the encoder's time on numeric messages.
				cost := 16*bits.Len64(q[b]) + m.unitCost(x, b, u)
				if nb > 1 {
					cost += costTree(x.base[:], 2, uint32(b))
				}
				if cost < bestCost {
					best, bestU, bestCost = b, int(u), cost
				}
			}
		}
		if c.bit(&x.pNum, b2u(best >= 0)) == 1 {
			if nb > 1 {
				c.tree(x.base[:], 2, uint32(best))
			}
			d := m.codeDelta(c, x, best, bsh[best], sh.v-bsh[best].v, bestU)
			m.h = mix(m.h, 2^zigzag(d)<<8)
			m.setLast(x, v, sh)
			return
		}
	}
	if m.ringAlive(x) {
		k := -1
		for i, id := range x.ring {
			if m.t.alive(id) && m.t.get(id).s == string(v) {
				k = i
				break
			}
		}
		if c.bit(&x.pRing, b2u(k >= 0)) == 1 {
			m.codeRingIdx(c, x, k)
			m.h = mix(m.h, 3^uint64(k)<<8)
			m.ringUse(x, k)
			m.setLast(x, v, sh)
			return
		}
	}
	if id := m.t.lookupVal(v); id != 0 {
		c.bit(&x.pRef, 1)
		c.num(&m.valRef, uint64(m.t.next-1-id))
		m.h = mix(m.h, 4^uint64(id)<<8)
		m.ringPush(x, id)
		m.setLast(x, v, sh)
		return
	}
	c.bit(&x.pRef, 0)
	blob, prose, uuid := m.encLiteral(c, x, v, st)
	if blob {
		return
	}
	m.h = mix(m.h, literalHash(v, prose))
	m.afterLiteral(x, v, sh, uuid)
}

// literalHash is what a value literal adds to the digest: its bytes, or
// for prose only its length, its words and numbers being in already.
func literalHash(v []byte, prose bool) uint64 {
	if prose {
		return 8 ^ uint64(len(v))<<8
	}
	return 5 ^ hashBytes(v)
}

// afterLiteral records a value literal. uuid says it went as a uuid, which is what
// isUUID says of it (the encoder codes one iff isUUID): the caller knows it already.
func (m *model) afterLiteral(x *vctx, v []byte, sh shape, uuid bool) {
	if !uuid && len(v) <= maxValEntry {
		if id := m.t.insert(kVal, 0, 0, v); id != 0 {
			m.ringPush(x, id)
		}
	}
	m.setLast(x, v, sh)
}

// encLiteral codes a value literal; it reports whether it went as a
// blob, which has made its own model update, as prose, or as a uuid.
func (m *model) encLiteral(c *coder, x *vctx, v []byte, st uint8) (blob, prose, uuid bool) {
	pre, upper, uuid := isUUID(v)
	if c.bit(&x.pUUID, b2u(uuid)) == 1 {
		// A random uuid costs its 16 bytes, not 36 characters.
		c.num(&x.ln, uint64(pre))
		m.codePieces(c, &m.valPieces, v[:pre], pre)
		c.direct(b2u(upper), 1)
		// 32 hex digits, four at a time.
		u := v[pre:]
		var w uint32
		k := 0
		for i := 0; i < 36; i++ {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				continue
			}
			w = w<<4 | hexVal(u[i])
			if k++; k%4 == 0 {
				c.direct(w, 16)
				w = 0
			}
		}
		return false, false, true
	}
	// The blob flag is coded where the decoder knows a blob can start:
	// outside numbers, with blobMin bytes left in the message.
	if st != stValDigits && len(m.msg)-m.vpos >= blobMin {
		bend, bst, blob := m.blobPlan(m.vpos, m.vpos+len(v), st)
		if c.bit(&m.pBlob, b2u(blob)) == 1 {
			m.noRecord = true
			ext := bend - (m.vpos + len(v))
			m.encBlob(c, x, v, ext, bst)
			if ext > 0 {
				m.ext, m.extSt = ext, bst
			}
			return true, false, false
		}
	}
	prose = isProse(v)
	c.bit(&x.pProse, b2u(prose))
	c.num(&x.ln, uint64(len(v)))
	if prose {
		m.encProse(c, x, v)
		return false, true, false
	}
	m.codePieces(c, &m.valPieces, v, len(v))
	return false, false, false
}

// decValueModel decodes one value in state st, appending it to dst (at most
// limit bytes in all). It tries the value's codings in the order the encoder
// chose among them (encValueModel): association, prediction, delta from a
// base, recent-value ring, table reference, then a literal.
//
// It is kept out of line: inlined into its callers it took their inlining
// budget and decoding ran 4-7 % slower (BenchmarkXMLTok, interleaved runs).
//
//go:noinline
func (m *model) decValueModel(c *coder, dst []byte, limit int, st uint8) []byte {
	if m.isSecret(st) {
		return m.decSecret(c, dst, limit)
	}
	x := m.vctx()
	a := m.assocFor(x)
	if a != nil && c.bit(&x.pAssoc, 0) == 1 {
		m.h = mix(m.h, 6)
		m.tmp = append(m.tmp[:0], a.v...)
		return m.finishValue(x, dst, m.tmp, a.sh, limit)
	}
	if x.has && !m.predIsAssoc(x, a) && c.bit(&x.pHit, 0) == 1 {
		m.h = mix(m.h, 1)
		pred, sh := m.predict(x), x.sh
		if x.delta != 0 {
			sh = reconShape(pred, x.last, x.sh, x.sh.v+x.delta)
		}
		return m.finishValue(x, dst, pred, sh, limit)
	}
	if set := m.bases(x, a); set.n > 0 && c.bit(&x.pNum, 0) == 1 {
		return m.decDeltaValue(c, x, set, dst, limit)
	}
	if m.ringAlive(x) && c.bit(&x.pRing, 0) == 1 {
		return m.decRingValue(c, x, dst, limit)
	}
	if c.bit(&x.pRef, 0) == 1 {
		return m.decRefValue(c, x, dst, limit)
	}
	return m.decLiteralValue(c, x, dst, limit, st)
}

// decSecret decodes a value the encoder kept out of every model (a password,
// a key): a length, then the bytes from the raw section.
func (m *model) decSecret(c *coder, dst []byte, limit int) []byte {
	n := c.numDirect(0)
	if n > uint64(limit-len(dst)) {
		m.fail("secret of %d bytes overruns the message", n)
		return dst
	}
	r := c.rawBytes(nil, int(n))
	if r == nil {
		m.fail("secret of %d bytes overruns the raw section", n)
		return dst
	}
	dst = grow(dst, int(n), limit)
	return append(dst, r...)
}

// decDeltaValue decodes a number coded as a delta from one of the bases in set.
func (m *model) decDeltaValue(c *coder, x *vctx, set *baseSet, dst []byte, limit int) []byte {
	bsh, bb, nb := &set.sh, &set.b, set.n
	b := 0
	if nb > 1 {
		b = int(c.tree(x.base[:], 2, 0))
	} else {
		for b < len(bsh)-1 && bsh[b].kind == shNone {
			b++
		}
	}
	if bsh[b].kind == shNone {
		m.fail("delta base %d not available", b)
		return dst
	}
	d := m.codeDelta(c, x, b, bsh[b], 0, 0)
	m.h = mix(m.h, 2^zigzag(d)<<8)
	v := bsh[b].v + d
	m.pred = recon(m.pred[:0], bb[b], bsh[b], v)
	sh := reconShape(m.pred, bb[b], bsh[b], v)
	return m.finishValue(x, dst, m.pred, sh, limit)
}

// decRingValue decodes a repeat of one of the context's recent values.
func (m *model) decRingValue(c *coder, x *vctx, dst []byte, limit int) []byte {
	k := m.codeRingIdx(c, x, 0)
	if k < 0 || k >= ringN || !m.t.alive(x.ring[k]) {
		m.fail("recent-value index %d is empty or evicted", k)
		return dst
	}
	m.h = mix(m.h, 3^uint64(k)<<8)
	s := m.t.get(x.ring[k]).s
	m.ringUse(x, k)
	m.tmp = append(m.tmp[:0], s...)
	return m.finishValue(x, dst, m.tmp, parseShape(m.tmp), limit)
}

// decRefValue decodes a reference to a value anywhere in the table, counted
// back from the newest entry.
func (m *model) decRefValue(c *coder, x *vctx, dst []byte, limit int) []byte {
	d := c.num(&m.valRef, 0)
	if d >= uint64(m.t.next-1) {
		m.fail("value index %d out of range", d)
		return dst
	}
	id := m.t.next - 1 - uint32(d)
	if !m.t.alive(id) {
		m.fail("value reference to evicted entry %d", id)
		return dst
	}
	e := m.t.get(id)
	if e.kind != kVal {
		m.fail("value reference to a markup entry %d", id)
		return dst
	}
	m.h = mix(m.h, 4^uint64(id)<<8)
	m.ringPush(x, id)
	m.tmp = append(m.tmp[:0], e.s...)
	return m.finishValue(x, dst, m.tmp, parseShape(m.tmp), limit)
}

// decLiteralValue decodes a value spelled out: a UUID, a blob, prose or
// pieces; then records it in the context.
func (m *model) decLiteralValue(c *coder, x *vctx, dst []byte, limit int, st uint8) []byte {
	start := len(dst)
	prose, uuid := false, false
	switch {
	case c.bit(&x.pUUID, 0) == 1:
		uuid = true
		dst = m.decUUID(c, x, dst, limit)
	case st != stValDigits && limit-len(dst) >= blobMin && c.bit(&m.pBlob, 0) == 1:
		m.noRecord = true
		return m.decBlob(c, x, dst, limit)
	default:
		prose = c.bit(&x.pProse, 0) == 1
		n := c.num(&x.ln, 0)
		if n > uint64(limit-len(dst)) {
			m.fail("value of %d bytes overruns the message", n)
			return dst
		}
		if prose {
			if st == stValDigits {
				m.fail("text inside a number")
				return dst
			}
			dst = grow(dst, int(n), limit)
			dst = m.decProse(c, x, dst, int(n))
		} else {
			dst = m.decPieces(c, &m.valPieces, dst, int(n), limit)
		}
	}
	if m.err != nil {
		return dst
	}
	v := dst[start:]
	m.h = mix(m.h, literalHash(v, prose))
	m.afterLiteral(x, v, parseShape(v), uuid)
	return dst
}

// decUUID decodes a UUID literal: a prefix of up to 64 bytes coded as pieces,
// the letter case, then 32 hex digits, four per 16-bit symbol, dashed 8-4-4-4-12.
func (m *model) decUUID(c *coder, x *vctx, dst []byte, limit int) []byte {
	pre := c.num(&x.ln, 0)
	if pre > 64 || pre+36 > uint64(limit-len(dst)) {
		m.fail("uuid overruns the message")
		return dst
	}
	dst = grow(dst, int(pre)+36, limit)
	dst = m.decPieces(c, &m.valPieces, dst, int(pre), limit)
	if m.err != nil {
		return dst
	}
	digits := "0123456789abcdef"
	if c.direct(0, 1) == 1 {
		digits = "0123456789ABCDEF"
	}
	// Eight symbols of four digits each, high nibble first, by table: a branch per
	// digit (letter or not) mispredicted about every other random digit.
	var hex [32]byte
	for j := range 8 {
		w := c.direct(0, 16)
		hex[4*j] = digits[w>>12&15]
		hex[4*j+1] = digits[w>>8&15]
		hex[4*j+2] = digits[w>>4&15]
		hex[4*j+3] = digits[w&15]
	}
	dst = append(dst, hex[:8]...)
	dst = append(dst, '-')
	dst = append(dst, hex[8:12]...)
	dst = append(dst, '-')
	dst = append(dst, hex[12:16]...)
	dst = append(dst, '-')
	dst = append(dst, hex[16:20]...)
	dst = append(dst, '-')
	return append(dst, hex[20:]...)
}

// finishValue appends a value rebuilt in m.tmp or m.pred, whose shape
// is sh, and updates the context.
func (m *model) finishValue(x *vctx, dst, v []byte, sh shape, limit int) []byte {
	if len(v) > limit-len(dst) {
		m.fail("value overruns the message")
		return dst
	}
	dst = grow(dst, len(v), limit)
	dst = append(dst, v...)
	m.setLast(x, v, sh)
	return dst
}

// assocSet is the first way of key's two-way set. Keys are odd (bit 0
// marks "a key is set"), so the set comes from the bits above it.
func assocSet(key uint64) uint64 { return key >> 1 % (nAssoc / 2) * 2 }
