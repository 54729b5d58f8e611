package archive

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParseMadison checks the reader of "apt-cache madison" output, which
// reports what a suite's package lists (from the Debian archive or a mirror)
// carry: no panic; the versions are non-empty, trimmed, free of '|' and line
// breaks, distinct, in the order of their first line; and they are exactly
// those of the lines "NAME | VERSION | ..." for the name asked, whatever
// comes before or between them (no line is dropped).
func FuzzParseMadison(f *testing.F) {
	real := ` nvidia-driver | 550.163.01-5.1 | http://deb.debian.org/debian sid/non-free amd64 Packages
 nvidia-driver | 550.163.01-2 | http://deb.debian.org/debian trixie/non-free amd64 Packages
 nvidia-driver | 550.163.01-2 | http://deb.debian.org/debian trixie/non-free Sources
 other | 1 | x
`
	f.Add([]byte(real), "nvidia-driver")
	f.Add([]byte(real), "other")
	f.Add([]byte(""), "")
	f.Add([]byte("|||\n||\n"), "")
	f.Add([]byte("a | 1 | x\r\na|2|\na | | x\n a |1|y"), "a")
	f.Add([]byte("a | 1 2 | x\na|\t3\t|\n"), "a")
	// A line longer than bufio.Scanner's 64 KiB limit must not hide the lines after it.
	f.Add([]byte("x | 0 | "+strings.Repeat("y", 70000)+"\na | 1 | z\n"), "a")
	f.Fuzz(func(t *testing.T, out []byte, name string) {
		got := parseMadison(out, name)
		var want []string
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Split(line, "|")
			if len(f) < 3 || strings.TrimSpace(f[0]) != name {
				continue
			}
			if v := strings.TrimSpace(f[1]); v != "" && !slices.Contains(want, v) {
				want = append(want, v)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("parseMadison(%.300q, %q) = %q, want %q", out, name, got, want)
		}
		for i, v := range got {
			if v == "" || v != strings.TrimSpace(v) || strings.ContainsAny(v, "|\n") || slices.Contains(got[:i], v) {
				t.Fatalf("parseMadison(%.300q, %q) = %q: version %q", out, name, got, v)
			}
		}
	})
}
