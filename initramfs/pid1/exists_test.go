package pid1

import (
	"os"
	"path/filepath"
	"testing"
)

func TestExistsIn(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"lib/systemd", "sbin", "bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "lib/systemd/systemd"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"sbin/init":    "/lib/systemd/systemd", // absolute: resolves inside root, not on the host
		"bin/init":     "../lib/systemd/systemd",
		"sbin/dangles": "/lib/systemd/nothing",
		"sbin/loop":    "/sbin/loop",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/sbin/init", true},
		{"/bin/init", true},
		{"/lib/systemd/systemd", true},
		{"/sbin/dangles", false},
		{"/sbin/loop", false},
		{"/sbin/absent", false},
	} {
		err := existsIn(root, c.path)
		if got := err == nil; got != c.ok {
			t.Errorf("existsIn(%s) = %v, want ok=%v", c.path, err, c.ok)
		}
	}
}
