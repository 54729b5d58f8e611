package rootfs

import (
	"strings"
	"testing"
)

// FuzzParseSpec checks the parser of root= from the kernel command line (the
// image's, or one an instance YAML or a boot loader entry sets): no panic; an
// error comes with the zero Spec; an accepted spec has a known kind and a
// non-empty value (a /dev/ path for kind "path"), renders as the trimmed
// input, and parses back from String to the same spec.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"UUID=3f1c9a2e-7b1d-4c55-9e0e-0a1b2c3d4e5f", "LABEL=rootfs", "  LABEL=root fs  ", "LABEL=a=b", "PARTUUID=8b1f5c4e-01",
		"/dev/vda", "/dev/nvme0n1p1", "", "   ", "UUID=", "LABEL=", "PARTUUID=", "garbage", "uuid=x", "PARTLABEL=root",
		"dev/vda", "/dev/", "UUID= x", "LABEL=\u00a0", "UUID=\x00", "LABEL=UUID=x", "\t/dev/sda\n",
	} {
		f.Add(s)
	}
	kinds := map[string]bool{"uuid": true, "label": true, "partuuid": true, "path": true}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseSpec(in)
		if err != nil {
			if s != (Spec{}) {
				t.Fatalf("ParseSpec(%q) = %+v with error %v, want the zero Spec", in, s, err)
			}
			return
		}
		if !kinds[s.Kind] || s.Value == "" || s.Kind == "path" && !strings.HasPrefix(s.Value, "/dev/") {
			t.Fatalf("ParseSpec(%q) = %+v", in, s)
		}
		if got, want := s.String(), strings.TrimSpace(in); got != want {
			t.Fatalf("ParseSpec(%q).String() = %q, want %q", in, got, want)
		}
		again, err := ParseSpec(s.String())
		if err != nil || again != s {
			t.Fatalf("ParseSpec(%q) = %+v, %v; want %+v (round trip)", s.String(), again, err, s)
		}
	})
}
