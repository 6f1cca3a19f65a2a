package config

import (
	"fmt"
	"strings"
)

// expandEnv replaces ${NAME} and ${NAME:-default} in s with values from
// lookup, and $$ with $. As in the shell, the default is used when NAME is
// unset or empty; the default is literal text and may not contain ${. A $ followed by
// anything else is kept as is, so "pa$word" needs no escaping.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated ${ in %q (write $$ for a literal dollar)", s)
			}
			expr := s[i+2 : i+2+end]
			name, def, hasDef := strings.Cut(expr, ":-")
			if !validEnvName(name) {
				return "", fmt.Errorf("invalid environment variable name %q in ${%s}", name, expr)
			}
			if strings.Contains(def, "${") {
				return "", fmt.Errorf("nested ${ in the default of ${%s:-...} is not supported", name)
			}
			v, ok := lookup(name)
			switch {
			case v != "":
				b.WriteString(v)
			case hasDef:
				b.WriteString(def)
			case !ok:
				return "", fmt.Errorf("environment variable %s is not set (use ${%s:-default} to give a default)", name, name)
			}
			i += 2 + end
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// validEnvName reports whether name is a portable environment variable
// name: a letter or underscore, then letters, digits or underscores.
func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
