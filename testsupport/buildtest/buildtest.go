// Package buildtest holds test helpers shared by the build side's real-dkms tests.
package buildtest

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/store"
)

// RequireTools fails the test, saying how to install them, when the programs a
// real dkms build needs are missing.
func RequireTools(t testing.TB, dkmsPath string) {
	t.Helper()
	for _, tool := range []string{dkmsPath, "make", "gcc-12", "pahole", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (%v): install the build dependencies with scripts/deps.sh (dkms, make, gcc-12, dwarves, dpkg)", tool, err)
		}
	}
}

// CopyTree copies the regular files of src into dst.
func CopyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

// EditFile replaces old with new in path, failing if old is not there.
func EditFile(t testing.TB, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s does not contain %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// CopyCells copies every driver set of the module cache at from into the
// module cache at to (made if absent) and returns what it copied: tests that
// need cells another test of the run already built by the real dkms take
// them this way instead of building them again.
func CopyCells(t testing.TB, from, to string) []store.Entry {
	t.Helper()
	src, err := store.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := store.Open(to)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := src.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := src.CopySet(context.Background(), dst, e.ID); err != nil {
			t.Fatalf("copy set %.12s from %s to %s: %v", e.ID, from, to, err)
		}
	}
	return entries
}
