// Package inroottest helps tests build hostile system trees for the readers
// of internal/inroot: a file of the tree made anew as a link, a FIFO, a device.
package inroottest

import (
	"os"
	"path/filepath"
	"testing"
)

// Remake removes root/rel (whatever is there) and makes it anew with mk,
// which gets the path; root "" takes rel as the whole path.
func Remake(t testing.TB, root, rel string, mk func(string) error) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mk(p); err != nil {
		t.Fatal(err)
	}
}
