package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Load reads the file at path and parses it with [Parse], naming it path in
// errors. A file that cannot be read gives an error wrapping the os error.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes a configuration from data: it expands environment
// variables in scalar values, decodes strictly (unknown and duplicate keys
// and type mismatches are errors), fills in defaults and validates. name is
// used as the file name in errors.
//
// Errors are *Error values, or an errors.Join of them sorted by line. If
// the YAML does not decode, only the decoding errors are reported, since
// validating a half-decoded configuration mostly reports their echoes.
func Parse(name string, data []byte) (*Config, error) {
	return parse(name, data, os.LookupEnv)
}

func parse(name string, data []byte, lookup func(string) (string, bool)) (*Config, error) {
	root, perr := parseDocument(data)
	if perr != nil {
		perr.File = name
		return nil, perr
	}
	d := &decoder{lookup: lookup, lines: map[string]int{"": root.Line}}
	c := Default()
	d.value(root, "", reflect.ValueOf(c).Elem())
	if len(d.errs) > 0 {
		return nil, d.errs.locate(name, nil).sorted().join()
	}
	c.setDerivedDefaults()
	if err := c.Validate(); err != nil {
		return nil, flatten(err).locate(name, d.lines).sorted().join()
	}
	return c, nil
}

// locate sets File on every error, and Line from lines (when not nil) by
// the longest prefix of the error's path that has a line.
func (l errorList) locate(file string, lines map[string]int) errorList {
	for _, e := range l {
		e.File = file
		if lines == nil || e.Line != 0 {
			continue
		}
		for p := e.Path; ; p = parentPath(p) {
			if line, ok := lines[p]; ok {
				e.Line = line
				break
			}
			if p == "" {
				break
			}
		}
	}
	return l
}

// parentPath strips the last element of a field path:
// "a.b[1].c" -> "a.b[1]" -> "a.b" -> "a" -> "".
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// yamlLine extracts the line from yaml.v3 syntax errors, which are plain
// errors formatted as "yaml: line N: message".
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseDocument parses data into a node tree and returns its root, which
// is the only document in data and is not empty.
func parseDocument(data []byte) (*yaml.Node, *Error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Msg: "configuration is empty"}
		}
		return nil, syntaxError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		line := extra.Line
		if len(extra.Content) > 0 {
			line = extra.Content[0].Line
		}
		return nil, &Error{Line: line, Msg: "more than one YAML document; put the whole configuration in one"}
	case !errors.Is(err, io.EOF):
		return nil, syntaxError(err)
	}
	root := doc.Content[0]
	if isNull(root) {
		return nil, &Error{Msg: "configuration is empty"}
	}
	return root, nil
}

func syntaxError(err error) *Error {
	// yaml.v3 has no typed syntax error; its message is the only place the
	// line is given. The line is passed on as given, although for parser
	// (as opposed to scanner) errors yaml.v3 reports the line before the
	// construct it was parsing.
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{Line: line, Msg: "invalid YAML: " + m[2]}
	}
	return &Error{Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	byteSizeType = reflect.TypeFor[ByteSize]()
)

// decoder walks a yaml.Node tree against the Go types of this package,
// recording the line of every field path and collecting errors.
type decoder struct {
	lookup func(string) (string, bool)
	lines  map[string]int
	errs   errorList
	// merges counts mappings expanded by merge keys. Merges of merges
	// grow exponentially (like YAML's "billion laughs"), so they are
	// capped at maxMerges.
	merges int
}

const maxMerges = 10000

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{Line: n.Line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// value decodes n into v. A null node keeps v's current value, which is
// its default; a null section (e.g. "edge:" with nothing under it) is
// allocated so that its missing required fields get reported.
func (d *decoder) value(n *yaml.Node, path string, v reflect.Value) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch v.Type() {
	case durationType:
		d.duration(n, path, v)
		return
	case byteSizeType:
		d.byteSize(n, path, v)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if isNull(n) && v.Type().Elem().Kind() != reflect.Struct {
			return
		}
		if v.IsNil() {
			v.Set(newDefault(v.Type().Elem()))
		}
		if !isNull(n) {
			d.value(n, path, v.Elem())
		}
	case reflect.Struct:
		if !isNull(n) {
			d.mapping(n, path, v)
		}
	case reflect.Slice:
		if !isNull(n) {
			d.sequence(n, path, v)
		}
	case reflect.String:
		if s, _, ok := d.scalar(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Int:
		d.integer(n, path, v)
	case reflect.Bool:
		d.boolean(n, path, v)
	default:
		panic("config: no decoder for " + v.Type().String())
	}
}

// newDefault allocates a *t holding t's defaults.
func newDefault(t reflect.Type) reflect.Value {
	p := reflect.New(t)
	if def, ok := p.Interface().(defaulter); ok {
		def.setDefaults()
	}
	return p
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what n is, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// scalar returns the env-expanded text of a scalar node and its tag, which
// is resolved again when expansion changed a plain scalar, so that
// "${N:-4}" is an integer. ok is false when an error was recorded, or when
// n is null (the caller keeps the default).
func (d *decoder) scalar(n *yaml.Node, path, want string) (text, tag string, ok bool) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "expected %s, got %s", want, describe(n))
		return "", "", false
	}
	if isNull(n) {
		return "", "", false
	}
	text, err := expandEnv(n.Value, d.lookup)
	if err != nil {
		d.errorf(n, path, "%v", err)
		return "", "", false
	}
	tag = n.ShortTag()
	const notPlain = yaml.TaggedStyle | yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle
	if text != n.Value && n.Style&notPlain == 0 {
		tag = (&yaml.Node{Kind: yaml.ScalarNode, Value: text}).ShortTag()
	}
	return text, tag, true
}

func (d *decoder) integer(n *yaml.Node, path string, v reflect.Value) {
	text, tag, ok := d.scalar(n, path, "an integer")
	if !ok || tag == "!!null" {
		return
	}
	var i int
	if tag != "!!int" || (&yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: text}).Decode(&i) != nil {
		d.errorf(n, path, "expected an integer, got %q", text)
		return
	}
	v.SetInt(int64(i))
}

func (d *decoder) boolean(n *yaml.Node, path string, v reflect.Value) {
	text, tag, ok := d.scalar(n, path, "true or false")
	if !ok || tag == "!!null" {
		return
	}
	var b bool
	if tag != "!!bool" || (&yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: text}).Decode(&b) != nil {
		d.errorf(n, path, "expected true or false, got %q", text)
		return
	}
	v.SetBool(b)
}

func (d *decoder) duration(n *yaml.Node, path string, v reflect.Value) {
	text, tag, ok := d.scalar(n, path, `a duration such as "5s"`)
	if !ok || tag == "!!null" {
		return
	}
	dur, err := time.ParseDuration(text)
	switch {
	case err != nil && tag == "!!int":
		d.errorf(n, path, "duration %q has no unit: write e.g. \"%ss\" or \"%sms\"", text, text, text)
	case err != nil:
		d.errorf(n, path, "invalid duration %q: want e.g. \"500ms\", \"5s\" or \"1m30s\"", text)
	case dur < 0:
		d.errorf(n, path, "must not be negative, got %s", text)
	default:
		v.SetInt(int64(dur))
	}
}

func (d *decoder) byteSize(n *yaml.Node, path string, v reflect.Value) {
	text, tag, ok := d.scalar(n, path, `a size such as "64KiB"`)
	if !ok || tag == "!!null" {
		return
	}
	size, err := ParseByteSize(text)
	switch {
	case errors.Is(err, errNegativeSize):
		d.errorf(n, path, "must not be negative, got %s", text)
	case err != nil:
		d.errorf(n, path, "%v", err)
	default:
		v.SetInt(int64(size))
	}
}

func (d *decoder) sequence(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list, got %s", describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), 0, len(n.Content))
	for i, item := range n.Content {
		ip := path + "[" + strconv.Itoa(i) + "]"
		d.lines[ip] = item.Line
		e := newDefault(v.Type().Elem()).Elem()
		d.value(item, ip, e)
		s = reflect.Append(s, e)
	}
	v.Set(s)
}

// pair is one key: value of a mapping.
type pair struct{ key, value *yaml.Node }

func (d *decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	fields, names := fieldsOf(v.Type())
	for _, p := range d.pairs(n, path) {
		fp := joinPath(path, p.key.Value)
		i, ok := fields[p.key.Value]
		if !ok {
			d.errorf(p.key, fp, "unknown field%s", suggest(p.key.Value, names))
			continue
		}
		d.lines[fp] = p.key.Line
		d.value(p.value, fp, v.Field(i))
	}
}

// pairs returns the entries of mapping n, reporting duplicate keys, with
// YAML merge keys ("<<: *defaults") resolved: an explicit key overrides a
// merged one, and an earlier merged mapping overrides a later one.
func (d *decoder) pairs(n *yaml.Node, path string) []pair {
	var out, merged []pair
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "expected a field name, got %s", describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merged = append(merged, d.mergePairs(val, path)...)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k, joinPath(path, k.Value), "duplicate key (first set on line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, pair{k, val})
	}
	for _, p := range merged {
		if _, ok := seen[p.key.Value]; !ok {
			seen[p.key.Value] = p.key.Line
			out = append(out, p)
		}
	}
	return out
}

func (d *decoder) mergePairs(n *yaml.Node, path string) []pair {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if d.merges++; d.merges > maxMerges {
		if d.merges == maxMerges+1 {
			d.errorf(n, path, "more than %d merges (<<): the merge keys expand too far", maxMerges)
		}
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		return d.pairs(n, path)
	case yaml.SequenceNode:
		var out []pair
		for _, item := range n.Content {
			for item.Kind == yaml.AliasNode {
				item = item.Alias
			}
			if item.Kind != yaml.MappingNode {
				d.errorf(item, path, "merge (<<) expects a mapping or a list of mappings, got %s", describe(item))
				continue
			}
			out = append(out, d.pairs(item, path)...)
		}
		return out
	}
	d.errorf(n, path, "merge (<<) expects a mapping or a list of mappings, got %s", describe(n))
	return nil
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fieldsOf maps the yaml names of struct type t to field indexes, and
// lists the names in declaration order.
func fieldsOf(t reflect.Type) (map[string]int, []string) {
	fields := make(map[string]int, t.NumField())
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = i
		names = append(names, name)
	}
	return fields, names
}

// suggest returns ` (did you mean "x"?)` for the known name closest to an
// unknown key, or the list of known names when none is close.
func suggest(key string, names []string) string {
	best, bestDist := "", -1
	for _, name := range names {
		if dist := editDistance(strings.ToLower(key), name); bestDist < 0 || dist < bestDist {
			best, bestDist = name, dist
		}
	}
	if bestDist >= 0 && (bestDist <= 1 || bestDist <= 3 && bestDist*3 <= len(key)) {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return " (known fields: " + strings.Join(names, ", ") + ")"
}

// editDistance is the Levenshtein distance between a and b in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
