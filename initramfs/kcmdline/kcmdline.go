// Package kcmdline parses the kernel command line for /init: the same rules
// as u-root's pkg/cmdline (whose CmdLine type it fills, so Flag and
// FlagsForModule work as before), without its crash on a value that is a
// single quote character (`foo="`), which would take /init and with it the
// kernel down. Any input parses; nothing here panics (FuzzParse).
//
// The tokenizer and dequoting follow u-root v0.16.0 pkg/cmdline
// (Copyright 2018 the u-root Authors, BSD-style licence).
package kcmdline

import (
	"os"
	"strings"
	"unicode"

	"github.com/u-root/u-root/pkg/cmdline"
)

// Read parses the command line in the file at path (/proc/cmdline). A file
// that cannot be read gives an empty command line and the error in Err.
func Read(path string) *cmdline.CmdLine {
	raw, err := os.ReadFile(path)
	c := Parse(string(raw))
	c.Err = err
	return c
}

// Parse parses a raw kernel command line: space-separated flags, quoted
// values kept whole, "key" alone meaning "key=1", and every key stored both
// as written and with '-' as '_'.
func Parse(raw string) *cmdline.CmdLine {
	raw = strings.TrimRight(raw, "\n")
	m := map[string]string{}
	for _, flag := range fields(raw) {
		key, value, ok := strings.Cut(flag, "=")
		if !ok {
			value = "1"
		}
		value = dequote(value)
		m[strings.ReplaceAll(key, "-", "_")] = value
		m[key] = value
	}
	return &cmdline.CmdLine{Raw: raw, AsMap: m}
}

// fields splits the line at spaces outside quotation marks.
func fields(line string) []string {
	lastQuote := rune(0)
	return strings.FieldsFunc(line, func(c rune) bool {
		switch {
		case c == lastQuote:
			lastQuote = 0
			return false
		case lastQuote != 0:
			return false
		case unicode.In(c, unicode.Quotation_Mark):
			lastQuote = c
			return false
		default:
			return unicode.IsSpace(c)
		}
	})
}

// dequote removes the quotes around a value and one level of backslash
// before an inner quote. A value that opens a quote it never closes (`"`,
// `"abc`) keeps its text after the opening quote.
func dequote(line string) string {
	if line == "" {
		return line
	}
	var quote byte
	if line[0] == '"' || line[0] == '\'' {
		quote = line[0]
		if len(line) >= 2 && line[len(line)-1] == quote {
			line = line[1 : len(line)-1]
		} else {
			line = line[1:]
		}
	}
	var context, out []byte
	for _, c := range []byte(line) {
		switch {
		case c == '\\':
			context = append(context, c)
		case quote != 0 && c == quote:
			if len(context) > 0 {
				last := context[len(context)-1]
				if last == c {
					context = context[:len(context)-1]
				} else if last == '\\' && len(out) > 0 {
					out = out[:len(out)-1] // one level of backslash
					context = context[:0]
				}
			} else {
				context = append(context, c)
			}
		case len(context) > 0 && context[len(context)-1] == '\\':
			context = context[:0]
		}
		out = append(out, c)
	}
	return string(out)
}
