package follow

import (
	"bytes"
	"strings"
	"testing"
)

// TestWriteTableEscapes: a row whose kernel, recipe, version or error holds
// terminal controls (an archive's version, a registry's error text) is
// printed escaped: no raw ESC, BEL, CR, no forged line.
func TestWriteTableEscapes(t *testing.T) {
	r := &Report{Cells: []Row{
		{Kernel: "6.1.0-56-cloud-amd64", Recipe: "evil\x1b]0;PWNED\a\x1b[2J", Version: "1\r\nFAKE: line", State: "failed", Error: "push: \x1b[2J\rFAKE: ok\nFAKE: 0 cells"},
	}, Failed: 1}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for i := 0; i < len(out); i++ {
		if c := out[i]; (c < ' ' && c != '\n' && c != '\t') || c == 0x7f {
			t.Fatalf("WriteTable printed a raw control byte %#x:\n%q", c, out)
		}
	}
	for _, want := range []string{`evil\x1b]0;PWNED\a\x1b[2J`, `1\r\nFAKE: line`, `push: \x1b[2J\rFAKE: ok`} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteTable lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\nFAKE") || !strings.Contains(out, "\n  FAKE: 0 cells") {
		t.Errorf("WriteTable printed a forged line:\n%s", out)
	}
}
