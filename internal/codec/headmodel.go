package codec

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/bits"
	"strconv"
	"strings"

	"github.com/soapgw/soapgw/internal/envelope"
)

// The head model codes the envelope head of a tunnel message (method, target, status,
// header fields; see internal/envelope) against the heads sent before it on the same
// connection direction, as HPACK does for HTTP/2, but positionally: a head is a list of
// strings, and each string is coded as "same as in the reference head", a small numeric
// delta, an edit of the reference string, or a literal. The reference is one of the last
// [headRefs] heads of the same kind (most recently used first), so interleaved
// operations (credit, confirm, reserve...) each find their own previous head.
//
// Each remembered head also carries a prediction of its next value per position: a
// position that changed by a numeric step (a decimal, the trailing number of a string, an
// HTTP date) is predicted to change by the same step again; the Content-Length header
// is predicted to repeat the envelope's length; any other position to stay the same. A
// run of positions "as predicted" costs one byte, and a head entirely as predicted
// costs only its reference byte: a client's steady heads, whose exchange id and call
// counters advance by one each time, cost one byte.
//
// Both ends apply the same updates in the same order (the tunnel feeds messages in wire
// order), so their lists stay identical. Values of credential headers are never kept:
// they are coded literally every time and stored as empty strings, never predicted.

// headRefs is how many heads per kind both ends remember.
const headRefs = 8

// maxStoredHead caps the size of a head kept as a reference (its values and predictions):
// a huge head is coded once and forgotten, so the model's memory stays below kinds ×
// (headRefs+1) × 2·maxStoredHead (a remembered head's buffer, reused, may have room for
// twice what it holds), plus the scratch of one head (maxScratchBytes).
const maxStoredHead = 16 << 10

// maxHeadFields bounds the strings of one head a decoder accepts (a head of 64 KiB holds
// at most 32 Ki fields), so a hostile count cannot make it allocate.
const maxHeadFields = 1 << 16

// A list is coded as: ref (u8), [count (uvarint)], then ops covering every position in
// order. The ref byte is noRef (no reference; the count follows), or the reference's
// index (bits 0-2) with at most one of the flags:
//
//	refSameCount: the list has as many positions as the reference (no count follows);
//	refPredicted: the list has as many positions as the reference and every one of
//	              them has its predicted value (neither count nor ops follow).
const (
	refIndex     = 0x07
	refSameCount = 0x08
	refPredicted = 0x10
)

// Head-list ops.
const (
	opSameMax   = 0x3f // 0x00..0x3f: the next op+1 positions equal the reference's
	opLiteral   = 0x40 // uvarint len, bytes
	opDelta     = 0x41 // zigzag varint: decimal integer = reference's + delta
	opEdit      = 0x42 // uvarint prefix, uvarint suffix, uvarint len, middle bytes
	opSensitive = 0x43 // uvarint len, bytes; never stored (kept as "")
	opTailDelta = 0x44 // zigzag varint: same text up to the trailing digits, which are the reference's + delta
	opDate      = 0x45 // zigzag varint: an HTTP date (RFC 1123, GMT) = the reference's + delta seconds
	opSameDelta = 0x46 // a decimal integer = the reference's + the delta of this head's previous opDelta
	opPredicted = 0x80 // 0x80..0xbf: the next op-0x7f positions have their predicted values
	opPredMax   = 0xbf
	opSkip      = 0xc0 // 0xc0..0xff: ((op>>3)&7)+1 predicted positions, then op opLiteral+(op&7) (..opSameDelta)
	opSkipMax   = 8    // predicted positions an opSkip byte holds
	noRef       = 0xff // ref byte: no reference
)

// The ref byte holds the index in 3 bits.
var _ [refIndex + 1 - headRefs]struct{}

// sensitiveHeader reports whether a header's value is a credential (HPACK's never-indexed
// fields): such values never enter the model.
func sensitiveHeader(name string) bool {
	switch len(name) { // each name has a length of its own
	case len("Authorization"):
		return strings.EqualFold(name, "Authorization")
	case len("Proxy-Authorization"):
		return strings.EqualFold(name, "Proxy-Authorization")
	case len("Cookie"):
		return strings.EqualFold(name, "Cookie")
	case len("Set-Cookie"):
		return strings.EqualFold(name, "Set-Cookie")
	}
	return false
}

// headModel is one direction's memory of past heads, per kind.
//
// Coding a head allocates nothing once the model has remembered headRefs heads of its
// kind: the lists it codes are views of the message (splitHead) or of its scratch buffer
// (decode), and commit copies a list into the remembered head it forgets, whose buffers
// it reuses.
type headModel struct {
	refs  [4][]*refHead // by kindSlot: heads, most recently used first
	spare *refHead      // the head commit fills next: the last one forgotten

	// Scratch of splitHead and decode: the list they return and the bytes of its strings
	// that are not views of the message or payload.
	list  []string
	buf   []byte
	flags []uint8 // encode's

	// The reference selectRef chose (or, decoding, the payload named) for the list the
	// model coded last, for commit to learn against without choosing again.
	chosen choice
	// By kindSlot: the positions (< 64) where the last head of the kind that changed
	// any differed from its reference; selectRef looks there first.
	hot [4]uint64
}

// choice is the reference chosen for one list, named by its first string's address.
type choice struct {
	kind  byte
	first *string
	n     int
	ref   int
	flags []uint8 // per position, how it matched the reference (encode), or nil
}

// How a position of a list matched the reference head (encode's flags).
const (
	matchSame = 1 << iota // the reference's value
	matchPred             // its predicted value
)

// choose remembers ref as the reference of list.
func (m *headModel) choose(kind byte, list []string, ref int, flags []uint8) {
	if len(list) > 0 {
		m.chosen = choice{kind, &list[0], len(list), ref, flags}
	}
}

// chosenRef returns the reference of list: the one encode or decode used for it, when
// list is the one they coded last (the model's state has not changed since: splitHead,
// decode and commit forget the choice), else selectRef's. A payload from an encoder
// names the reference its selectRef chose: the decoder learns against the same one.
func (m *headModel) chosenRef(c choice, kind byte, list []string, fixed int) (int, []uint8) {
	if len(list) > 0 && c.first == &list[0] && c.n == len(list) && c.kind == kind {
		return c.ref, c.flags
	}
	return m.selectRef(kind, list, fixed), nil
}

func newHeadModel() *headModel { return &headModel{} }

// kindSlot is the index of a kind's heads in headModel.refs (0: unknown kinds, which no
// list has).
func kindSlot(kind byte) int {
	switch kind {
	case envelope.KindRequest:
		return 1
	case envelope.KindResponse:
		return 2
	case envelope.KindError:
		return 3
	}
	return 0
}

// refHead is a remembered head: its strings and, per position, the value predicted for
// the next head coded against it.
type refHead struct {
	val  []string
	pred []string // nil when no position is expected to change; else pred[i] (val[i] if unchanged)
	// link[i] = k+1 (k < i) when position i is predicted to equal position k of the head
	// being coded (the Content-Length header mirrors the envelope's length); nil when no
	// position is linked.
	link []uint8

	// The bytes of val's and pred's strings, and the arrays of pred and link, kept for
	// the next head stored here once this one is forgotten.
	buf       []byte
	predStore []string
	linkStore []uint8
}

// predicted returns the value position i of list is predicted to have, given the
// positions of list before i.
func (r *refHead) predicted(list []string, i int) (string, bool) {
	if r.link != nil && r.link[i] != 0 {
		k := int(r.link[i]) - 1
		if k >= i || k >= len(list) {
			return "", false
		}
		return list[k], true
	}
	if r.pred == nil {
		return r.val[i], true
	}
	return r.pred[i], true
}

// predictedAs reports whether position i of list has its predicted value.
func (r *refHead) predictedAs(list []string, i int) bool {
	p, ok := r.predicted(list, i)
	return ok && p == list[i]
}

// matches reports whether position i of list equals the reference's value (same) and
// whether it equals its predicted value (pred). Credentials never match.
func (r *refHead) matches(list []string, cred *credentials, i int) (same, pred bool) {
	if r == nil || i >= len(r.val) || cred.at(list, i) {
		return false, false
	}
	s := list[i]
	p, ok := r.predicted(list, i)
	return s == r.val[i], ok && s == p
}

// lengthPos is the position of the envelope's content length in a head of kind, or -1.
func lengthPos(kind byte) int {
	switch kind {
	case envelope.KindRequest:
		return 6
	case envelope.KindResponse:
		return 3
	}
	return -1
}

// fixedFields is how many leading strings of a head of kind are not header fields.
func fixedFields(kind byte) int {
	switch kind {
	case envelope.KindRequest:
		return 7
	case envelope.KindResponse:
		return 4
	case envelope.KindError:
		return 3
	}
	return 0
}

// sensitiveAt reports whether position i of a list holds a credential value.
func sensitiveAt(list []string, fixed, i int) bool {
	return i > fixed && (i-fixed)%2 == 1 && sensitiveHeader(list[i-1])
}

// credentials are the positions of a list that hold credential values (sensitiveAt),
// looked up once per list.
type credentials struct {
	mask  uint64 // bit i: position i, for i < 64
	fixed int
}

func credentialsOf(list []string, fixed int) credentials {
	c := credentials{fixed: fixed}
	for i := fixed + 1; i < len(list) && i < 64; i += 2 {
		if sensitiveHeader(list[i-1]) {
			c.mask |= 1 << i
		}
	}
	return c
}

// at reports whether position i of list, the list c was made for, is a credential.
func (c *credentials) at(list []string, i int) bool {
	if i < 64 {
		return c.mask>>i&1 != 0
	}
	return c.far(list, i)
}

//go:noinline
func (c *credentials) far(list []string, i int) bool { return sensitiveAt(list, c.fixed, i) }

// selectRef returns the index of the remembered head of kind that list is estimated to
// code shortest against (the most recent one of those that tie), or noRef. The encoder
// codes against it and commit learns from it: both ends choose the same one, as their
// models and lists are identical.
//
// A head's cost is a sum over its positions, and a head stops being a candidate once
// its sum reaches the best one's, so the order the positions are added in changes
// nothing but how soon that happens: after the first head, the positions that changed
// in the last head of the kind (hot) go first.
func (m *headModel) selectRef(kind byte, list []string, fixed int) int {
	best, bestCost := noRef, 0
	cred := credentialsOf(list, fixed)
	hot := m.hot[kindSlot(kind)]
	if len(list) < 64 {
		hot &= 1<<len(list) - 1
	}
	for i, r := range m.refs[kindSlot(kind)] {
		cost := 0
		// Equal positions, the most common, are tested inline.
		if best == noRef || hot == 0 {
			for j := 0; j < len(list) && (best == noRef || cost < bestCost); j++ {
				if j >= len(r.val) || list[j] != r.val[j] || cred.at(list, j) {
					cost += r.cost(list, &cred, j)
				}
			}
		} else {
			for h := hot; h != 0 && cost < bestCost; h &= h - 1 {
				cost += r.cost(list, &cred, bits.TrailingZeros64(h))
			}
			for j := 0; j < len(list) && cost < bestCost; j++ {
				if (j >= 64 || hot>>j&1 == 0) && (j >= len(r.val) || list[j] != r.val[j] || cred.at(list, j)) {
					cost += r.cost(list, &cred, j)
				}
			}
		}
		if best == noRef || cost < bestCost {
			best, bestCost = i, cost
		}
	}
	return best
}

// cost estimates what position j of list costs coded against r.
func (r *refHead) cost(list []string, cred *credentials, j int) int {
	switch {
	case j >= len(r.val) || cred.at(list, j):
		return 2 + len(list[j])
	case list[j] == r.val[j], r.predictedAs(list, j):
		return 0
	}
	// About what an edit of the differing middle costs; numbers and dates code in
	// about as much.
	a, b := r.val[j], list[j]
	pre := commonPrefix(a, b)
	return 2 + len(b) - pre - commonSuffix(a[pre:], b[pre:])
}

// encode appends the coding of list against the best remembered head of kind and
// returns the reference it used; the caller applies the update with commit once it
// keeps the coding.
func (m *headModel) encode(dst []byte, kind byte, list []string, fixed int) ([]byte, int) {
	best := m.selectRef(kind, list, fixed)
	cred := credentialsOf(list, fixed)
	var ref *refHead
	var refLen int
	if best != noRef {
		ref = m.refs[kindSlot(kind)][best]
		refLen = len(ref.val)
	}
	// Each position compared with the reference once: matchSame, matchPred.
	flags, all := m.flags[:0], ref != nil && len(list) == refLen
	for i := range list {
		same, pred := ref.matches(list, &cred, i)
		f := uint8(0)
		if same {
			f |= matchSame
		}
		if pred {
			f |= matchPred
		}
		flags = append(flags, f)
		all = all && pred
	}
	m.flags = flags
	m.choose(kind, list, best, flags)
	if all {
		return append(dst, byte(best)|refPredicted), best
	}
	switch {
	case ref == nil:
		dst = binary.AppendUvarint(append(dst, noRef), uint64(len(list)))
	case len(list) == refLen:
		dst = append(dst, byte(best)|refSameCount)
	default:
		dst = binary.AppendUvarint(append(dst, byte(best)), uint64(len(list)))
	}
	lastDelta, haveDelta := int64(0), false
	// Predicted positions wait in pending: up to opSkipMax of them before an explicit op
	// travel in its byte.
	pending := 0
	flushPending := func(keep int) {
		for pending > keep {
			k := min(pending, opPredMax-opPredicted+1)
			dst = append(dst, opPredicted+byte(k-1))
			pending -= k
		}
	}
	for i := 0; i < len(list); {
		// A run of positions equal to the reference's or to their predictions: the
		// longer of the two kinds of run starting here (covering the positions with
		// the fewest runs; predicted ones on a tie, as they merge with a following op).
		if flags[i] != 0 {
			ns, np := 0, 0
			for j := i; j < len(list); j++ {
				s, p := flags[j]&matchSame != 0, flags[j]&matchPred != 0
				if !s && !p {
					break
				}
				if s && ns == j-i {
					ns++
				}
				if p && np == j-i {
					np++
				}
				if ns < j-i+1 && np < j-i+1 {
					break
				}
			}
			if np >= ns {
				pending += np
				i += np
				continue
			}
			flushPending(0)
			for n := ns; n > 0; {
				k := min(n, opSameMax+1)
				dst = append(dst, byte(k-1))
				n -= k
			}
			i += ns
			continue
		}
		flushPending(opSkipMax)
		mark := len(dst)
		s := list[i]
		switch {
		case cred.at(list, i):
			dst = appendStr(append(dst, opSensitive), s)
		case i >= refLen:
			dst = appendStr(append(dst, opLiteral), s)
		default:
			if a, ok := decimal(ref.val[i]); ok {
				if b, ok := decimal(s); ok {
					// Content-Length travels twice (envelope and header) and changes by the
					// same amount in both: the second costs one byte.
					if haveDelta && b-a == lastDelta {
						dst = append(dst, opSameDelta)
					} else {
						dst = binary.AppendVarint(append(dst, opDelta), b-a)
					}
					lastDelta, haveDelta = b-a, true
					break
				}
			}
			dst = appendChange(dst, ref.val[i], s)
		}
		if pending > 0 {
			dst[mark] = opSkip | byte(pending-1)<<3 | (dst[mark] - opLiteral)
			pending = 0
		}
		i++
	}
	flushPending(0)
	return dst, best
}

// appendChange codes s against the reference string r with the cheapest op.
func appendChange(dst []byte, r, s string) []byte {
	if a, b, rOK, sOK := parseHTTPDates(r, s); rOK && sOK {
		return binary.AppendVarint(append(dst, opDate), b-a)
	}
	if rp, rn, ok := tailNumber(r); ok {
		if sp, sn, ok := tailNumber(s); ok && rp == sp {
			return binary.AppendVarint(append(dst, opTailDelta), sn-rn)
		}
	}
	pre := commonPrefix(r, s)
	suf := commonSuffix(r[pre:], s[pre:])
	mid := s[pre : len(s)-suf]
	edit := 1 + uvarintLen(uint64(pre)) + uvarintLen(uint64(suf)) + uvarintLen(uint64(len(mid))) + len(mid)
	if pre+suf > 0 && edit < 1+uvarintLen(uint64(len(s)))+len(s) {
		dst = append(dst, opEdit)
		dst = binary.AppendUvarint(dst, uint64(pre))
		dst = binary.AppendUvarint(dst, uint64(suf))
		return appendStr(dst, mid)
	}
	return appendStr(append(dst, opLiteral), s)
}

// commit remembers list as the most recent head of kind, with the predictions it learns
// from comparing list with the head selectRef picks for it. Encoder and decoder call it
// with identical arguments. The list is copied: it may view a message.
func (m *headModel) commit(kind byte, list []string, fixed int) {
	chosen := m.chosen
	m.chosen = choice{}
	size := 0
	for _, s := range list {
		size += len(s)
	}
	stored := m.spare
	if stored == nil {
		stored = new(refHead)
	}
	m.spare = nil
	stored.val, stored.pred, stored.link = stored.val[:0], nil, nil // empty when too big: coded literally next time
	if size <= maxStoredHead {
		var ref *refHead
		best, flags := m.chosenRef(chosen, kind, list, fixed)
		if best != noRef {
			ref = m.refs[kindSlot(kind)][best]
		}
		if changed := stored.learn(kind, list, fixed, ref, flags, size); changed != 0 {
			m.hot[kindSlot(kind)] = changed
		}
	}
	// Push in front and forget the oldest. The reference is kept too: interleaved
	// operations (credit, confirm, reserve...) each keep their own latest head.
	slot := kindSlot(kind)
	refs := m.refs[slot]
	if refs == nil {
		refs = make([]*refHead, 0, headRefs)
	}
	if len(refs) == headRefs {
		m.spare = refs[headRefs-1]
		refs = refs[:headRefs-1]
	}
	refs = append(refs, nil)
	copy(refs[1:], refs)
	refs[0] = stored
	m.refs[slot] = refs
}

// learn stores a copy of list (of size bytes) in r, with the predictions of its next
// values learned against ref (nil: none), and returns the positions (< 64) where list
// differs from ref. flags, when not nil, are encode's comparison of list with ref. r is
// neither ref nor any head list's strings view: its bytes are rewritten.
func (r *refHead) learn(kind byte, list []string, fixed int, ref *refHead, flags []uint8, size int) (changed uint64) {
	n := len(list)
	if cap(r.val) < n {
		r.val = make([]string, n)
	}
	r.val = r.val[:n]
	// Predictions add at most about as many bytes as the values; the total stays within
	// maxStoredHead. A buffer far larger than needed (from a big head) is not kept.
	need := min(2*size+32, maxStoredHead)
	if cap(r.buf) < need || cap(r.buf) > 4*need+1024 {
		r.buf = make([]byte, 0, need)
	}
	r.buf = r.buf[:0]
	lp := lengthPos(kind)
	cred := credentialsOf(list, fixed)
	for i, s := range list {
		if cred.at(list, i) {
			r.val[i] = "" // never predicted
			if r.pred != nil {
				r.pred[i] = ""
			}
			continue
		}
		start := len(r.buf)
		r.buf = append(r.buf, s...) // never alias a message buffer
		s = view(r.buf, start)
		r.val[i] = s
		if r.pred != nil {
			r.pred[i] = s
		}
		differs := ref != nil && (i >= len(ref.val) || (flags != nil && flags[i]&matchSame == 0) || (flags == nil && ref.val[i] != s))
		if differs && i < 64 {
			changed |= 1 << i
		}
		switch {
		case lp >= 0 && i > fixed && i > lp && (i-fixed)%2 == 1 && s == list[lp] &&
			(list[i-1] == "Content-Length" || strings.EqualFold(list[i-1], "Content-Length")):
			if r.link == nil {
				if cap(r.linkStore) < n {
					r.linkStore = make([]uint8, n)
				}
				r.link = r.linkStore[:n]
				clear(r.link)
			}
			r.link[i] = uint8(lp + 1)
		case differs && i < len(ref.val):
			start := len(r.buf)
			if buf, ok := appendNextStep(r.buf, ref.val[i], s); ok && size+len(buf)-start <= maxStoredHead {
				r.buf = buf
				p := view(buf, start)
				if r.pred == nil {
					if cap(r.predStore) < n {
						r.predStore = make([]string, n)
					}
					r.pred = r.predStore[:n]
					copy(r.pred, r.val[:i])
				}
				r.pred[i] = p
				size += len(p)
			}
		}
	}
	return changed
}

// decode reads a coded list of kind from p, returning the list, the reference index used
// and the rest of p. maxBytes bounds the total size of the strings it produces.
func (m *headModel) decode(p []byte, kind byte, maxBytes int) (list []string, ref int, rest []byte, err error) {
	d := headDecoder{p: p, maxBytes: maxBytes, fixed: fixedFields(kind), list: m.scratch(), buf: m.buf}
	defer func() { m.list, m.buf = d.list, d.buf }()
	rb, err := d.readRef(m, kind)
	if err != nil {
		return nil, 0, nil, err
	}
	if err := d.readCount(rb); err != nil {
		return nil, 0, nil, err
	}
	if rb != noRef && rb&refPredicted != 0 {
		if err := d.addPredicted(len(d.refList)); err != nil {
			return nil, 0, nil, err
		}
		m.choose(kind, d.list, d.ref, nil)
		return d.list, d.ref, d.p, nil
	}
	for uint64(len(d.list)) < d.n {
		if err := d.step(); err != nil {
			return nil, 0, nil, err
		}
	}
	m.choose(kind, d.list, d.ref, nil)
	return d.list, d.ref, d.p, nil
}

// headDecoder is the state of decoding one head: the bytes left, the reference head the
// operations refer to, and the fields decoded so far.
type headDecoder struct {
	p        []byte
	maxBytes int
	fixed    int // fields before the header name/value pairs

	ref     int
	rh      *refHead
	refList []string

	n         uint64   // fields the head has
	list      []string // views of p, of the reference's strings and of buf
	buf       []byte   // bytes of the fields decoded other than as views
	total     int      // bytes of list
	lastDelta int64
	haveDelta bool
}

func corruptHead(what string) error {
	return fmt.Errorf("%w: token head: %s", ErrCorrupt, what)
}

// readRef reads the reference byte: which earlier head of this kind the operations refer
// to (noRef: none), and whether the field count is the reference's.
func (d *headDecoder) readRef(m *headModel, kind byte) (byte, error) {
	if len(d.p) < 1 {
		return 0, corruptHead("missing reference")
	}
	rb := d.p[0]
	d.p = d.p[1:]
	d.ref = noRef
	if rb == noRef {
		return rb, nil
	}
	if rb&^(refIndex|refSameCount|refPredicted) != 0 || rb&refSameCount != 0 && rb&refPredicted != 0 {
		return 0, corruptHead(fmt.Sprintf("reference byte 0x%02x", rb))
	}
	d.ref = int(rb & refIndex)
	refs := m.refs[kindSlot(kind)]
	if d.ref >= len(refs) {
		return 0, corruptHead(fmt.Sprintf("reference %d of %d heads", d.ref, len(refs)))
	}
	d.rh = refs[d.ref]
	d.refList = d.rh.val
	return rb, nil
}

// readCount sets the number of fields: the reference's, or a uvarint.
func (d *headDecoder) readCount(rb byte) error {
	if rb != noRef && rb&(refSameCount|refPredicted) != 0 {
		d.n = uint64(len(d.refList))
		return nil
	}
	n, k := binary.Uvarint(d.p)
	if k <= 0 || n > maxHeadFields {
		return corruptHead("field count")
	}
	d.n, d.p = n, d.p[k:]
	return nil
}

// add appends a decoded field; it fails once the head exceeds maxBytes.
func (d *headDecoder) add(s string) error {
	d.total += len(s)
	d.list = append(d.list, s)
	if d.total > d.maxBytes {
		return ErrTooLarge
	}
	return nil
}

// addPredicted appends the predicted values of the next run positions.
func (d *headDecoder) addPredicted(run int) error {
	i := len(d.list)
	if uint64(i+run) > d.n || i+run > len(d.refList) {
		return corruptHead("predicted run beyond the reference")
	}
	for j := i; j < i+run; j++ {
		s, ok := d.rh.predicted(d.list, j)
		if !ok {
			return corruptHead("bad prediction link")
		}
		if err := d.add(s); err != nil {
			return err
		}
	}
	return nil
}

// step decodes one operation: a run of fields equal to (or predicted from) the
// reference, or one field as a literal, a numeric delta or an edit of the reference's.
func (d *headDecoder) step() error {
	if len(d.p) == 0 {
		return corruptHead("ops end early")
	}
	op := d.p[0]
	d.p = d.p[1:]
	switch {
	case op <= opSameMax:
		return d.sameRun(int(op) + 1)
	case op >= opPredicted && op <= opPredMax:
		return d.addPredicted(int(op-opPredicted) + 1)
	case op >= opSkip:
		// A predicted run, then a literal-class op in the same byte.
		if err := d.addPredicted(int(op>>3&7) + 1); err != nil {
			return err
		}
		op = opLiteral + op&7
		if uint64(len(d.list)) >= d.n {
			return corruptHead("op beyond the count")
		}
	}
	s, err := d.field(op)
	if err != nil {
		return err
	}
	return d.add(s)
}

// sameRun appends the reference's next run fields unchanged.
func (d *headDecoder) sameRun(run int) error {
	i := len(d.list)
	if uint64(i+run) > d.n || i+run > len(d.refList) {
		return corruptHead("same-run beyond the reference")
	}
	for j := i; j < i+run; j++ {
		if err := d.add(d.refList[j]); err != nil {
			return err
		}
	}
	return nil
}

// field decodes the value of the next field coded by op.
func (d *headDecoder) field(op byte) (string, error) {
	i := len(d.list)
	switch op {
	case opLiteral, opSensitive:
		s, rest, ok := viewStr(d.p)
		if !ok {
			return "", corruptHead("literal")
		}
		d.p = rest
		if op == opSensitive && !(i > d.fixed && (i-d.fixed)%2 == 1 && sensitiveHeader(d.list[i-1])) {
			return "", corruptHead("sensitive op on a plain field")
		}
		return s, nil
	case opDelta, opTailDelta, opDate, opSameDelta:
		return d.delta(op, i)
	case opEdit:
		return d.edit(i)
	}
	return "", corruptHead(fmt.Sprintf("op 0x%02x", op))
}

// delta decodes field i as a number, date or trailing number of the reference's field i
// plus a signed difference (opSameDelta: the previous difference again).
func (d *headDecoder) delta(op byte, i int) (string, error) {
	if i >= len(d.refList) {
		return "", corruptHead("delta beyond the reference")
	}
	var diff int64
	if op == opSameDelta {
		if !d.haveDelta {
			return "", corruptHead("repeated delta without a delta")
		}
		diff = d.lastDelta
	} else {
		var k int
		if diff, k = binary.Varint(d.p); k <= 0 {
			return "", corruptHead("delta")
		}
		d.p = d.p[k:]
	}
	r := d.refList[i]
	start := len(d.buf)
	switch op {
	case opDelta, opSameDelta:
		if a, ok := decimal(r); ok {
			d.lastDelta, d.haveDelta = diff, true
			d.buf = strconv.AppendInt(d.buf, a+diff, 10)
			return view(d.buf, start), nil
		}
	case opDate:
		if a, ok := parseHTTPDate(r); ok && diff > -1<<40 && diff < 1<<40 {
			var ok bool
			// A date outside 4-digit years formats longer: refuse it, as the encoder
			// could never have produced it.
			if d.buf, ok = appendHTTPDateFrom(d.buf, r, a, a+diff); !ok {
				return "", corruptHead("date out of range")
			}
			return view(d.buf, start), nil
		}
	default: // opTailDelta
		if prefix, a, ok := tailNumber(r); ok && a+diff >= 0 {
			d.buf = strconv.AppendInt(append(d.buf, prefix...), a+diff, 10)
			return view(d.buf, start), nil
		}
	}
	return "", corruptHead("delta on a non-number")
}

// edit decodes field i as the reference's field i with its middle replaced: a kept
// prefix and suffix length, then the new middle.
func (d *headDecoder) edit(i int) (string, error) {
	if i >= len(d.refList) {
		return "", corruptHead("edit beyond the reference")
	}
	r := d.refList[i]
	pre, k1 := binary.Uvarint(d.p)
	if k1 <= 0 {
		return "", corruptHead("edit prefix")
	}
	suf, k2 := binary.Uvarint(d.p[k1:])
	if k2 <= 0 || pre > uint64(len(r)) || suf > uint64(len(r))-pre {
		return "", corruptHead("edit bounds")
	}
	mid, rest, ok := viewStr(d.p[k1+k2:])
	if !ok {
		return "", corruptHead("edit middle")
	}
	d.p = rest
	start := len(d.buf)
	d.buf = append(append(append(d.buf, r[:pre]...), mid...), r[uint64(len(r))-suf:]...)
	return view(d.buf, start), nil
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// viewStr reads a length-prefixed string of p, as a view of p's bytes.
func viewStr(p []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return "", nil, false
	}
	return bytesView(p[k : k+int(n)]), p[k+int(n):], true
}

// digest hashes the model's state, for tests that check both ends stay identical.
func (m *headModel) digest() uint64 {
	h := fnv.New64a()
	for _, kind := range []byte{envelope.KindRequest, envelope.KindResponse, envelope.KindError} {
		for _, r := range m.refs[kindSlot(kind)] {
			fmt.Fprintf(h, "%c%d|", kind, len(r.val))
			for i, s := range r.val {
				fmt.Fprintf(h, "%d:%s", len(s), s)
				if r.pred != nil && r.pred[i] != s {
					fmt.Fprintf(h, ">%d:%s", len(r.pred[i]), r.pred[i])
				}
				if r.link != nil && r.link[i] != 0 {
					fmt.Fprintf(h, "=%d", r.link[i])
				}
			}
		}
	}
	return h.Sum64()
}
