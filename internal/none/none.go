// Package none says an empty value in kpreload's messages the one way: the
// word "none", where a value or a list of values would stand.
package none

import (
	"cmp"
	"strings"
)

// Word is what a message says in place of an empty value.
const Word = "none"

// Or returns s, or Word when s is empty.
func Or(s string) string {
	return cmp.Or(s, Word)
}

// List returns the values joined by ", ", or Word when there are none.
func List(values []string) string {
	return Or(strings.Join(values, ", "))
}
