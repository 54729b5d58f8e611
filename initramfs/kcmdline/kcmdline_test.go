package kcmdline

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	c := Parse(`console=ttyS0 panic=-1 root=UUID=7c1e rw kpreload.driver=550 kpreload-load=nvidia,kpreload_edu quiet foo="a b" bar='x' kpreload_edu.delay_ms=10` + "\n")
	for _, tt := range []struct{ flag, want string }{
		{"console", "ttyS0"}, {"root", "UUID=7c1e"}, {"rw", "1"}, {"kpreload.driver", "550"},
		{"kpreload_load", "nvidia,kpreload_edu"}, {"kpreload-load", "nvidia,kpreload_edu"},
		{"foo", "a b"}, {"bar", "x"}, {"quiet", "1"},
	} {
		if got, ok := c.Flag(tt.flag); !ok || got != tt.want {
			t.Errorf("Flag(%q) = %q, %v; want %q", tt.flag, got, ok, tt.want)
		}
	}
	if got := c.FlagsForModule("kpreload-edu"); got != "delay_ms=10 " {
		t.Errorf("FlagsForModule = %q", got)
	}
}

// TestLoneQuote is the input that crashed u-root's parser, and with it /init.
func TestLoneQuote(t *testing.T) {
	for _, raw := range []string{`foo="`, `foo='`, `"`, `a=" b`, `x="abc`, `y=\"`} {
		c := Parse(raw)
		if c.Raw != raw {
			t.Errorf("Parse(%q).Raw = %q", raw, c.Raw)
		}
	}
	if got, _ := Parse(`foo="`).Flag("foo"); got != "" {
		t.Errorf(`foo=" gives %q, want ""`, got)
	}
	if got, _ := Parse(`x="abc`).Flag("x"); got != "abc" {
		t.Errorf(`x="abc gives %q, want "abc"`, got)
	}
}

// FuzzParse: any line parses, every flag's key is found, and values never
// hold the quotes that delimited them.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"console=ttyS0 panic=-1 kpreload.report=/dev/ttyS1 root=UUID=7c1e2d3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f rw",
		`kpreload.instance=cmVzb3VyY2VzOgo= kpreload.flavor=open foo="a b c"`, `foo="`, `'`, `a='b' c="d\"e"`, "\x00=\x01",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c := Parse(raw)
		if c.Raw != strings.TrimRight(raw, "\n") {
			t.Fatalf("Raw = %q, want %q", c.Raw, raw)
		}
		for _, flag := range fields(c.Raw) {
			key, _, _ := strings.Cut(flag, "=")
			if _, ok := c.AsMap[key]; !ok {
				t.Fatalf("flag %q of %q: key %q missing from %v", flag, raw, key, c.AsMap)
			}
		}
		_ = c.FlagsForModule("nvidia")
	})
}
