package copyincmd

import (
	"os"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
)

// TestCopyInHelpExamples runs the example of copy-in exactly as written, in
// a directory holding ./rootfs (whose /usr/local is a link, absolute, to
// /usr: followed inside the root) and ./tree, the unpacked files.
func TestCopyInHelpExamples(t *testing.T) {
	t.Chdir(t.TempDir())
	clitest.MustWrite(t, "rootfs/usr/bin/.keep", "")
	if err := os.Symlink("/usr", "rootfs/usr/local"); err != nil {
		t.Fatal(err)
	}
	clitest.MustWrite(t, "tree/usr/local/bin/kpreload", "binary")
	clitest.MustWrite(t, "tree/etc/kpreload/instance.yaml", "resources: {}\n")
	lines := cli.ExamplesOf(t, "kpreload copy-in")
	for _, l := range lines {
		if code, out, errOut := runCLI(strings.Fields(l)[1:]...); code != 0 {
			t.Fatalf("example %q: exit %d: %s%s", l, code, out, errOut)
		}
	}
	for p, want := range map[string]string{"rootfs/usr/bin/kpreload": "binary", "rootfs/etc/kpreload/instance.yaml": "resources: {}\n"} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("after %q, %s holds %q (%v), want %q", lines, p, b, err, want)
		}
	}
	if len(lines) != 1 {
		t.Errorf("copy-in examples %q; the test knows one", lines)
	}
}
