package recipe

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Parse strictly decodes recipe YAML read from file (the name is used in
// errors and to resolve relative paths). Unknown fields, wrong types, syntax
// errors and extra documents are errors naming the file, line and field.
// Parse does not validate values; Load does both.
func Parse(file string, data []byte) (*Recipe, error) {
	var doc yaml.Node
	nodeErr := yaml.Unmarshal(data, &doc)
	if nodeErr != nil {
		return nil, syntaxError(file, data, nodeErr)
	}
	idx := newIndex(&doc)

	r := &Recipe{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(r); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Msg: "the file is empty; a recipe needs at least name, driver, source, flavor, modules and kernels"}
		}
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, syntaxError(file, data, err)
		}
		errs := make([]error, 0, len(te.Errors))
		for _, msg := range te.Errors {
			errs = append(errs, idx.typeError(file, msg))
		}
		return nil, errors.Join(errs...)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: file, Line: extra.Line, Msg: "a recipe file holds one YAML document; found another after \"---\""}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(file, data, err)
	}
	r.File = file
	r.lines = idx.lines
	if r.Signing != nil && r.Signing.Hash == "" {
		r.Signing.Hash = DefaultSignHash
	}
	return r, nil
}

// nodeRef is one node of the YAML tree with the field path it decodes into.
type nodeRef struct {
	line  int
	path  string
	tag   string
	value string
	key   bool
}

// index locates fields in the YAML tree by path and by line.
type index struct {
	lines map[string]int
	refs  []nodeRef
}

func newIndex(doc *yaml.Node) *index {
	x := &index{lines: map[string]int{}}
	x.walk(doc, "")
	return x
}

func (x *index) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			x.walk(c, path)
		}
	case yaml.MappingNode:
		x.refs = append(x.refs, nodeRef{line: n.Line, path: path, tag: n.ShortTag()})
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if _, ok := x.lines[p]; !ok {
				x.lines[p] = k.Line
			}
			x.refs = append(x.refs, nodeRef{line: k.Line, path: p, tag: k.ShortTag(), value: k.Value, key: true})
			x.walk(v, p)
		}
	case yaml.SequenceNode:
		x.refs = append(x.refs, nodeRef{line: n.Line, path: path, tag: n.ShortTag()})
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			x.lines[p] = c.Line
			x.walk(c, p)
		}
	default: // scalars and aliases
		x.refs = append(x.refs, nodeRef{line: n.Line, path: path, tag: n.ShortTag(), value: n.Value})
	}
}

// find returns the first node at line that satisfies ok.
func (x *index) find(line int, ok func(nodeRef) bool) (nodeRef, bool) {
	for _, r := range x.refs {
		if r.line == line && ok(r) {
			return r, true
		}
	}
	return nodeRef{}, false
}

var (
	// (?s): the values yaml.v3 quotes may hold newlines.
	unknownFieldRE = regexp.MustCompile(`(?s)^line (\d+): field (.+) not found in type (\S+)$`)
	cannotRE       = regexp.MustCompile("(?s)^line (\\d+): cannot unmarshal (!!\\w+)(?: `(.*)`)? into (\\S+)$")
	dupKeyRE       = regexp.MustCompile(`(?s)^line (\d+): mapping key "(.*)" already defined at line (\d+)$`)
	lineRE         = regexp.MustCompile(`(?s)^line (\d+): (.*)$`)
)

// typeError rewrites one of yaml.v3's unmarshal errors ("line 3: field foo
// not found in type recipe.Matrix") into an *Error naming the field's path.
func (x *index) typeError(file, msg string) *Error {
	if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		e := &Error{File: file, Line: line, Field: m[2]}
		if ref, ok := x.find(line, func(r nodeRef) bool { return r.key && r.value == m[2] }); ok {
			e.Field = ref.path
		}
		parent := parentPath(e.Field)
		where := "a recipe"
		if parent != "" {
			where = parent
		}
		e.Msg = fmt.Sprintf("unknown field %q; %s takes: %s", m[2], where, strings.Join(knownFields[m[3]], ", "))
		return e
	}
	if m := cannotRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		tag, value, goType := m[2], m[3], m[4]
		e := &Error{File: file, Line: line}
		match := func(r nodeRef) bool { return !r.key && r.tag == tag && valueMatches(r.value, value) }
		ref, ok := x.find(line, match)
		if !ok {
			ref, ok = x.find(line, func(r nodeRef) bool { return !r.key && r.tag == tag })
		}
		if ok {
			e.Field, value = ref.path, ref.value
		}
		if e.Field == "" {
			e.Msg = fmt.Sprintf("a recipe is a mapping of fields (%s), got %s", strings.Join(knownFields[goTypeName(reflect.TypeOf(Recipe{}))], ", "), describeNode(tag, value))
			return e
		}
		e.Msg = fmt.Sprintf("got %s, want %s", describeNode(tag, value), describeGoType(goType))
		return e
	}
	if m := dupKeyRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		e := &Error{File: file, Line: line, Field: m[2], Msg: fmt.Sprintf("defined twice (first at line %s)", m[3])}
		if ref, ok := x.find(line, func(r nodeRef) bool { return r.key && r.value == m[2] }); ok {
			e.Field = ref.path
		}
		return e
	}
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		e := &Error{File: file, Line: line, Msg: m[2]}
		if ref, ok := x.find(line, func(nodeRef) bool { return true }); ok {
			e.Field = ref.path
		}
		return e
	}
	return &Error{File: file, Msg: msg}
}

// valueMatches reports whether a node's value is the one yaml.v3 quoted in
// an error, which shortens long values to their start and "...".
func valueMatches(nodeValue, quoted string) bool {
	if quoted == "" || nodeValue == quoted {
		return true
	}
	if p, ok := strings.CutSuffix(quoted, "..."); ok {
		return strings.HasPrefix(nodeValue, p)
	}
	return false
}

func describeNode(tag, value string) string {
	switch tag {
	case "!!str":
		return fmt.Sprintf("the string %q", value)
	case "!!int":
		return "the integer " + value
	case "!!float":
		return "the number " + value
	case "!!bool":
		return "the boolean " + value
	case "!!null":
		return "null"
	case "!!seq":
		return "a list"
	case "!!map":
		return "a mapping"
	}
	return tag + " " + value
}

// describeGoType turns the Go type yaml.v3 names ("[]string", "recipe.Matrix")
// into words a recipe author knows.
func describeGoType(t string) string {
	t = strings.TrimPrefix(t, "*")
	if elem, ok := strings.CutPrefix(t, "[]"); ok {
		switch elem {
		case "string":
			return "a list of strings"
		}
		if f, ok := knownFields[strings.TrimPrefix(elem, "*")]; ok {
			return "a list of mappings with " + strings.Join(f, ", ")
		}
		return "a list"
	}
	switch t {
	case "string":
		return "a string"
	case "int":
		return "an integer"
	case "bool":
		return "a boolean"
	}
	if f, ok := knownFields[t]; ok {
		return "a mapping with " + strings.Join(f, ", ")
	}
	return t
}

// knownFields maps each decoded struct type, by the name yaml.v3 gives it in
// errors ("recipe.Matrix"), to the YAML fields it accepts.
var knownFields = fieldsByType(reflect.TypeOf(Recipe{}), map[string][]string{})

func goTypeName(t reflect.Type) string { return t.String() }

func fieldsByType(t reflect.Type, m map[string][]string) map[string][]string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return m
	}
	if _, done := m[goTypeName(t)]; done {
		return m
	}
	var names []string
	m[goTypeName(t)] = nil
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		names = append(names, name)
		fieldsByType(f.Type, m)
	}
	m[goTypeName(t)] = names
	return m
}

var syntaxLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// keyLineRE matches a line that starts a mapping entry, possibly as a list item.
var keyLineRE = regexp.MustCompile(`^([ \t]*(?:-[ \t]+)*)([A-Za-z0-9_.-]+)[ \t]*:`)

// syntaxError turns a YAML syntax error into an *Error with the line and,
// read from the text, the field it is in.
func syntaxError(file string, data []byte, err error) *Error {
	msg := err.Error()
	// yaml.v3 leaves the line out when the problem is on the first line.
	line := 1
	if m := syntaxLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	e := &Error{File: file, Line: line, Msg: "YAML syntax error: " + msg}
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		return e
	}
	text := lines[line-1]
	if lead := text[:len(text)-len(strings.TrimLeft(text, " \t"))]; strings.Contains(lead, "\t") {
		e.Msg += " (YAML indents with spaces; this line is indented with a tab)"
	}
	e.Field = fieldAtLine(lines, line-1)
	return e
}

// fieldAtLine guesses the dotted path of the mapping key on lines[i] from the
// keys on the less indented lines above it (list indexes are not counted).
func fieldAtLine(lines []string, i int) string {
	m := keyLineRE.FindStringSubmatch(lines[i])
	if m == nil {
		return ""
	}
	path := []string{m[2]}
	col := len(m[1])
	for j := i - 1; j >= 0 && col > 0; j-- {
		pm := keyLineRE.FindStringSubmatch(lines[j])
		if pm == nil || len(pm[1]) >= col {
			continue
		}
		path = append([]string{pm[2]}, path...)
		col = len(pm[1])
	}
	return strings.Join(path, ".")
}
