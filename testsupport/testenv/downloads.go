package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// DownloadCache returns a new download cache for a test that must not share
// the machine's (its .debs, unpacked sources, private apt configurations of
// other archives and first-seen records are the test's own), linked to the
// machine's (CacheRoot) unpacked kernels (kernels/), build roots
// (buildroot/: each is made in a temporary directory and renamed into
// place, so caches can share them) and private bookworm and trixie apt
// configurations (apt/bookworm/, apt/trixie/): a suite's first apt-get
// update (bookworm's about 15 MB) and trixie's build root (mmdebstrap, about
// two minutes) are paid once per machine, not by every test, and every test
// reads the same lists. builder/archive's Refresh leaves a linked
// configuration to the machine's cache, whose lists keep their 24 hour rule.
func DownloadCache(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	machine := CacheRoot()
	for _, link := range []string{"kernels", "buildroot", filepath.Join("apt", "bookworm"), filepath.Join("apt", "trixie")} {
		target := filepath.Join(machine, link)
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatalf("the machine's download cache: %v", err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, link)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
