package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGoBuildStaticShared: two tests asking for the same program get files of
// their own (in a directory that did not exist yet, as go build -o makes it)
// with the shared binary's content, executable.
func TestGoBuildStaticShared(t *testing.T) {
	a := GoBuildStatic(t, t.TempDir(), "first", "./cmd/kpreload-rootinit")
	b := GoBuildStatic(t, filepath.Join(t.TempDir(), "made", "by", "build"), "second", "./cmd/kpreload-rootinit")
	shared, err := os.Stat(sharedPath(t, "./cmd/kpreload-rootinit"))
	if err != nil {
		t.Fatal(err)
	}
	ab, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ab, bb) || int64(len(ab)) != shared.Size() {
		t.Errorf("the two copies differ (%d and %d bytes)", len(ab), len(bb))
	}
	for _, p := range []string{a, b} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v, want 0755", p, fi.Mode().Perm())
		}
		if os.SameFile(fi, shared) {
			t.Errorf("%s is the shared binary itself, want a copy", p)
		}
	}
}

// sharedPath is where sharedStatic keeps pkg for this checkout.
func sharedPath(t *testing.T, pkg string) string {
	t.Helper()
	gocache, err := goCache()
	if err != nil {
		t.Fatal(err)
	}
	return sharedBinary(gocache, RepoRoot(t), pkg)
}
