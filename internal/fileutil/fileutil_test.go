package fileutil

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// entries returns the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteAtomic(t *testing.T) {
	for _, tt := range []struct {
		name     string
		old      string // existing content, "" for none
		data     string
		perm     fs.FileMode
		sync     bool
		wantMode fs.FileMode
	}{
		{"new file", "", "hello\n", 0o644, false, 0o644},
		{"replace, synced", "old", "new", 0o444, true, 0o444},
		{"executable", "", "#!/bin/sh\n", 0o755, false, 0o755},
		{"empty", "x", "", 0o640, true, 0o640},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f.json")
			if tt.old != "" {
				if err := os.WriteFile(path, []byte(tt.old), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteAtomic(path, []byte(tt.data), tt.perm, tt.sync); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.data {
				t.Errorf("content = %q, want %q", got, tt.data)
			}
			fi, _ := os.Stat(path)
			if got := fi.Mode().Perm(); got != tt.wantMode {
				t.Errorf("mode = %v, want %v", got, tt.wantMode)
			}
			if got := entries(t, dir); len(got) != 1 {
				t.Errorf("directory holds %v, want only f.json", got)
			}
		})
	}
}

func TestWriteAtomicMissingDir(t *testing.T) {
	err := WriteAtomic(filepath.Join(t.TempDir(), "no", "f"), []byte("x"), 0o644, false)
	if got, want := err != nil, true; got != want {
		t.Errorf("error = %v, want one", err)
	}
}

func TestCopy(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, tt := range []struct {
		name     string
		atomic   bool
		old      string
		perm     fs.FileMode
		wantMode fs.FileMode
	}{
		{"in place, new", false, "", 0o644, 0o644},
		{"in place, umask applies", false, "", 0o666, 0o644},
		{"in place, existing keeps its mode", false, "longer old content", 0o644, 0o600},
		{"atomic, new", true, "", 0o755, 0o755},
		{"atomic, replaces mode", true, "old", 0o444, 0o444},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
			if err := os.WriteFile(src, []byte("module bytes"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.old != "" {
				if err := os.WriteFile(dst, []byte(tt.old), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if tt.atomic {
				err = CopyAtomic(src, dst, tt.perm, true)
			} else {
				err = CopyFile(src, dst, tt.perm)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(dst)
			if string(got) != "module bytes" {
				t.Errorf("content = %q, want %q", got, "module bytes")
			}
			fi, _ := os.Stat(dst)
			if got := fi.Mode().Perm(); got != tt.wantMode {
				t.Errorf("mode = %v, want %v", got, tt.wantMode)
			}
			if got := entries(t, dir); len(got) != 2 {
				t.Errorf("directory holds %v, want src and dst", got)
			}
		})
	}
}

func TestCopyMissingSource(t *testing.T) {
	dir := t.TempDir()
	for _, copy := range []func(src, dst string) error{
		func(src, dst string) error { return CopyFile(src, dst, 0o644) },
		func(src, dst string) error { return CopyAtomic(src, dst, 0o644, false) },
	} {
		if err := copy(filepath.Join(dir, "missing"), filepath.Join(dir, "dst")); err == nil {
			t.Error("copy of a missing file: no error")
		}
		if got := entries(t, dir); len(got) != 0 {
			t.Errorf("directory holds %v, want nothing", got)
		}
	}
}

func TestTempAbort(t *testing.T) {
	for _, tt := range []struct {
		name   string
		commit bool
		want   []string
	}{
		{"aborted", false, nil},
		{"committed", true, []string{"index.json"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tmp, err := CreateTemp(filepath.Join(dir, "index.json"))
			if err != nil {
				t.Fatal(err)
			}
			if base := filepath.Base(tmp.Name()); !strings.HasPrefix(base, TempPrefix+"index.json-") {
				t.Errorf("temporary file %s, want %sindex.json-*", base, TempPrefix)
			}
			if tt.commit {
				if err := tmp.Commit(0o644, true); err != nil {
					t.Fatal(err)
				}
			}
			tmp.Abort()
			got := entries(t, dir)
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("directory holds %v, want %v", got, tt.want)
			}
		})
	}
}
