package termtext

import (
	"bytes"
	"fmt"
	"testing"
)

// TestEscape: control characters (C0, DEL, C1), format characters and bytes
// that are not UTF-8 are shown escaped as strconv.Quote shows them; Name
// escapes newline and tab too, Text keeps them; printable text, non-ASCII
// letters included, is left as it is.
func TestEscape(t *testing.T) {
	tests := []struct {
		in, name, text string
	}{
		{"nvidia 550.54.14", "nvidia 550.54.14", "nvidia 550.54.14"},
		{"évolué ☃ 驱动", "évolué ☃ 驱动", "évolué ☃ 驱动"},
		{"evil\x1b]0;PWNED\a\x1b[2J", `evil\x1b]0;PWNED\a\x1b[2J`, `evil\x1b]0;PWNED\a\x1b[2J`},
		{"1\r\nFAKE: line", `1\r\nFAKE: line`, "1\\r\nFAKE: line"},
		{"a\tb", `a\tb`, "a\tb"},
		{"nul\x00del\x7f", `nul\x00del\x7f`, `nul\x00del\x7f`},
		{"c1 \u0085 \u009b2J", `c1 \u0085 \u009b2J`, `c1 \u0085 \u009b2J`},
		{"bidi \u202egnp.exe \u2028sep", `bidi \u202egnp.exe \u2028sep`, `bidi \u202egnp.exe \u2028sep`},
		{"bad \xff\xfe utf8 \xe2\x82", `bad \xff\xfe utf8 \xe2\x82`, `bad \xff\xfe utf8 \xe2\x82`},
		{`back\slash`, `back\slash`, `back\slash`},
		{"", "", ""},
	}
	for _, tc := range tests {
		if got := Name(tc.in); got != tc.name {
			t.Errorf("Name(%q) = %q, want %q", tc.in, got, tc.name)
		}
		if got := Text(tc.in); got != tc.text {
			t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.text)
		}
		var b bytes.Buffer
		if n, err := fmt.Fprint(NewWriter(&b), tc.in); err != nil || n != len(tc.in) || b.String() != tc.text {
			t.Errorf("Writer of %q: wrote %q (%d, %v), want %q", tc.in, b.String(), n, err, tc.text)
		}
	}
}

// FuzzEscape: whatever bytes go in, neither Name nor Text lets a
// control byte out (but newline and tab in Text).
func FuzzEscape(f *testing.F) {
	f.Add("evil\x1b]0;PWNED\a\x1b[2J")
	f.Add("1\r\nFAKE: line")
	f.Add("\xc2\x9b31m")
	f.Fuzz(func(t *testing.T, s string) {
		for _, out := range []struct {
			s     string
			lines bool
		}{{Name(s), false}, {Text(s), true}} {
			for i := 0; i < len(out.s); i++ {
				c := out.s[i]
				if (c < ' ' && !(out.lines && (c == '\n' || c == '\t'))) || c == 0x7f {
					t.Fatalf("escape(%q, lines %t) = %q holds byte %#x", s, out.lines, out.s, c)
				}
			}
			for _, r := range out.s {
				if r >= 0x80 && r < 0xa0 {
					t.Fatalf("escape(%q) = %q holds C1 %U", s, out.s, r)
				}
			}
		}
	})
}
