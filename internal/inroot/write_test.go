package inroot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// hostile builds a root whose entries are links out of it (absolute and
// relative with ".."), next to a victim tree; it returns root and victim.
func hostile(t *testing.T) (root, victim string) {
	t.Helper()
	root, outside := tree(t,
		"l:abs=OUTSIDE",           // absolute link to the outside tree
		"l:rel=../../outside",     // relative, climbing out
		"l:absfile=OUTSIDE/file",  // a file outside
		"l:dangling=/nonexistent", // inside root: nowhere
		"d:inside/dir",
		"f:inside/dir/keep=keep",
		"l:inside/dir/out=OUTSIDE", // a link out inside a tree RemoveAll walks
		"l:inside/dir/outfile=OUTSIDE/file",
		"l:in=/inside",            // absolute: from the root
		"l:inside/up=../../../..", // climbs to the root and stops there
	)
	inroottest.Victim(t, outside)
	return root, outside
}

func TestWritesStayInRoot(t *testing.T) {
	for _, c := range []struct {
		name string
		op   func(root string) error
		// in is a path inside root that must hold "new" afterwards ("" when
		// the operation must fail).
		in      string
		wantErr string
	}{
		{"write through an absolute link", func(r string) error { return WriteFile(r, "abs/file", []byte("new"), 0o644) }, "", "no such file"},
		{"write through a relative link", func(r string) error { return WriteFile(r, "rel/file", []byte("new"), 0o644) }, "", "no such file"},
		{"write over a link to a file replaces the link", func(r string) error { return WriteFile(r, "absfile", []byte("new"), 0o644) }, "absfile", ""},
		{"mkdir through an absolute link out", func(r string) error { return MkdirAll(r, "abs/boot/efi", 0o755) }, "", "no such file"},
		{"mkdir through a relative link out", func(r string) error { return MkdirAll(r, "rel/sub", 0o755) }, "", "no such file"},
		{"mkdir through an absolute link into the root", func(r string) error {
			if err := MkdirAll(r, "in/boot/efi", 0o755); err != nil {
				return err
			}
			return WriteFile(r, "in/boot/efi/x", []byte("new"), 0o644)
		}, "inside/boot/efi/x", ""},
		{"write through a relative link climbing to the root", func(r string) error {
			return WriteFile(r, "inside/up/keep2", []byte("new"), 0o644)
		}, "keep2", ""},
		{"dot-dot in the name stops at root", func(r string) error { return WriteFile(r, "../../outside/file", []byte("new"), 0o644) }, "", "no such file"},
		{"mkdir over a dangling link", func(r string) error { return MkdirAll(r, "dangling/x", 0o755) }, "", "dangling"},
		{"remove a link, not its target", func(r string) error { return Remove(r, "absfile") }, "", ""},
		{"remove through a link", func(r string) error { return Remove(r, "abs/file") }, "", "no such file"},
		{"remove-all a link to a directory", func(r string) error { return RemoveAll(r, "abs") }, "", ""},
		{"remove-all through a link", func(r string) error { return RemoveAll(r, "rel/sub") }, "", ""},
		{"remove-all a tree holding links out", func(r string) error { return RemoveAll(r, "inside") }, "", ""},
		{"remove-all the root", func(r string) error { return RemoveAll(r, "abs/..") }, "", "the root itself"},
		{"rename onto a link replaces it", func(r string) error {
			if err := WriteFile(r, "inside/new", []byte("new"), 0o644); err != nil {
				return err
			}
			return Rename(r, "inside/new", "absfile")
		}, "absfile", ""},
		{"rename a link out moves the link", func(r string) error { return Rename(r, "abs", "inside/moved") }, "", ""},
		{"symlink through a link", func(r string) error { return Symlink("/etc", r, "abs/evil") }, "", "no such file"},
		{"copy a tree in through a link", func(r string) error { return CopyTree(r, "rel/fw", srcTree(t)) }, "", "no such file"},
		{"copy a tree over links out", func(r string) error { return CopyTree(r, "inside/dir", srcTree(t)) }, "", "no such file"},
		{"copy a host file in through a link", func(r string) error {
			src := filepath.Join(t.TempDir(), "src")
			os.WriteFile(src, []byte("new"), 0o644)
			return CopyFile(r, "rel/file", src, 0o644)
		}, "", "no such file"},
		{"mkdir through a link out", func(r string) error { return Mkdir(r, "abs/new", 0o755) }, "", "no such file"},
		{"mkdir over a dangling link", func(r string) error { return Mkdir(r, "dangling", 0o755) }, "", "file exists"},
		{"mkdir-temp through a link out", func(r string) error { _, err := MkdirTemp(r, "rel", ".tmp-*"); return err }, "", "no such file"},
		{"create through a link out", func(r string) error { _, err := CreateExcl(r, "abs/new", 0o644); return err }, "", "no such file"},
		{"create over a link to a file", func(r string) error { _, err := CreateExcl(r, "absfile", 0o644); return err }, "", "file exists"},
		{"create over a dangling link", func(r string) error { _, err := CreateExcl(r, "dangling", 0o644); return err }, "", "file exists"},
		{"lock a link to a file", func(r string) error { _, err := OpenLock(r, "absfile", true, 0o644); return err }, "", "it is a symlink"},
		{"lock a dangling link", func(r string) error { _, err := OpenLock(r, "dangling", true, 0o644); return err }, "", "it is a symlink"},
		{"lock through a link out", func(r string) error { _, err := OpenLock(r, "rel/lock", true, 0o644); return err }, "", "no such file"},
		{"lock a directory", func(r string) error { _, err := OpenLock(r, "inside", true, 0o644); return err }, "", "a directory"},
		{"lock made new", func(r string) error {
			f, err := OpenLock(r, "inside/lock", true, 0o644)
			if err == nil {
				_, err = f.WriteString("new")
				f.Close()
			}
			return err
		}, "inside/lock", ""},
		{"sync a directory through a link out", func(r string) error { return SyncDir(r, "rel") }, "", "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, victim := hostile(t)
			before := inroottest.Snapshot(t, victim)
			err := c.op(root)
			if got := inroottest.Snapshot(t, victim); got != before {
				t.Fatalf("the victim tree beside the root changed:\nbefore\n%s\nafter\n%s", before, got)
			}
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("err = %v, want none", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), root)):
				t.Fatalf("err = %v, want one saying %q and naming a path in %s", err, c.wantErr, root)
			}
			if c.in != "" {
				in := strings.ReplaceAll(c.in, "OUTSIDE", strings.TrimPrefix(victim, "/"))
				b, err := os.ReadFile(filepath.Join(root, in))
				if err != nil || string(b) != "new" {
					t.Errorf("%s in the root = %q, %v; want %q", in, b, err, "new")
				}
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	root, _ := tree(t, "d:etc")
	if err := WriteFile(root, "/etc/a", []byte("one"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(root, "etc/a", []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(root, "etc/a"))
	if b, _ := os.ReadFile(filepath.Join(root, "etc/a")); err != nil || string(b) != "two" || fi.Mode().Perm() != 0o600 {
		t.Errorf("etc/a = %q, mode %v (%v); want %q, 0600", b, fi.Mode(), err, "two")
	}
	// An aborted write leaves nothing.
	p, err := CreateTemp(root, "etc/b")
	if err != nil {
		t.Fatal(err)
	}
	p.Write([]byte("half"))
	p.Abort()
	p.Abort()
	if ents, _ := os.ReadDir(filepath.Join(root, "etc")); len(ents) != 1 {
		t.Errorf("etc after an aborted write holds %d entries, want 1 (a)", len(ents))
	}
	if err := p.Commit(0o644); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("Commit after Abort = %v, want ErrClosed", err)
	}
	// A directory in the way: the error names the file, nothing is left.
	if err := MkdirAll(root, "etc/dir/x", 0o755); err != nil {
		t.Fatal(err)
	}
	var pe *fs.PathError
	if err := WriteFile(root, "etc/dir", []byte("x"), 0o644); !errors.As(err, &pe) || pe.Path != filepath.Join(root, "etc/dir") {
		t.Errorf("WriteFile over a directory = %v, want a PathError naming %s", err, filepath.Join(root, "etc/dir"))
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "etc")); len(ents) != 2 {
		t.Errorf("etc after a failed write holds %d entries, want 2", len(ents))
	}
	// Remove takes an empty directory too; RemoveAll a missing name is no error.
	if err := Remove(root, "etc/dir/x"); err != nil {
		t.Error(err)
	}
	if err := RemoveAll(root, "etc/none/x"); err != nil {
		t.Errorf("RemoveAll of a missing name = %v", err)
	}
	if err := Remove(root, "etc/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove of a missing name = %v, want ErrNotExist", err)
	}
}

func TestCopyFileRegularOnly(t *testing.T) {
	root, _ := tree(t, "d:boot")
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CopyFile(root, "boot/x", fifo, 0o644); !errors.Is(err, ErrNotRegular) {
		t.Errorf("CopyFile of a FIFO = %v, want ErrNotRegular", err)
	}
}

func TestResolve(t *testing.T) {
	root, _ := tree(t, "d:usr/lib/modules/k", "l:lib=usr/lib", "l:out=OUTSIDE")
	if got, err := Resolve(root, "/lib/modules/k"); err != nil || got != filepath.Join(root, "usr/lib/modules/k") {
		t.Errorf("Resolve = %q, %v", got, err)
	}
	if _, err := Resolve(root, "out/secret"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Resolve through a link out = %v, want ErrNotExist", err)
	}
}

// srcTree makes a tree to copy in: a/ holding a file "new" (0755) and the
// links out and outfile, which replace the root's links of those names.
func srcTree(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "out/a"), []byte("new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "outfile")); err != nil {
		t.Fatal(err)
	}
	return src
}

func TestCopyTree(t *testing.T) {
	root, _ := tree(t, "l:lib=usr/lib", "d:usr/lib", "f:usr/lib/firmware/old=old")
	src := srcTree(t)
	if err := CopyTree(root, "lib/firmware", src); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(root, "usr/lib/firmware/out/a"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("usr/lib/firmware/out/a: %v, %v; want mode 0755", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(root, "usr/lib/firmware/outfile")); err != nil || l != "/etc/passwd" {
		t.Errorf("link = %q, %v", l, err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "lib")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the root's lib link was replaced: %v %v", fi, err)
	}
}
