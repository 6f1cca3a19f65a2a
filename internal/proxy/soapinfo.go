package proxy

import (
	"bytes"
	"strings"
	"sync"

	"github.com/soapgw/soapgw/internal/httpwire"
)

// operationOf names the SOAP operation of a request for metrics: the last segment of
// its SOAP action (SOAPAction), or else the first element inside the envelope's Body.
// body may be a prefix of the message. "" when unknown.
func operationOf(h httpwire.Header, body []byte) string {
	if a := SOAPAction(h); a != "" {
		return lastSegment(a)
	}
	return firstBodyElement(body)
}

// SOAPAction is a request's SOAP action, unquoted: the SOAPAction field (SOAP 1.1) or
// the action parameter of the Content-Type (SOAP 1.2); "" when it has none.
func SOAPAction(h httpwire.Header) string {
	if a := strings.Trim(h.Get("SOAPAction"), `" `); a != "" {
		return a
	}
	ct := h.Get("Content-Type")
	if i := strings.Index(strings.ToLower(ct), "action="); i >= 0 {
		a, _, _ := strings.Cut(ct[i+len("action="):], ";")
		return strings.Trim(a, `" `)
	}
	return ""
}

// lastSegment reduces an action URI to its operation: "urn:Diary#addEntry" → addEntry,
// "http://tempuri.org/IService/GetOrders" → GetOrders.
func lastSegment(a string) string {
	if i := strings.LastIndexAny(a, "/#:"); i >= 0 && i < len(a)-1 {
		return a[i+1:]
	}
	return a
}

// firstBodyElement finds the local name of the first element inside soap:Body with a
// byte scan (no XML parse on the hot path; metrics only need a good guess).
func firstBodyElement(b []byte) string {
	i := bytes.Index(b, []byte(":Body"))
	if i < 0 {
		i = bytes.Index(b, []byte("<Body"))
	}
	if i < 0 {
		return ""
	}
	b = b[i:]
	gt := bytes.IndexByte(b, '>')
	if gt < 0 {
		return ""
	}
	b = b[gt+1:]
	for {
		lt := bytes.IndexByte(b, '<')
		if lt < 0 || lt+1 >= len(b) {
			return ""
		}
		b = b[lt+1:]
		if b[0] == '!' || b[0] == '?' || b[0] == '/' {
			continue // comment, PI, or an empty Body's end tag
		}
		end := bytes.IndexAny(b, " \t\r\n/>")
		if end < 0 {
			return ""
		}
		name := b[:end]
		if c := bytes.LastIndexByte(name, ':'); c >= 0 {
			name = name[c+1:]
		}
		return opNames.intern(name)
	}
}

// opNames holds the operation names seen in bodies, so that naming the operation of a
// request costs no allocation once its name is known. Bounded like the operation label
// (names come from clients); names past the bound are made anew each time.
var opNames = internTable{max: 4 * maxOperations}

type internTable struct {
	mu  sync.RWMutex
	max int
	m   map[string]string
}

// intern returns b as a string, the same one for the same bytes while the table has room.
func (t *internTable) intern(b []byte) string {
	t.mu.RLock()
	s, ok := t.m[string(b)] // no allocation for the lookup
	t.mu.RUnlock()
	if ok {
		return s
	}
	s = string(b)
	t.mu.Lock()
	if len(t.m) < t.max {
		if t.m == nil {
			t.m = make(map[string]string)
		}
		t.m[s] = s
	}
	t.mu.Unlock()
	return s
}

// faultCodeOf extracts the fault code of a SOAP Fault body (prefix dropped, subcodes after
// a dot dropped: "soap:Client.Rejected" → Client), or "" if body has no fault code.
func faultCodeOf(body []byte) string {
	var v []byte
	if i := bytes.Index(body, []byte("<faultcode")); i >= 0 { // SOAP 1.1
		v = textAfterTag(body[i:])
	} else if i := bytes.Index(body, []byte(":Code")); i >= 0 { // SOAP 1.2: Code/Value
		if j := bytes.Index(body[i:], []byte(":Value")); j >= 0 {
			v = textAfterTag(body[i+j:])
		}
	}
	v = bytes.TrimSpace(v)
	if c := bytes.LastIndexByte(v, ':'); c >= 0 {
		v = v[c+1:]
	}
	if d := bytes.IndexByte(v, '.'); d >= 0 {
		v = v[:d]
	}
	return string(v)
}

func textAfterTag(b []byte) []byte {
	gt := bytes.IndexByte(b, '>')
	if gt < 0 {
		return nil
	}
	b = b[gt+1:]
	if lt := bytes.IndexByte(b, '<'); lt >= 0 {
		return b[:lt]
	}
	return nil
}

// knownFaultCodes are the fault codes of SOAP 1.1 and 1.2; anything else is "other", so
// a server cannot blow up the number of metric series.
var knownFaultCodes = map[string]bool{
	"Server": true, "Client": true, "Receiver": true, "Sender": true,
	"VersionMismatch": true, "MustUnderstand": true, "DataEncodingUnknown": true,
}

func faultLabel(code string) string {
	if knownFaultCodes[code] {
		return code
	}
	return "other"
}

// labelSet bounds a label's values: the first max distinct valid values are kept, later
// ones fold into "other". Operation names come from clients; without a bound a client
// could create a metric series per request.
type labelSet struct {
	mu   sync.RWMutex
	max  int
	seen map[string]struct{}
}

func newLabelSet(max int) *labelSet { return &labelSet{max: max, seen: map[string]struct{}{}} }

func (l *labelSet) label(v string) string {
	if v == "" {
		return "unknown"
	}
	if len(v) > 64 || !validLabel(v) {
		return "other"
	}
	l.mu.RLock()
	_, ok := l.seen[v]
	l.mu.RUnlock()
	if ok {
		return v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[v]; ok {
		return v
	}
	if len(l.seen) >= l.max {
		return "other"
	}
	l.seen[v] = struct{}{}
	return v
}

func validLabel(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// faultPeekLen is how much of a 5xx body to look at for a fault code: up to 4 KiB of a body
// of known length (waiting for it if needed), or what is already buffered otherwise.
func faultPeekLen(contentLength int64, buffered int) int {
	if contentLength > 0 {
		return int(min(contentLength, 4096))
	}
	return buffered
}

// requestHeadLen is the size of the request head as the client sent it (request line,
// fields, blank line), up to whitespace the parser normalised: the raw bytes metrics count.
func requestHeadLen(r *httpwire.Request) int {
	return len(r.Method) + 1 + len(r.Target) + len(" HTTP/1.x\r\n") + fieldsLen(r.Header) + 2
}

// responseHeadLen is the same for a response.
func responseHeadLen(r *httpwire.Response) int {
	return len("HTTP/1.x 200 ") + len(r.Reason) + 2 + fieldsLen(r.Header) + 2
}

func fieldsLen(h httpwire.Header) int {
	n := 0
	for _, f := range h {
		n += len(f.Name) + 2 + len(f.Value) + 2
	}
	return n
}
