// Package treetest writes small file trees for tests: roots, staging
// directories and fixtures made from a map of paths.
package treetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Write makes each path of files under dir with its content (mode 0755; a
// path ending in "/" makes a directory), creating parent directories; the
// test fails on any error.
func Write(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for p, s := range files {
		full := filepath.Join(dir, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// Links makes each path of links under dir a symbolic link to its target
// (written as given: relative or absolute), creating parent directories; the
// test fails on any error.
func Links(t testing.TB, dir string, links map[string]string) {
	t.Helper()
	for p, target := range links {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
}
