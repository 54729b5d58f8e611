package recipe

import (
	"fmt"
	"strings"
)

// Error is one problem in a recipe file, located by line and field.
type Error struct {
	// File is the recipe file.
	File string
	// Line is the 1-based line of the field, or 0 when unknown.
	Line int
	// Field is the field's path, such as "kernels.select[0].newest"; "" when unknown.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as "file:line: field: message" ("recipe" stands
// for the file of a recipe built in code; the line is left out when unknown).
func (e *Error) Error() string {
	var b strings.Builder
	if e.File == "" {
		b.WriteString("recipe")
	} else {
		b.WriteString(e.File)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// errorf makes an *Error for field, located at the field's line or, when the
// field is absent, at the line of its nearest present parent.
func (r *Recipe) errorf(field, format string, args ...any) *Error {
	return &Error{File: r.File, Line: r.lineOf(field), Field: field, Msg: fmt.Sprintf(format, args...)}
}

// lineOf returns the line of field or of its nearest present parent, or 0.
func (r *Recipe) lineOf(field string) int {
	for p := field; p != ""; p = parentPath(p) {
		if l, ok := r.lines[p]; ok {
			return l
		}
	}
	return 0
}

// parentPath strips the last element of a field path: "a.b[2]" gives "a.b",
// "a.b" gives "a", "a" gives "".
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}
