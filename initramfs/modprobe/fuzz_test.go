package modprobe

import (
	"strings"
	"testing"
)

// FuzzParse feeds the helper's arguments (NUL-separated, as argv) to Parse:
// it never panics, an error comes with no request, and an accepted request
// names exactly one printable name within bounds that parses back the same
// from the kernel's own form (-q -- NAME).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"-q\x00--\x00crypto-crc32c",
		"-q\x00--\x00crypto-cbc(aes)-all",
		"-q\x00--\x00fs-vfat",
		"--quiet\x00nls_cp437",
		"--\x00-x",
		"-v\x00ext4",
		"-q\x00--\x00ext4\x00debug=1",
		"-q\x00--\x00",
		"",
		"\x00",
		"-q\x00--\x00a b",
		"-q\x00-q\x00-q\x00-q\x00-q\x00-q\x00-q\x00-q\x00x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var args []string
		if raw != "" {
			args = strings.Split(raw, "\x00")
		}
		r, err := Parse(args)
		if err != nil {
			if r != (Request{}) {
				t.Fatalf("Parse(%q) = %+v with error %v", args, r, err)
			}
			return
		}
		if r.Name == "" || len(r.Name) > MaxNameLen || len(args) > MaxArgs {
			t.Fatalf("Parse(%q) accepted name %q (%d bytes) from %d arguments", args, r.Name, len(r.Name), len(args))
		}
		for i := 0; i < len(r.Name); i++ {
			if c := r.Name[i]; c <= ' ' || c > '~' {
				t.Fatalf("Parse(%q) accepted name %q with byte %#02x", args, r.Name, c)
			}
		}
		again, err := Parse([]string{"-q", "--", r.Name})
		if err != nil || again.Name != r.Name || !again.Quiet {
			t.Fatalf("Parse(-q -- %q) = %+v, %v; want the same name back", r.Name, again, err)
		}
	})
}
