package xmltok

import "bytes"

// Scanner states. The encoder segments a message into markup tokens and
// values; the state says what the bytes at the current position are.
// The decoder tracks the same state from the tokens it decodes (a markup
// token records the state it ends in), so states are part of the model,
// never of the wire: the payload needs no parser to be decoded.
const (
	stText       = iota // between constructs: whitespace is markup
	stTag               // inside a tag, outside quotes
	stAfterQ            // at the closing quote of an attribute value
	stComment           // inside <!-- -->
	stPI                // inside <? ?> (XML declaration included)
	stDecl              // inside <! > (DOCTYPE)
	stAfterCDATA        // at the ]]> closing a CDATA section
	stProse             // inside a long text value: a non-digit run
	stValDQ             // value states from here on
	stValSQ
	stValText
	stValCDATA
	stValDigits // a digit run inside a long text value
	nStates
)

const (
	// maxMark caps a markup token; longer markup (huge comments, binary
	// junk) is cut, preferably before a '<' so no tag name is split.
	maxMark = 1024
	// maxWord caps a non-digit run of a long text value.
	maxWord = 255
	// maxDigits caps a digit run so it fits an int64.
	maxDigits = 18
)

func isValue(st uint8) bool { return st >= stValDQ }

func afterValue(st uint8) uint8 {
	switch st {
	case stValDQ, stValSQ:
		return stAfterQ
	case stValCDATA:
		return stAfterCDATA
	case stValDigits:
		return stProse
	}
	return stText
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }
func isDigit(c byte) bool { return c-'0' < 10 }

func hasPrefix(b []byte, s string) bool { return len(b) >= len(s) && string(b[:len(s)]) == s }

// scanMarkup scans a markup token starting at i in state st and returns
// where it ends and the state there. Any byte sequence is accepted: what
// is not XML simply ends up in markup or values, which are both coded
// byte-exactly.
func scanMarkup(b []byte, i int, st uint8) (int, uint8) {
	if st == stProse {
		return scanWord(b, i)
	}
	start := i
	limit := start + maxMark
	lastLT := -1
	for i < len(b) {
		if i >= limit {
			if lastLT > start {
				return lastLT, stText
			}
			return i, st
		}
		switch st {
		case stText:
			c := b[i]
			if c == '<' {
				r := b[i:]
				switch {
				case hasPrefix(r, "<!--"):
					lastLT, st, i = i, stComment, i+4
				case hasPrefix(r, "<![CDATA["):
					return i + 9, stValCDATA
				case hasPrefix(r, "<?"):
					lastLT, st, i = i, stPI, i+2
				case hasPrefix(r, "<!"):
					lastLT, st, i = i, stDecl, i+2
				default:
					lastLT, st, i = i, stTag, i+1
				}
				continue
			}
			if isSpace(c) {
				i++
				continue
			}
			return i, stValText
		case stTag:
			for i < len(b) && i < limit {
				c := b[i]
				i++
				switch c {
				case '"':
					return i, stValDQ
				case '\'':
					return i, stValSQ
				case '>':
					st = stText
				}
				if st == stText {
					break
				}
			}
		case stAfterQ:
			i++
			st = stTag
		case stAfterCDATA:
			i = min(i+3, len(b))
			st = stText
		case stComment, stPI, stDecl:
			var term string
			switch st {
			case stComment:
				term = "-->"
			case stPI:
				term = "?>"
			default:
				term = ">"
			}
			w := b[i:min(len(b), limit+len(term)-1)]
			if j := bytes.Index(w, []byte(term)); j >= 0 {
				i += j + len(term)
				st = stText
			} else {
				i += len(w)
			}
		default:
			// A value state cannot reach here; treat as text.
			st = stText
		}
	}
	return len(b), st
}

// scanWord scans a non-digit run of a long text value.
func scanWord(b []byte, i int) (int, uint8) {
	j := i
	for j < len(b) && j-i < maxWord && !isDigit(b[j]) {
		j++
	}
	if j < len(b) && isDigit(b[j]) {
		return j, stValDigits
	}
	return j, stProse
}

// scanValue returns the end of the value starting at i in value state st.
func scanValue(b []byte, i int, st uint8) int {
	r := b[i:]
	j := -1
	switch st {
	case stValDQ:
		j = bytes.IndexByte(r, '"')
	case stValSQ:
		j = bytes.IndexByte(r, '\'')
	case stValText:
		j = bytes.IndexByte(r, '<')
	case stValCDATA:
		j = bytes.Index(r, []byte("]]>"))
	case stValDigits:
		j = 0
		for j < len(r) && j < maxDigits && isDigit(r[j]) {
			j++
		}
	}
	if j < 0 {
		return len(b)
	}
	return i + j
}

// validEnd reports whether a cached token ending at q in state end is a
// faithful segmentation of b: a text value must start with a byte the
// scanner would not have kept in markup. Taking a cached token where the
// scanner would have cut differently would still be lossless, but it
// would teach the model junk.
func validEnd(b []byte, q int, end uint8) bool {
	if q >= len(b) {
		return true
	}
	switch end {
	case stValText:
		c := b[q]
		return c != '<' && !isSpace(c)
	case stValDigits:
		return isDigit(b[q])
	case stProse:
		return !isDigit(b[q])
	}
	return true
}

// Sensitivity effects of a markup token on the element context.
const (
	sensKeep  = 0
	sensSet   = 1
	sensClear = 2
)

// sensitiveNames are the local names whose content and attribute values
// are secrets (WS-Security passwords, nonces, tokens; XML Encryption
// cipher values). They are compared ASCII case-insensitively so that a
// "password" attribute is caught too: a false positive only costs
// compression.
var sensitiveNames = []string{"Password", "Nonce", "BinarySecurityToken", "CipherValue"}

func isSensitiveName(name []byte) bool {
	if i := bytes.LastIndexByte(name, ':'); i >= 0 {
		name = name[i+1:]
	}
	for _, s := range sensitiveNames {
		if len(s) == len(name) && bytes.EqualFold(name, []byte(s)) {
			return true
		}
	}
	return false
}

func isNameByte(c byte) bool {
	return !isSpace(c) && c != '>' && c != '/' && c != '=' && c != '"' && c != '\'' && c != '<'
}

func readName(b []byte, i int) []byte {
	j := i
	for j < len(b) && isNameByte(b[j]) {
		j++
	}
	return b[i:j]
}

// analyze computes, once per dictionary entry and identically on both
// ends, how a markup token changes the "inside a secret element" flag
// and whether the attribute value it opens is a secret. It walks the
// token with the scanner's states so that tags inside comments and PIs
// are ignored.
func analyze(tok []byte, st, end uint8) (sens uint8, attrSens bool) {
	if st == stProse {
		return sensKeep, false
	}
	pending := false
	for i := 0; i < len(tok); {
		switch st {
		case stAfterQ:
			i++
			st = stTag
		case stAfterCDATA:
			i += 3
			st = stText
		case stComment, stPI, stDecl:
			term := ">"
			if st == stComment {
				term = "-->"
			} else if st == stPI {
				term = "?>"
			}
			j := bytes.Index(tok[i:], []byte(term))
			if j < 0 {
				i = len(tok)
				break
			}
			i += j + len(term)
			st = stText
		case stTag:
			c := tok[i]
			if c == '>' {
				if pending && i > 0 && tok[i-1] == '/' {
					sens = sensClear
				}
				pending = false
				st = stText
			}
			i++
		default: // stText
			if tok[i] != '<' {
				i++
				continue
			}
			r := tok[i:]
			switch {
			case hasPrefix(r, "<!--"):
				st, i = stComment, i+4
			case hasPrefix(r, "<?"):
				st, i = stPI, i+2
			case hasPrefix(r, "<!"):
				st, i = stDecl, i+2
			case hasPrefix(r, "</"):
				if isSensitiveName(readName(tok, i+2)) {
					sens = sensClear
				}
				pending = false
				st, i = stTag, i+2
			default:
				if isSensitiveName(readName(tok, i+1)) {
					sens = sensSet
					pending = true
				} else {
					pending = false
				}
				st, i = stTag, i+1
			}
		}
	}
	if (end == stValDQ || end == stValSQ) && len(tok) > 0 {
		j := len(tok) - 2 // skip the opening quote
		for j >= 0 && isSpace(tok[j]) {
			j--
		}
		if j >= 0 && tok[j] == '=' {
			j--
			for j >= 0 && isSpace(tok[j]) {
				j--
			}
			k := j
			for k >= 0 && isNameByte(tok[k]) {
				k--
			}
			attrSens = isSensitiveName(tok[k+1 : j+1])
		}
	}
	return sens, attrSens
}
