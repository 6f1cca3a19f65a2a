package codec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
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

// maxStoredHead caps the size of a head kept as a reference: a huge head is coded once
// and forgotten, so the model's memory stays below kinds × headRefs × maxStoredHead.
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
	switch len(name) {
	case len("Authorization"), len("Proxy-Authorization"), len("Cookie"), len("Set-Cookie"):
	default:
		return false
	}
	switch {
	case strings.EqualFold(name, "Authorization"), strings.EqualFold(name, "Proxy-Authorization"),
		strings.EqualFold(name, "Cookie"), strings.EqualFold(name, "Set-Cookie"):
		return true
	}
	return false
}

// headModel is one direction's memory of past heads, per kind.
type headModel struct {
	refs map[byte][]*refHead // kind -> heads, most recently used first
}

func newHeadModel() *headModel { return &headModel{refs: map[byte][]*refHead{}} }

// refHead is a remembered head: its strings and, per position, the value predicted for
// the next head coded against it.
type refHead struct {
	val  []string
	pred []string // nil when no position is expected to change; else pred[i] (val[i] if unchanged)
	// link[i] = k+1 (k < i) when position i is predicted to equal position k of the head
	// being coded (the Content-Length header mirrors the envelope's length); nil when no
	// position is linked.
	link []uint8
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
func (r *refHead) matches(list []string, fixed, i int) (same, pred bool) {
	if r == nil || i >= len(r.val) || sensitiveAt(list, fixed, i) {
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

// headFields flattens a parsed head into its list of strings. fixed is how many leading
// strings are not header name/value pairs.
func headFields(kind byte, head []byte) (list []string, fixed int, ok bool) {
	switch kind {
	case envelope.KindRequest:
		h, err := envelope.ParseRequest(head)
		if err != nil {
			return nil, 0, false
		}
		list = append(make([]string, 0, 7+2*len(h.Header)), h.ExchangeID, h.Upstream, h.Method, h.Target,
			strconv.Itoa(h.ProtoMinor), strconv.FormatBool(h.Expect), strconv.FormatInt(h.ContentLength, 10))
		fixed = 7
		list = appendHeader(list, h.Header)
	case envelope.KindResponse:
		h, _, err := envelope.ParseResponse(head)
		if err != nil || h == nil {
			return nil, 0, false
		}
		list = append(make([]string, 0, 4+2*len(h.Header)), strconv.Itoa(h.Status), h.Reason,
			strconv.Itoa(h.ProtoMinor), strconv.FormatInt(h.ContentLength, 10))
		fixed = 4
		list = appendHeader(list, h.Header)
	case envelope.KindError:
		_, e, err := envelope.ParseResponse(head)
		if err != nil || e == nil {
			return nil, 0, false
		}
		list, fixed = []string{strconv.Itoa(e.Status), e.Cause, e.Message}, 3
	default:
		return nil, 0, false
	}
	return list, fixed, true
}

func appendHeader(list []string, h httpwire.Header) []string {
	for _, f := range h {
		list = append(list, f.Name, f.Value)
	}
	return list
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

// appendHead rebuilds the length-prefixed head from its list; ok is false for a list
// that is not a valid head of kind (hostile payload).
func appendHead(dst []byte, kind byte, list []string) ([]byte, bool) {
	atoi := func(s string) (int64, bool) {
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil && strconv.FormatInt(n, 10) == s
	}
	header := func(fixed int) (httpwire.Header, bool) {
		if len(list) < fixed || (len(list)-fixed)%2 != 0 {
			return nil, false
		}
		h := make(httpwire.Header, 0, (len(list)-fixed)/2)
		for i := fixed; i < len(list); i += 2 {
			h = append(h, httpwire.Field{Name: list[i], Value: list[i+1]})
		}
		return h, true
	}
	switch kind {
	case envelope.KindRequest:
		h, ok := header(7)
		if !ok {
			return dst, false
		}
		proto, ok1 := atoi(list[4])
		cl, ok2 := atoi(list[6])
		expect, err := strconv.ParseBool(list[5])
		if !ok1 || !ok2 || err != nil || proto < 0 || proto > 255 || cl < -1 {
			return dst, false
		}
		r := envelope.Request{ExchangeID: list[0], Upstream: list[1], Method: list[2], Target: list[3],
			ProtoMinor: int(proto), Expect: expect, ContentLength: cl, Header: h}
		return r.Append(dst), true
	case envelope.KindResponse:
		h, ok := header(4)
		if !ok {
			return dst, false
		}
		status, ok1 := atoi(list[0])
		proto, ok2 := atoi(list[2])
		cl, ok3 := atoi(list[3])
		if !ok1 || !ok2 || !ok3 || status < 0 || status > 0xffff || proto < 0 || proto > 255 || cl < -1 {
			return dst, false
		}
		r := envelope.Response{Status: int(status), Reason: list[1], ProtoMinor: int(proto), ContentLength: cl, Header: h}
		return r.Append(dst), true
	case envelope.KindError:
		if len(list) != 3 {
			return dst, false
		}
		status, ok := atoi(list[0])
		if !ok || status < 0 || status > 0xffff {
			return dst, false
		}
		e := envelope.Error{Status: int(status), Cause: list[1], Message: list[2]}
		return e.Append(dst), true
	}
	return dst, false
}

// sensitiveAt reports whether position i of a list holds a credential value.
func sensitiveAt(list []string, fixed, i int) bool {
	return i > fixed && (i-fixed)%2 == 1 && sensitiveHeader(list[i-1])
}

// selectRef returns the index of the remembered head of kind that list is estimated to
// code shortest against (the most recent one of those that tie), or noRef. The encoder
// codes against it and commit learns from it: both ends choose the same one, as their
// models and lists are identical.
func (m *headModel) selectRef(kind byte, list []string, fixed int) int {
	best, bestCost := noRef, 0
	for i, r := range m.refs[kind] {
		cost := 0
		for j := 0; j < len(list) && (best == noRef || cost < bestCost); j++ {
			switch {
			case j >= len(r.val) || sensitiveAt(list, fixed, j):
				cost += 2 + len(list[j])
			case list[j] == r.val[j]:
			case r.predictedAs(list, j):
			default:
				// About what an edit of the differing middle costs; numbers and dates
				// code in about as much.
				a, b := r.val[j], list[j]
				pre := commonPrefix(a, b)
				cost += 2 + len(b) - pre - commonSuffix(a[pre:], b[pre:])
			}
		}
		if best == noRef || cost < bestCost {
			best, bestCost = i, cost
		}
	}
	return best
}

// encode appends the coding of list against the best remembered head of kind and
// returns the reference it used; the caller applies the update with commit once it
// keeps the coding.
func (m *headModel) encode(dst []byte, kind byte, list []string, fixed int) ([]byte, int) {
	best := m.selectRef(kind, list, fixed)
	var ref *refHead
	var refLen int
	if best != noRef {
		ref = m.refs[kind][best]
		refLen = len(ref.val)
	}
	if ref != nil && len(list) == refLen {
		all := true
		for i := range list {
			if _, pred := ref.matches(list, fixed, i); !pred {
				all = false
				break
			}
		}
		if all {
			return append(dst, byte(best)|refPredicted), best
		}
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
		same, pred := ref.matches(list, fixed, i)
		if same || pred {
			ns, np := 0, 0
			for j := i; j < len(list); j++ {
				s, p := ref.matches(list, fixed, j)
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
		case sensitiveAt(list, fixed, i):
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

// httpDate is the only date format HTTP/1.1 senders generate (RFC 9110 §5.6.7).
const httpDate = "Mon, 02 Jan 2006 15:04:05 GMT"

// parseHTTPDate parses s as an HTTP date that formats back to exactly s.
func parseHTTPDate(s string) (int64, bool) {
	if len(s) != len(httpDate) {
		return 0, false
	}
	tm, err := time.Parse(httpDate, s)
	if err != nil || tm.Format(httpDate) != s {
		return 0, false
	}
	return tm.Unix(), true
}

// appendChange codes s against the reference string r with the cheapest op.
func appendChange(dst []byte, r, s string) []byte {
	if a, ok := parseHTTPDate(r); ok {
		if b, ok := parseHTTPDate(s); ok {
			return binary.AppendVarint(append(dst, opDate), b-a)
		}
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
// with identical arguments.
func (m *headModel) commit(kind byte, list []string, fixed int) {
	size := 0
	for _, s := range list {
		size += len(s)
	}
	stored := &refHead{} // empty when too big to keep: coded literally next time
	if size <= maxStoredHead {
		var ref *refHead
		if best := m.selectRef(kind, list, fixed); best != noRef {
			ref = m.refs[kind][best]
		}
		stored.val = make([]string, len(list))
		lp := lengthPos(kind)
		for i, s := range list {
			if sensitiveAt(list, fixed, i) {
				continue // "", never predicted
			}
			if ref != nil && i < len(ref.val) && ref.val[i] == s {
				s = ref.val[i] // shared with the reference
			} else {
				s = strings.Clone(s) // never alias a message buffer
			}
			stored.val[i] = s
			if stored.pred != nil {
				stored.pred[i] = s
			}
			switch {
			case lp >= 0 && i > fixed && i > lp && (i-fixed)%2 == 1 && s == list[lp] &&
				strings.EqualFold(list[i-1], "Content-Length"):
				if stored.link == nil {
					stored.link = make([]uint8, len(list))
				}
				stored.link[i] = uint8(lp + 1)
			case ref != nil && i < len(ref.val) && ref.val[i] != s:
				if p, ok := nextStep(ref.val[i], s); ok && size+len(p) <= maxStoredHead {
					if stored.pred == nil {
						stored.pred = make([]string, len(list))
						copy(stored.pred, stored.val)
					}
					stored.pred[i] = p
					size += len(p)
				}
			}
		}
	}
	// Push in front and forget the oldest. The reference is kept too: interleaved
	// operations (credit, confirm, reserve...) each keep their own latest head.
	refs := m.refs[kind]
	if len(refs) == headRefs {
		refs = refs[:headRefs-1]
	}
	refs = append(refs, nil)
	copy(refs[1:], refs)
	refs[0] = stored
	m.refs[kind] = refs
}

// nextStep returns the value that follows s when r changed into s by a numeric step (a
// decimal integer, the trailing number of a string with the same prefix, an HTTP date):
// s advanced by the same step. ok is false for any other change. The prediction is a
// plain string both ends compute alike: a value is coded as predicted only when it is
// exactly that string.
func nextStep(r, s string) (string, bool) {
	if a, ok := decimal(r); ok {
		if b, ok := decimal(s); ok {
			return strconv.FormatInt(b+(b-a), 10), true // |a|, |b| < 1e18: no overflow
		}
		return "", false
	}
	if a, ok := parseHTTPDate(r); ok {
		if b, ok := parseHTTPDate(s); ok {
			next := time.Unix(b+(b-a), 0).UTC().Format(httpDate)
			_, ok = parseHTTPDate(next) // a 4-digit year
			return next, ok
		}
		return "", false
	}
	if rp, rn, ok := tailNumber(r); ok {
		if sp, sn, ok := tailNumber(s); ok && rp == sp && sn+(sn-rn) >= 0 {
			return sp + strconv.FormatInt(sn+(sn-rn), 10), true
		}
	}
	return "", false
}

// decode reads a coded list of kind from p, returning the list, the reference index used
// and the rest of p. maxBytes bounds the total size of the strings it produces.
func (m *headModel) decode(p []byte, kind byte, maxBytes int) (list []string, ref int, rest []byte, err error) {
	d := headDecoder{p: p, maxBytes: maxBytes, fixed: fixedFields(kind)}
	rb, err := d.readRef(m, kind)
	if err != nil {
		return nil, 0, nil, err
	}
	if err := d.readCount(rb); err != nil {
		return nil, 0, nil, err
	}
	d.list = make([]string, 0, min(d.n, 64))
	if rb != noRef && rb&refPredicted != 0 {
		if err := d.addPredicted(len(d.refList)); err != nil {
			return nil, 0, nil, err
		}
		return d.list, d.ref, d.p, nil
	}
	for uint64(len(d.list)) < d.n {
		if err := d.step(); err != nil {
			return nil, 0, nil, err
		}
	}
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

	n         uint64 // fields the head has
	list      []string
	total     int // bytes of list
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
	refs := m.refs[kind]
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
		s, rest, ok := readStr(d.p)
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
	switch op {
	case opDelta, opSameDelta:
		if a, ok := decimal(r); ok {
			d.lastDelta, d.haveDelta = diff, true
			return strconv.FormatInt(a+diff, 10), nil
		}
	case opDate:
		if a, ok := parseHTTPDate(r); ok && diff > -1<<40 && diff < 1<<40 {
			s := time.Unix(a+diff, 0).UTC().Format(httpDate)
			// A date outside 4-digit years formats longer: refuse it, as the encoder
			// could never have produced it.
			if _, ok := parseHTTPDate(s); !ok {
				return "", corruptHead("date out of range")
			}
			return s, nil
		}
	default: // opTailDelta
		if prefix, a, ok := tailNumber(r); ok && a+diff >= 0 {
			return prefix + strconv.FormatInt(a+diff, 10), nil
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
	mid, rest, ok := readStr(d.p[k1+k2:])
	if !ok {
		return "", corruptHead("edit middle")
	}
	d.p = rest
	return r[:pre] + mid + r[uint64(len(r))-suf:], nil
}

func decimal(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && strconv.FormatInt(n, 10) == s
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
	n, err := strconv.ParseInt(s[i:], 10, 64)
	return s[:i], n, err == nil
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

func commonSuffix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	return i
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

func readStr(p []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return "", nil, false
	}
	return string(p[k : k+int(n)]), p[k+int(n):], true
}

// splitHead returns the kind, the head's list and where the body starts, when msg starts
// with an envelope head that the list rebuilds byte for byte; ok is false otherwise
// (then the whole message is coded as body).
func splitHead(msg []byte) (kind byte, list []string, fixed int, body []byte, ok bool) {
	head, body, err := envelope.Split(msg)
	if err != nil {
		return 0, nil, 0, nil, false
	}
	kind = head[1]
	if head[0] != envelope.Version {
		return 0, nil, 0, nil, false
	}
	list, fixed, ok = headFields(kind, head)
	if !ok {
		return 0, nil, 0, nil, false
	}
	// Canonical? The decoder rebuilds the head from the list; it must come out identical.
	prefixLen := len(msg) - len(body)
	var scratch [512]byte
	re, ok := appendHead(scratch[:0], kind, list)
	if !ok || !bytes.Equal(re, msg[:prefixLen]) {
		return 0, nil, 0, nil, false
	}
	return kind, list, fixed, body, true
}

// digest hashes the model's state, for tests that check both ends stay identical.
func (m *headModel) digest() uint64 {
	h := fnv.New64a()
	for _, kind := range []byte{envelope.KindRequest, envelope.KindResponse, envelope.KindError} {
		for _, r := range m.refs[kind] {
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
