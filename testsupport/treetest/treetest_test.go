package treetest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	Write(t, dir, map[string]string{"a/b/c": "x", "d/": ""})
	if got, err := os.ReadFile(filepath.Join(dir, "a/b/c")); err != nil || string(got) != "x" {
		t.Errorf("a/b/c = %q, %v; want \"x\"", got, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "d")); err != nil || !fi.IsDir() {
		t.Errorf("d: %v, want a directory", err)
	}
}

func TestLinks(t *testing.T) {
	dir := t.TempDir()
	Links(t, dir, map[string]string{"a/l": "../b", "abs": "/etc/passwd"})
	for name, want := range map[string]string{"a/l": "../b", "abs": "/etc/passwd"} {
		if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || got != want {
			t.Errorf("%s -> %q, %v; want a link to %q", name, got, err, want)
		}
	}
}
