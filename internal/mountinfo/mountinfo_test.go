package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/dev/vda1", "/dev/vda1"},
		{`/mnt/my\040disk`, "/mnt/my disk"},
		{`a\011b\012c\134d`, "a\tb\nc\\d"},
		{`trailing\04`, `trailing\04`},
		{`not\999octal`, `not\999octal`},
		{`\400`, `\400`}, // over a byte
		{`\`, `\`},
	} {
		if got := Unescape(c.in); got != c.want {
			t.Errorf("Unescape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
