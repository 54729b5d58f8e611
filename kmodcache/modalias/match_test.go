package modalias

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// matchCases are checked against Match and, in TestMatchAgainstGlibc, against the
// real glibc fnmatch, so a wrong "want" fails too.
var matchCases = []struct {
	pattern, s string
	want       bool
}{
	// Real module alias patterns.
	{"pci:v00001AF4d00001042sv*sd*bc*sc*i*", "pci:v00001AF4d00001042sv00001AF4sd00001042bc01sc80i00", true},
	{"pci:v00001AF4d00001042sv*sd*bc*sc*i*", "pci:v00001AF4d00001041sv00001AF4sd00001041bc02sc00i00", false},
	{"pci:v00001AF4d*sv*sd*bc*sc*i*", "pci:v00001AF4d00001053sv00001AF4sd00001053bcFFscFFi00", true},
	{"virtio:d00000002v*", "virtio:d00000002v00001AF4", true},
	{"virtio:d00000002v*", "virtio:d00000001v00001AF4", false},
	{"pci:v*d*sv*sd*bc01sc08i02*", "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02", true},
	{"pci:v*d*sv*sd*bc01sc08i02*", "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc06i01", false},
	{"acpi*:PNP0501:*", "acpi:PNP0501:", true},
	{"acpi*:PNP0501:*", "acpi:PNP0A08:PNP0A03:", false},
	{"acpi*:PNP0A03:*", "acpi:PNP0A08:PNP0A03:", true},
	{"cpu:type:x86,ven*fam*mod*:feature:*0081*", "cpu:type:x86,ven0000fam0006mod0055:feature:,0000,0080,0081,0089", true},
	{"cpu:type:x86,ven*fam*mod*:feature:*0081*", "cpu:type:x86,ven0000fam0006mod0055:feature:,0000,0080,0089", false},
	{"pci:v000010DEd*sv*sd*bc03sc0[02]i00*", "pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02i00", true},
	{"pci:v000010DEd*sv*sd*bc03sc0[02]i00*", "pci:v000010DEd00002335sv000010DEsd000018BFbc03sc01i00", false},
	{"scsi:t-0x0[05]*", "scsi:t-0x05", true},
	{"usb:v*p*d*dc*dsc*dp*ic03isc*ip*in*", "usb:v0627p0001d0000dc00dsc00dp00ic03isc00ip00in00", true},
	// '*' and '?'.
	{"*", "", true},
	{"?", "", false},
	{"?", "a", true},
	{"a*b*c", "aXXbYYc", true},
	{"a*b*c", "aXXbYYcZ", false},
	{"*?", "", false},
	{"*??*", "ab", true},
	{"***a", "ba", true},
	{"a/*", "a/b/c", true}, // no FNM_PATHNAME: '/' is ordinary
	{"*", ".hidden", true}, // no FNM_PERIOD
	// Brackets.
	{"[abc]", "b", true},
	{"[abc]", "d", false},
	{"[a-c]", "b", true},
	{"[a-c]", "-", false},
	{"[!a-c]", "d", true},
	{"[^a-c]", "d", true},
	{"[!a-c]", "b", false},
	{"[]]", "]", true},
	{"[!]]", "]", false},
	{"[!]]", "a", true},
	{"[a-]", "-", true},
	{"[-a]", "-", true},
	{"[z-a]", "m", false},
	{"[[:digit:]]", "7", true},
	{"[[:digit:]]", "x", false},
	{"[[:alpha:][:digit:]]", "x", true},
	{"[[:upper:]]", "a", false},
	{"[[:xdigit:]]", "F", true},
	{"[[:space:]]", "\t", true},
	{"[[:punct:]]", "-", true},
	{"[[:nosuch:]]", "a", false},
	{"[[.a.]]", "a", true},
	{"[[=a=]]", "a", true},
	{"[\\]]", "]", true},
	{"[a\\-z]", "-", true},
	{"[a\\-z]", "m", false},
	// Unterminated brackets stand for '['.
	{"[", "[", true},
	{"[ab", "[ab", true},
	{"[ab", "a", false},
	{"a[", "a[", true},
	// Backslash escapes.
	{"\\*", "*", true},
	{"\\*", "a", false},
	{"a\\", "a\\", false}, // a trailing backslash never matches
	{"\\a", "a", true},
	// NUL ends C strings.
	{"ab\x00c", "ab", true},
	{"ab", "ab\x00zz", true},
}

func TestMatch(t *testing.T) {
	for _, c := range matchCases {
		if got := Match(c.pattern, c.s); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// glibcFnmatch builds a small C program around the system's fnmatch(3) and
// returns a function that evaluates many (pattern, string) pairs in one run.
func glibcFnmatch(t *testing.T) func(pairs [][2]string) []bool {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed to compare Match with glibc's fnmatch: install it with scripts/deps.sh: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "fnmatch.c")
	bin := filepath.Join(dir, "fnmatch")
	const prog = `#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* stdin: NUL-terminated pattern and string, repeated; stdout: 1 or 0 per pair. */
int main(void) {
	size_t cap = 1 << 20, n = 0, r;
	char *buf = malloc(cap);
	while ((r = fread(buf + n, 1, cap - n, stdin)) > 0) {
		n += r;
		if (n == cap) buf = realloc(buf, cap *= 2);
	}
	for (size_t i = 0; i < n;) {
		const char *p = buf + i; i += strlen(p) + 1;
		const char *s = buf + i; i += strlen(s) + 1;
		putchar(fnmatch(p, s, 0) == 0 ? '1' : '0');
	}
	return 0;
}
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("building the fnmatch helper: %v\n%s", err, out)
	}
	return func(pairs [][2]string) []bool {
		var in bytes.Buffer
		for _, p := range pairs {
			in.WriteString(p[0])
			in.WriteByte(0)
			in.WriteString(p[1])
			in.WriteByte(0)
		}
		cmd := exec.Command(bin)
		cmd.Stdin = &in
		cmd.Env = []string{} // no LANG/LC_*: the C locale, as modprobe runs
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("running the fnmatch helper: %v", err)
		}
		if len(out) != len(pairs) {
			t.Fatalf("fnmatch helper answered %d pairs, want %d", len(out), len(pairs))
		}
		res := make([]bool, len(out))
		for i, c := range out {
			res[i] = c == '1'
		}
		return res
	}
}

// TestMatchAgainstGlibc compares Match with the real fnmatch(3) on the table above,
// on every alias pattern of the real kernel trees against every test modalias, and
// on random patterns built from the bytes that matter to the matcher.
func TestMatchAgainstGlibc(t *testing.T) {
	fnmatch := glibcFnmatch(t)
	var pairs [][2]string
	for _, c := range matchCases {
		if !strings.Contains(c.pattern, "\x00") && !strings.Contains(c.s, "\x00") {
			pairs = append(pairs, [2]string{c.pattern, c.s})
		}
	}
	// Real patterns against real modaliases.
	var patterns []string
	for _, k := range kernelTrees(t) {
		tree := loadKernelTree(t, k)
		for _, e := range tree.aliases {
			patterns = append(patterns, e.pattern)
		}
	}
	subjects := append(fixtureModaliases(t), readLines(t, "testdata/qemu-modaliases.txt")...)
	for _, p := range patterns {
		for _, s := range subjects {
			pairs = append(pairs, [2]string{p, s})
		}
	}
	// Random patterns: a fixed seed, so a failure reproduces.
	const seed = 20251122
	rng := rand.New(rand.NewPCG(seed, seed))
	ptoks := []string{"a", "b", "c", "z", "-", "]", "[", "!", "^", "*", "?", "\\", ":", ".", "=",
		"[:alpha:]", "[:digit:]", "[:nosuch:]", "[:", ":]", "[.a.]", "[.ab.]", "[=a=]", "[=", "[.", "0", "9"}
	sbytes := "abcz-]![^:.=*?\\09 A"
	for i := 0; i < 300000; i++ {
		var p, s strings.Builder
		for n := rng.IntN(9); n > 0; n-- {
			p.WriteString(ptoks[rng.IntN(len(ptoks))])
		}
		for n := rng.IntN(7); n > 0; n-- {
			s.WriteByte(sbytes[rng.IntN(len(sbytes))])
		}
		pairs = append(pairs, [2]string{p.String(), s.String()})
	}
	want := fnmatch(pairs)
	bad := 0
	for i, pr := range pairs {
		if got := Match(pr[0], pr[1]); got != want[i] {
			t.Errorf("Match(%q, %q) = %v, want %v (glibc fnmatch)", pr[0], pr[1], got, want[i])
			if bad++; bad == 30 {
				t.Fatalf("too many differences (random seed %d)", seed)
			}
		}
	}
	t.Logf("compared %d pairs (%d real pattern × modalias pairs) with glibc fnmatch", len(pairs), len(patterns)*len(subjects))
}

// readLines returns the non-empty, non-comment lines of a test data file.
func readLines(t testing.TB, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// fixtureModaliases returns the PCI modaliases of the captured H200 VM.
func fixtureModaliases(t testing.TB) []string {
	t.Helper()
	path := "../../testdata/h200-gpu-vm/pci-sysfs.txt" // testdata/ at the repository's root
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the H200 VM fixture: %v", err)
	}
	var out []string
	for i, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[1] == "modalias" {
			if len(f) != 3 {
				t.Fatalf("%s:%d: malformed modalias line %q", path, i+1, l)
			}
			out = append(out, f[2])
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no modalias lines", path)
	}
	return out
}

// ExampleMatch shows a PCI alias pattern matching a device.
func ExampleMatch() {
	fmt.Println(Match("pci:v00001AF4d*sv*sd*bc*sc*i*", "pci:v00001AF4d00001042sv00001AF4sd00001042bc01sc80i00"))
	// Output: true
}
