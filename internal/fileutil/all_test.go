package fileutil

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteAtomicAll: the missing parents are made, the file holds the data
// with the mode asked for, and no temporary file stays behind.
func TestWriteAtomicAll(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "b", "f")
	if err := WriteAtomicAll(path, []byte("data"), 0o640, false); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "data" {
		t.Fatalf("got %q, %v; want \"data\"", got, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	if got, want := entries(t, filepath.Dir(path)), []string{"f"}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("entries %q, want %q", got, want)
	}
}
