package tail

import (
	"slices"
	"testing"
)

func TestLines(t *testing.T) {
	for _, tt := range []struct {
		s    string
		n    int
		want []string
	}{
		{"", 3, nil},
		{"one\n", 3, []string{"one"}},
		{"a\nb\nc\nd\n", 2, []string{"c", "d"}},
		{"a\n\n  \nb\n\n", 5, []string{"a", "b"}},
		{"x.c:1: error\n    |  ^~~\r\nmake: *** [all] Error 1\n", 2, []string{"    |  ^~~\r", "make: *** [all] Error 1"}},
		{"a\nb", 0, []string{}},
	} {
		if got := Lines(tt.s, tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("Lines(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}
