package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Error is one problem in a configuration, located by file, line and field
// path. [Load] and [Parse] return a single *Error, or the errors.Join of
// several, sorted by line, so that errors.As finds the first one.
// [Config.Validate] returns errors with Path and Msg only.
type Error struct {
	// File is the name given to Parse or the path given to Load; "" for
	// errors from Validate.
	File string
	// Line is the 1-based line of the offending node, or of the enclosing
	// mapping when the field is missing; 0 when unknown.
	Line int
	// Path is the field path, e.g. "edge.peers[0].address"; "" for the
	// document as a whole.
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error formats as "file:line: path: msg", leaving out the parts that are
// empty.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// errorList collects field errors.
type errorList []*Error

func (l *errorList) add(path, format string, args ...any) {
	*l = append(*l, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// join returns nil, the only error, or the errors.Join of all of them in
// the list's order.
func (l errorList) join() error {
	switch len(l) {
	case 0:
		return nil
	case 1:
		return l[0]
	}
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// sorted orders the list by line, keeping the order of errors on the same
// line, and drops exact duplicates (a YAML alias decoded twice reports the
// same problem twice).
func (l errorList) sorted() errorList {
	sort.SliceStable(l, func(i, j int) bool { return l[i].Line < l[j].Line })
	out := l[:0]
	seen := make(map[Error]bool, len(l))
	for _, e := range l {
		if seen[*e] {
			continue
		}
		seen[*e] = true
		out = append(out, e)
	}
	return out
}

// flatten returns the *Error values inside err, which is nil, an *Error or
// an errors.Join of them.
func flatten(err error) errorList {
	if err == nil {
		return nil
	}
	var e *Error
	if multi, ok := err.(interface{ Unwrap() []error }); ok {
		var out errorList
		for _, inner := range multi.Unwrap() {
			out = append(out, flatten(inner)...)
		}
		return out
	}
	if errors.As(err, &e) {
		return errorList{e}
	}
	return errorList{{Msg: err.Error()}}
}
