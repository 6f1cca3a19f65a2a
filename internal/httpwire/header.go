package httpwire

import "strings"

// Field is one header field as it appeared on the wire: Name keeps its casing; Value has
// surrounding optional whitespace (SP, HTAB) trimmed and is otherwise byte-exact.
type Field struct{ Name, Value string }

// Header is an ordered list of fields. Duplicates are allowed and order is preserved,
// because a transparent gateway must forward them as received. Lookups are linear and
// case-insensitive: a SOAP request carries a dozen fields, where a scan beats a map.
type Header []Field

// Get returns the value of the first field named name (case-insensitive), or "".
func (h Header) Get(name string) string {
	for i := range h {
		if equalFold(h[i].Name, name) {
			return h[i].Value
		}
	}
	return ""
}

// Values returns the values of all fields named name (case-insensitive), in order, or nil.
func (h Header) Values(name string) []string {
	var vs []string
	for i := range h {
		if equalFold(h[i].Name, name) {
			vs = append(vs, h[i].Value)
		}
	}
	return vs
}

// Has reports whether a field named name (case-insensitive) is present.
func (h Header) Has(name string) bool {
	for i := range h {
		if equalFold(h[i].Name, name) {
			return true
		}
	}
	return false
}

// Del returns h without the fields named name (case-insensitive). It filters in place:
// the backing array of h is modified, so keep only the returned Header.
func (h Header) Del(name string) Header {
	out := h[:0]
	for _, f := range h {
		if !equalFold(f.Name, name) {
			out = append(out, f)
		}
	}
	clear(h[len(out):]) // drop references to the removed strings
	return out
}

// Clone returns a copy of h that shares no backing array with it (nil for nil).
func (h Header) Clone() Header {
	if h == nil {
		return nil
	}
	return append(make(Header, 0, len(h)), h...)
}

// HasToken reports whether the comma-separated list formed by all fields named name
// contains token, both compared case-insensitively. Use it for Connection, Expect and
// similar list-valued fields. List elements are trimmed of optional whitespace; empty
// elements are ignored (RFC 9110 §5.6.1).
func (h Header) HasToken(name, token string) bool {
	for i := range h {
		if equalFold(h[i].Name, name) && listHas(h[i].Value, token) {
			return true
		}
	}
	return false
}

// listHas reports whether the comma-separated list v has an element equal to token
// (case-insensitive). It does not allocate.
func listHas(v, token string) bool {
	for v != "" {
		var elem string
		if i := strings.IndexByte(v, ','); i >= 0 {
			elem, v = v[:i], v[i+1:]
		} else {
			elem, v = v, ""
		}
		if elem = trimOWS(elem); elem != "" && equalFold(elem, token) {
			return true
		}
	}
	return false
}

// IsHopByHop reports whether name is a hop-by-hop field, one that describes a single
// connection and must not be forwarded (RFC 9110 §7.6.1):
//
//   - Connection, and the fields RFC 9110 §7.6.1 says intermediaries remove: Proxy-Connection,
//     Keep-Alive, TE, Transfer-Encoding, Upgrade;
//   - Trailer: it announces trailer fields of a chunked body, and this package decodes
//     chunked bodies and discards their trailers, so the announcement would be false.
//
// Proxy-Authenticate and Proxy-Authorization are NOT hop-by-hop here. RFC 2616 §13.5.1
// listed them, but RFC 9110 (§7.6.1, §11.7) no longer does: they address whichever proxy
// demanded authentication, and soapgw never does. Being transparent, soapgw forwards them;
// the proxy layer may strip them as a policy decision.
//
// Any other field becomes hop-by-hop for one message when its name is listed in that
// message's Connection field; see [EndToEnd].
func IsHopByHop(name string) bool {
	switch len(name) {
	case 2:
		return equalFold(name, "TE")
	case 7:
		return equalFold(name, "Upgrade") || equalFold(name, "Trailer")
	case 10:
		return equalFold(name, "Connection") || equalFold(name, "Keep-Alive")
	case 16:
		return equalFold(name, "Proxy-Connection")
	case 17:
		return equalFold(name, "Transfer-Encoding")
	}
	return false
}

// EndToEnd returns the fields of h that a proxy forwards, in their original order: it
// drops hop-by-hop fields ([IsHopByHop]) and every field named in a Connection field.
// Content-Length and Host are kept even when Connection names them: framing is decided
// by the caller, and a request must not lose its Host because a client (or an attacker)
// listed it as a connection option. h is not modified; the result is newly allocated.
func EndToEnd(h Header) Header {
	return AppendEndToEnd(make(Header, 0, len(h)), h)
}

// AppendEndToEnd is [EndToEnd] appending to dst, so a caller can reuse a buffer.
func AppendEndToEnd(dst, h Header) Header {
	hasConn := false
	for i := range h {
		if equalFold(h[i].Name, "Connection") {
			hasConn = true
			break
		}
	}
	for _, f := range h {
		if IsHopByHop(f.Name) {
			continue
		}
		if hasConn && !equalFold(f.Name, "Content-Length") && !equalFold(f.Name, "Host") &&
			h.HasToken("Connection", f.Name) {
			continue
		}
		dst = append(dst, f)
	}
	return dst
}

// equalFold is strings.EqualFold restricted to ASCII, which is all a field name may
// contain; it is several times faster than the Unicode-aware version.
func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if 'A' <= ca && ca <= 'Z' {
			ca += 'a' - 'A'
		}
		if 'A' <= cb && cb <= 'Z' {
			cb += 'a' - 'A'
		}
		if ca != cb {
			return false
		}
	}
	return true
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

// trimOWS trims optional whitespace (SP, HTAB) at both ends.
func trimOWS[T ~string | ~[]byte](s T) T {
	for len(s) > 0 && isOWS(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isOWS(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

// tokenChars marks the bytes allowed in a token (RFC 9110 §5.6.2): methods, field names.
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken[T ~string | ~[]byte](s T) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChars[s[i]] {
			return false
		}
	}
	return true
}
