package codec

import (
	"encoding/binary"
	"strconv"

	"github.com/soapgw/soapgw/internal/envelope"
)

// From envelope heads to head lists and back, without allocations. The envelope package
// parses a head into structs with a string per head and a slice per header; the head
// model instead reads the bytes in place, with the same rules, and writes heads directly.
// Tests pin both against the envelope package: splitHead accepts exactly the heads
// envelope parses and writes back byte for byte, appendHead writes what envelope's Append
// writes.

// protoNames are the strings of the protocol minor versions a head can carry.
var protoNames = func() (p [256]string) {
	for i := range p {
		p[i] = strconv.Itoa(i)
	}
	return p
}()

// headParser reads the fields of an envelope head as envelope's reader does: uvarints
// minimal (so that the head re-encodes to the same bytes), every read bounds-checked.
// Strings are views of the head's bytes. Once a read fails, ok is false for good.
type headParser struct {
	b  []byte
	ok bool
}

func (p *headParser) byte() byte {
	if !p.ok || len(p.b) < 1 {
		p.ok = false
		return 0
	}
	v := p.b[0]
	p.b = p.b[1:]
	return v
}

func (p *headParser) uint16() int64 {
	if !p.ok || len(p.b) < 2 {
		p.ok = false
		return 0
	}
	v := int64(binary.BigEndian.Uint16(p.b))
	p.b = p.b[2:]
	return v
}

func (p *headParser) uvarint() uint64 {
	if !p.ok {
		return 0
	}
	var v uint64
	for i := 0; i < len(p.b) && i < binary.MaxVarintLen64; i++ {
		c := p.b[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 || i > 0 && c == 0 {
				break // overflows 64 bits; not minimal
			}
			p.b = p.b[i+1:]
			return v | uint64(c)<<(7*i)
		}
		v |= uint64(c&0x7f) << (7 * i)
	}
	p.ok = false
	return 0
}

func (p *headParser) str() string {
	n := p.uvarint()
	if !p.ok || n > uint64(len(p.b)) {
		p.ok = false
		return ""
	}
	s := bytesView(p.b[:n])
	p.b = p.b[n:]
	return s
}

// length reads the flags byte and the content length it announces (-1: none); flags
// other than allowed fail.
func (p *headParser) length(allowed byte) (flags byte, cl int64) {
	flags = p.byte()
	if flags&^allowed != 0 {
		p.ok = false
	}
	if flags&flagLengthKnown == 0 {
		return flags, -1
	}
	v := p.uvarint()
	if v > 1<<62 {
		p.ok = false
	}
	return flags, int64(v)
}

// The envelope head's flags (envelope.go).
const (
	flagLengthKnown    = 1 << 0
	flagExpectContinue = 1 << 1
)

// fields appends the header's names and values to list.
func (p *headParser) fields(list []string) []string {
	n := p.uvarint()
	if !p.ok || n > uint64(len(p.b))/2 {
		p.ok = false
		return list
	}
	for range n {
		name, value := p.str(), p.str()
		if !p.ok {
			return list
		}
		list = append(list, name, value)
	}
	return list
}

// number appends v's decimal form to the model's scratch buffer and returns it.
func (m *headModel) number(v int64) string {
	start := len(m.buf)
	m.buf = strconv.AppendInt(m.buf, v, 10)
	return view(m.buf, start)
}

// splitHead returns the kind, the head's list and where the body starts, when msg starts
// with an envelope head that the list rebuilds byte for byte; ok is false otherwise
// (then the whole message is coded as body). The list and its strings are views of msg
// and of the model's scratch buffers: valid until the model's next splitHead or decode,
// and while msg is unchanged.
func (m *headModel) splitHead(msg []byte) (kind byte, list []string, fixed int, body []byte, ok bool) {
	n, k := binary.Uvarint(msg)
	// A length prefix of more bytes than needed would not be rebuilt.
	if k <= 0 || n < 2 || n > uint64(len(msg)-k) || k != uvarintLen(n) {
		return 0, nil, 0, nil, false
	}
	head, body := msg[k:k+int(n)], msg[k+int(n):]
	if head[0] != envelope.Version {
		return 0, nil, 0, nil, false
	}
	kind = head[1]
	p := headParser{b: head[2:], ok: true}
	list = m.scratch()
	switch kind {
	case envelope.KindRequest:
		list = append(list, p.str(), p.str(), p.str(), p.str()) // exchange id, upstream, method, target
		proto := p.byte()
		flags, cl := p.length(flagLengthKnown | flagExpectContinue)
		list = append(list, protoNames[proto], strconv.FormatBool(flags&flagExpectContinue != 0), m.number(cl))
		fixed = 7
		list = p.fields(list)
		ok = p.ok && list[2] != "" && list[3] != ""
	case envelope.KindResponse:
		status := p.uint16()
		reason := p.str()
		proto := p.byte()
		_, cl := p.length(flagLengthKnown)
		list = append(list, m.number(status), reason, protoNames[proto], m.number(cl))
		fixed = 4
		list = p.fields(list)
		ok = p.ok && status >= 100 && status <= 999
	case envelope.KindError:
		status := p.uint16()
		list = append(list, m.number(status), p.str(), p.str()) // status, cause, message
		fixed = 3
		ok = p.ok && status >= 400 && status <= 599
	}
	m.list = list
	if !ok || len(p.b) != 0 {
		return 0, nil, 0, nil, false
	}
	return kind, list, fixed, body, true
}

// scratch returns the model's list buffer emptied, with the strings of its last use
// dropped, and empties its scratch bytes.
func (m *headModel) scratch() []string {
	m.chosen = choice{}
	if cap(m.list) > maxScratchFields {
		m.list, m.flags = nil, nil // a hostile or huge head's list is not kept
	}
	if cap(m.buf) > maxScratchBytes {
		m.buf = nil
	}
	clear(m.list)
	m.buf = m.buf[:0]
	return m.list[:0]
}

// The largest scratch buffers a model keeps from one message to the next.
const (
	maxScratchFields = 1 << 10
	maxScratchBytes  = 64 << 10
)

// appendHead rebuilds the length-prefixed head from its list, with the layout
// envelope's Append writes; ok is false for a list that is not a valid head of kind
// (hostile payload).
func appendHead(dst []byte, kind byte, list []string) ([]byte, bool) {
	// uint in [0, limit].
	num := func(s string, limit int64) (int64, bool) {
		n, ok := canonicalInt(s)
		return n, ok && n >= 0 && n <= limit
	}
	var size int // of the head, after its length prefix
	switch kind {
	case envelope.KindRequest:
		if len(list) < 7 || (len(list)-7)%2 != 0 {
			return dst, false
		}
		proto, ok1 := num(list[4], 255)
		cl, ok2 := canonicalInt(list[6])
		expect, err := strconv.ParseBool(list[5])
		if !ok1 || !ok2 || err != nil || cl < -1 {
			return dst, false
		}
		flags := byte(0)
		if expect {
			flags |= flagExpectContinue
		}
		size = 2 + strSize(list[0]) + strSize(list[1]) + strSize(list[2]) + strSize(list[3]) + 1 + lengthSize(cl) + fieldsSize(list[7:])
		dst = append(binary.AppendUvarint(dst, uint64(size)), envelope.Version, envelope.KindRequest)
		for _, s := range list[:4] {
			dst = appendStr(dst, s)
		}
		dst = appendLength(append(dst, byte(proto)), flags, cl)
		return appendFields(dst, list[7:]), true
	case envelope.KindResponse:
		if len(list) < 4 || (len(list)-4)%2 != 0 {
			return dst, false
		}
		status, ok1 := num(list[0], 0xffff)
		proto, ok2 := num(list[2], 255)
		cl, ok3 := canonicalInt(list[3])
		if !ok1 || !ok2 || !ok3 || cl < -1 {
			return dst, false
		}
		size = 2 + 2 + strSize(list[1]) + 1 + lengthSize(cl) + fieldsSize(list[4:])
		dst = append(binary.AppendUvarint(dst, uint64(size)), envelope.Version, envelope.KindResponse)
		dst = appendStr(binary.BigEndian.AppendUint16(dst, uint16(status)), list[1])
		dst = appendLength(append(dst, byte(proto)), 0, cl)
		return appendFields(dst, list[4:]), true
	case envelope.KindError:
		if len(list) != 3 {
			return dst, false
		}
		status, ok := num(list[0], 0xffff)
		if !ok {
			return dst, false
		}
		size = 2 + 2 + strSize(list[1]) + strSize(list[2])
		dst = append(binary.AppendUvarint(dst, uint64(size)), envelope.Version, envelope.KindError)
		dst = binary.BigEndian.AppendUint16(dst, uint16(status))
		return appendStr(appendStr(dst, list[1]), list[2]), true
	}
	return dst, false
}

func strSize(s string) int { return uvarintLen(uint64(len(s))) + len(s) }

// lengthSize is the size of the flags byte and the content length cl (-1: none).
func lengthSize(cl int64) int {
	if cl < 0 {
		return 1
	}
	return 1 + uvarintLen(uint64(cl))
}

func fieldsSize(fields []string) int {
	n := uvarintLen(uint64(len(fields) / 2))
	for _, s := range fields {
		n += strSize(s)
	}
	return n
}

func appendLength(dst []byte, flags byte, cl int64) []byte {
	if cl < 0 {
		return append(dst, flags)
	}
	return binary.AppendUvarint(append(dst, flags|flagLengthKnown), uint64(cl))
}

func appendFields(dst []byte, fields []string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(fields)/2))
	for _, s := range fields {
		dst = appendStr(dst, s)
	}
	return dst
}
