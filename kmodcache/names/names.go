// Package names holds the one grammar for the names kpreload turns into paths
// and keys: driver names, driver versions, flavours and kernel releases. A
// name is 1 to MaxLen bytes of ASCII letters, digits and the characters
// ". + ~ _ -", starting with a letter or a digit and holding no "..": so it
// is never a path of more than one element, never "." or "..", never an
// option, and never holds a space, a quote or a control character.
//
// Every place a name enters (command line, instance YAML, user-data,
// recipes, manifests, a registry's set.json, the boot index, the ready
// record) checks it with this package, and so does every place that makes a
// path of one.
package names

import (
	"errors"
	"fmt"
	"strings"
)

// MaxLen is the longest name in bytes: the kernel's own bound on a release
// (__NEW_UTS_LEN); real driver versions and names are far shorter.
const MaxLen = 64

// Allowed says what a name may be, for error messages.
const Allowed = `1 to 64 letters, digits and ".+~_-", starting with a letter or digit, no ".."`

// ErrInvalid is wrapped by every error of this package.
var ErrInvalid = errors.New("not a valid name")

// Error is a name that breaks the grammar.
type Error struct {
	// Field names what the value is for ("driver version", "--kernel",
	// "resources.driver.version").
	Field string
	// Value is the name as given.
	Value string
	// Problem says what is wrong with it.
	Problem string
}

// shown is how much of a value an error quotes.
const shown = MaxLen + 8

// Error names the field and the value (quoted, cut after a few dozen bytes)
// and says what is allowed; without a field (the caller names it) it starts
// with the value.
func (e *Error) Error() string {
	v := fmt.Sprintf("%q", e.Value)
	if len(e.Value) > shown { // then too long: the problem gives the length
		v = fmt.Sprintf("%q…", e.Value[:shown])
	}
	if e.Field == "" {
		return fmt.Sprintf("%s %s: want %s", v, e.Problem, Allowed)
	}
	return fmt.Sprintf("%s %s %s: want %s", e.Field, v, e.Problem, Allowed)
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// Check returns nil when value is a name, else an *Error naming field.
func Check(field, value string) error {
	if p := problem(value); p != "" {
		return &Error{Field: field, Value: value, Problem: p}
	}
	return nil
}

// CheckOptional is Check that also accepts "" (a flavour that is not given).
func CheckOptional(field, value string) error {
	if value == "" {
		return nil
	}
	return Check(field, value)
}

// Valid reports whether value is a name.
func Valid(value string) bool { return problem(value) == "" }

// problem says what is wrong with s as a name, or "".
func problem(s string) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > MaxLen:
		return fmt.Sprintf("is %d bytes long", len(s))
	case !isAlnum(s[0]):
		return "starts with " + char(s[0])
	case strings.Contains(s, ".."):
		return `holds ".."`
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && !strings.ContainsRune(".+~_-", rune(c)) {
			return "holds " + char(c)
		}
	}
	return ""
}

// char names a byte in a message: quoted, or "a non-ASCII byte".
func char(c byte) string {
	if c >= 0x80 {
		return "a non-ASCII byte"
	}
	return fmt.Sprintf("%q", c)
}

// isAlnum reports whether c is an ASCII letter or digit.
func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
