package xmltok

import (
	"encoding/binary"
	"sort"
)

// Entry kinds.
const (
	kMark = 1 // a markup token, or a word of a long text value
	kVal  = 2 // a value
)

const (
	// entryOverhead is what an entry costs on top of its bytes when it is
	// charged to the DictBytes budget, as in HPACK (RFC 7541 §4.1).
	entryOverhead = 32
	// maxID stops insertions before ids wrap; both ends stop at the same
	// message, after which the model just stops learning new strings.
	maxID = 1 << 31
)

// entry is a dictionary string. Markup entries carry the scanner states
// they start and end in, what they do to the secret-element flag, and
// the tokens that followed them (most recent first): the structure
// model.
type entry struct {
	s        string
	kind     uint8
	start    uint8
	end      uint8
	sens     uint8
	attrSens bool
	succ     [nSucc]uint32
}

// table is the dictionary shared by the two ends of a direction: a
// read-only static part (ids 1..len(staticTable)) and a dynamic FIFO with
// stable ids (firstDyn, firstDyn+1, ...) evicted oldest first when the
// sum of len+32 over its entries would exceed the budget. Ids are never
// reused, so a reference to an evicted entry is detectable, as in
// x/net/http2/hpack's tables.go.
type table struct {
	ents       []entry // ring buffer indexed by id & (len-1)
	head, next uint32  // live dynamic ids are [head, next)
	size, max  int
	mark       [nStates]map[string]uint32
	vals       map[string]uint32
}

var firstDyn = uint32(len(staticTable)) + 1

func (t *table) init(max int) {
	t.max = max
	t.head, t.next = firstDyn, firstDyn
	t.ents = make([]entry, 64)
	for i := range t.mark {
		t.mark[i] = map[string]uint32{}
	}
	t.vals = map[string]uint32{}
}

func (t *table) alive(id uint32) bool {
	return id != 0 && (id < firstDyn || (id >= t.head && id < t.next))
}

// get returns the entry of a live id. Static entries are shared by all
// tables and must not be modified; only markup entries are, and static
// entries are all values.
func (t *table) get(id uint32) *entry {
	if id < firstDyn {
		return &staticEntries[id]
	}
	return &t.ents[id&uint32(len(t.ents)-1)]
}

func (t *table) lookupVal(v []byte) uint32 {
	if id, ok := t.vals[string(v)]; ok {
		return id
	}
	return staticVals[string(v)]
}

func (t *table) insert(kind, start, end uint8, b []byte) uint32 {
	cost := len(b) + entryOverhead
	if cost > t.max || t.next >= maxID {
		return 0
	}
	for t.size+cost > t.max {
		t.evict()
	}
	if int(t.next-t.head) == len(t.ents) {
		n := make([]entry, 2*len(t.ents))
		for id := t.head; id < t.next; id++ {
			n[id&uint32(len(n)-1)] = t.ents[id&uint32(len(t.ents)-1)]
		}
		t.ents = n
	}
	id := t.next
	t.next++
	s := string(b)
	e := &t.ents[id&uint32(len(t.ents)-1)]
	*e = entry{s: s, kind: kind, start: start, end: end}
	if kind == kMark {
		e.sens, e.attrSens = analyze(b, start, end)
		t.mark[start%nStates][s] = id
	} else {
		t.vals[s] = id
	}
	t.size += cost
	return id
}

func (t *table) evict() {
	id := t.head
	e := &t.ents[id&uint32(len(t.ents)-1)]
	if e.kind == kMark {
		if m := t.mark[e.start%nStates]; m[e.s] == id {
			delete(m, e.s)
		}
	} else if t.vals[e.s] == id {
		delete(t.vals, e.s)
	}
	t.size -= len(e.s) + entryOverhead
	*e = entry{}
	t.head++
}

// Static table views, built once from the generated staticTable.
var (
	staticEntries []entry           // index = id; [0] unused
	staticVals    map[string]uint32 // string -> id
	// staticPieces maps the first four bytes of a static string to the
	// ids of the strings starting with them, longest first. New markup
	// and values are coded as runs of literal bytes and static pieces,
	// which is what makes a first message cheap.
	staticPieces map[uint32][]uint16
)

func init() {
	staticEntries = make([]entry, len(staticTable)+1)
	staticVals = make(map[string]uint32, len(staticTable))
	staticPieces = map[uint32][]uint16{}
	for i, s := range staticTable {
		id := uint32(i + 1)
		staticEntries[id] = entry{s: s, kind: kVal}
		if _, dup := staticVals[s]; !dup {
			staticVals[s] = id
		}
		if len(s) >= 4 {
			k := binary.LittleEndian.Uint32([]byte(s[:4]))
			staticPieces[k] = append(staticPieces[k], uint16(id))
		}
	}
	for _, ids := range staticPieces {
		sort.SliceStable(ids, func(a, b int) bool { return len(staticTable[ids[a]-1]) > len(staticTable[ids[b]-1]) })
	}
}

// staticMatch returns the id and length of the longest static string
// that b starts with, or 0, 0.
func staticMatch(b []byte) (uint32, int) {
	if len(b) < 4 {
		return 0, 0
	}
	for _, id := range staticPieces[binary.LittleEndian.Uint32(b)] {
		s := staticTable[id-1]
		if hasPrefix(b, s) {
			return uint32(id), len(s)
		}
	}
	return 0, 0
}
