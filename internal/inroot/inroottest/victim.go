package inroottest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Victim makes a directory tree with a few files and directories, for tests
// that check nothing outside a root is created, changed or removed: take a
// Snapshot before, compare with one after.
func Victim(t testing.TB, dir string) {
	t.Helper()
	for p, s := range map[string]string{
		"file": "victim file\n", "sub/file": "victim sub file\n", "boot/vmlinuz-victim": "victim kernel\n",
		"loader/loader.conf": "default victim.conf\n", "loader/entries/victim.conf": "title victim\n",
		"kpreload/6.1.0-56-cloud-amd64/vmlinuz": "victim esp kernel\n",
	} {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Snapshot lists the tree at dir: every entry's path, type, mode and, for a
// file, the SHA-256 of its content, for a link its target.
func Snapshot(t testing.TB, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		what := ""
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			what = hex.EncodeToString(h[:8])
		case fi.Mode()&fs.ModeSymlink != 0:
			what, _ = os.Readlink(p)
		}
		lines = append(lines, fmt.Sprintf("%s %v %s", rel, fi.Mode(), what))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
