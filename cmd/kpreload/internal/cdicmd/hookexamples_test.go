package cdicmd

import (
	"os"
	"strings"
	"testing"
)

// TestHookHelpExamples runs, exactly as written, the examples of cdi hook
// update-ldcache (in ./rootfs, with the host's ldconfig).
func TestHookHelpExamples(t *testing.T) {
	lines := cli.ExamplesOf(t, "kpreload cdi hook update-ldcache")
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("rootfs/usr/local/nvidia/lib64", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if code, out, errOut := runCLI(strings.Fields(l)[1:]...); code != 0 {
			t.Fatalf("example %q: exit %d: %s%s", l, code, out, errOut)
		}
		conf, err := os.ReadFile("rootfs/etc/ld.so.conf.d/00-kpreload-cdi.conf")
		if err != nil || !strings.Contains(string(conf), "/usr/local/nvidia/lib64") {
			t.Errorf("example %q: the container's linker configuration: %v\n%s", l, err, conf)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("ran %d examples, want 1", len(lines))
	}
}
