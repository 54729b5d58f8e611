// Package termtext makes text safe to print on a terminal. Names and
// messages kpreload prints may come from outside (a root's boot index, a
// registry's set.json, a boot report, a recipe): a control character in
// them could move the cursor, clear the screen, set the window title
// (ESC ] 0 ; ... BEL) or forge a line of output (CR LF). Every printer of
// text runs what it prints through this package: control characters (C0
// and C1, DEL), other characters that are not printable (format characters
// such as the bidirectional overrides, line and paragraph separators) and
// bytes that are not UTF-8 are shown escaped as Go's strconv.Quote shows
// them ("\x1b", "\r", "\u0085", "\u202e", "\xff"); everything else,
// non-ASCII letters included, is printed as it is. JSON output needs none of
// this: encoding/json escapes control characters itself.
package termtext

import (
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Name returns s with every character that is not printable escaped,
// newline and tab included: for one value (a name, a path) printed inside a
// line, which then stays one field of one line.
func Name(s string) string { return escape(s, false) }

// Text returns s with every character that is not printable escaped but
// newline and tab: for whole messages, which may hold several lines.
func Text(s string) string { return escape(s, true) }

// escape escapes s; lines keeps newline and tab.
func escape(s string, lines bool) string {
	if clean(s, lines) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case keep(r, lines):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u0085'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// keep reports whether r is printed as it is.
func keep(r rune, lines bool) bool {
	if r == '\n' || r == '\t' {
		return lines
	}
	return strconv.IsPrint(r) // letters, marks, numbers, punctuation, symbols, the ASCII space
}

// clean reports whether s needs no escaping (the common case: no copy).
func clean(s string, lines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return slowClean(s[i:], lines)
		}
		if c < ' ' || c == 0x7f {
			if !lines || (c != '\n' && c != '\t') {
				return false
			}
		}
	}
	return true
}

func slowClean(s string, lines bool) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || !keep(r, lines) {
			return false
		}
		i += n
	}
	return true
}

// Writer writes text to an underlying writer as Text escapes it. Each Write
// is escaped on its own: a UTF-8 sequence split across two writes is shown
// escaped (fmt's printers write whole strings, so this does not happen to
// them).
type Writer struct{ w io.Writer }

// NewWriter returns a Writer onto w.
func NewWriter(w io.Writer) *Writer { return &Writer{w} }

// Write writes Text(p) to the underlying writer and returns len(p) when it
// succeeded.
func (w *Writer) Write(p []byte) (int, error) {
	s := string(p)
	if _, err := io.WriteString(w.w, Text(s)); err != nil {
		return 0, err
	}
	return len(p), nil
}
