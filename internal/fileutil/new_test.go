package fileutil

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWriteNew checks that WriteNew makes a new file per call, named by the
// pattern, with the data and mode asked for, and leaves no temporary file.
func TestWriteNew(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i := range 3 {
		p, err := WriteNew(dir, "request-*.json", []byte{byte('a' + i)}, 0o640, true)
		if err != nil {
			t.Fatalf("WriteNew: %v", err)
		}
		paths = append(paths, p)
		base := filepath.Base(p)
		if filepath.Dir(p) != dir || !strings.HasPrefix(base, "request-") || !strings.HasSuffix(base, ".json") || len(base) <= len("request-.json") {
			t.Errorf("WriteNew path = %s, want %s/request-<random>.json", p, dir)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != string(rune('a'+i)) {
			t.Errorf("ReadFile(%s) = %q, %v; want %q", p, got, err, string(rune('a'+i)))
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o640 {
			t.Errorf("mode of %s = %v, %v; want 0640", p, fi.Mode().Perm(), err)
		}
	}
	names := entries(t, dir)
	if len(names) != 3 || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, TempPrefix) }) {
		t.Errorf("dir holds %v, want the 3 files %v and no temporary file", names, paths)
	}
}

// TestSymlink checks that Symlink makes a link and replaces an existing one
// (never following it), leaving no temporary link behind.
func TestSymlink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "driver")
	for _, target := range []string{"/usr/lib/a", "/usr/lib/b"} {
		if err := Symlink(target, link); err != nil {
			t.Fatalf("Symlink(%s): %v", target, err)
		}
		if got, err := os.Readlink(link); err != nil || got != target {
			t.Errorf("Readlink = %q, %v; want %q", got, err, target)
		}
	}
	if got, want := entries(t, dir), []string{"driver"}; !slices.Equal(got, want) {
		t.Errorf("dir holds %v, want %v", got, want)
	}
}

// TestPublish checks that Publish moves a finished file over its
// destination and that a missing file is an error leaving dst alone.
func TestPublish(t *testing.T) {
	dir := t.TempDir()
	tmp, dst := filepath.Join(dir, "download.tmp"), filepath.Join(dir, "pkg.deb")
	if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Publish(tmp, dst); err == nil {
		t.Errorf("Publish(missing) = nil, want an error")
	}
	if err := os.WriteFile(tmp, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Publish(tmp, dst); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got, err := os.ReadFile(dst); err != nil || string(got) != "new" {
		t.Errorf("dst = %q, %v; want %q", got, err, "new")
	}
	if got, want := entries(t, dir), []string{"pkg.deb"}; !slices.Equal(got, want) {
		t.Errorf("dir holds %v, want %v", got, want)
	}
}

func TestMove(t *testing.T) {
	dir := t.TempDir()
	aside := filepath.Join(dir, "aside")
	if err := os.Mkdir(aside, 0o755); err != nil {
		t.Fatal(err)
	}
	old, moved := filepath.Join(dir, "ci.qcow2"), filepath.Join(aside, "previous-ci.qcow2")
	if err := Move(old, moved); err == nil {
		t.Errorf("Move(missing) = nil, want an error")
	}
	// A dangling link moves as it is (Publish, which opens what it moves, would refuse it).
	if err := os.Symlink("nowhere", old); err != nil {
		t.Fatal(err)
	}
	if err := Move(old, moved); err != nil {
		t.Fatalf("Move: %v", err)
	}
	if got, err := os.Readlink(moved); err != nil || got != "nowhere" {
		t.Errorf("moved = %q, %v; want the link to %q", got, err, "nowhere")
	}
	if got, want := entries(t, dir), []string{"aside"}; !slices.Equal(got, want) {
		t.Errorf("dir holds %v, want %v", got, want)
	}
}
