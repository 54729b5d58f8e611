package archive

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// realKernel is one of the Debian cloud kernels unpacked by scripts/kernels.sh.
const realKernel = "6.1.0-56-cloud-amd64"

func realModulesDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(testenv.KernelTree(t, realKernel), "lib/modules", realKernel)
}

// TestAddTreeRealModules copies a real kernel's virtio drivers and checks that GNU
// cpio extracts the very same files.
func TestAddTreeRealModules(t *testing.T) {
	src := filepath.Join(realModulesDir(t), "kernel/drivers/virtio")
	prefix := "lib/modules/" + realKernel + "/kernel/drivers/virtio"
	a := New()
	if err := a.AddTree(prefix, src); err != nil {
		t.Fatalf("AddTree(%q, %s) = %v", prefix, src, err)
	}
	if !a.Has(prefix + "/virtio_pci.ko") {
		t.Fatalf("AddTree did not add virtio_pci.ko; entries: %v", a.Entries())
	}
	dir, _ := extract(t, decompress(t, encode(t, a, Zstd), Zstd))
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) == 0 {
		t.Fatalf("%s is empty", src)
	}
	for _, e := range ents {
		want, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, prefix, e.Name()))
		if err != nil {
			t.Errorf("extracted archive lacks %s: %v", e.Name(), err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("extracted %s: sha256 %s, want %s", e.Name(), sum(got), sum(want))
		}
	}
}

// TestAddTreeRealModulesBuildLink: a real module tree has absolute build and
// source symlinks into /usr/src, which AddTree must refuse by name.
func TestAddTreeRealModulesBuildLink(t *testing.T) {
	src := realModulesDir(t)
	a := New()
	err := a.AddTree("lib/modules/"+realKernel, src)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(src, "build")+" -> /usr/src/") {
		t.Errorf("AddTree(whole module tree) = %v, want an error naming the absolute build symlink", err)
	}
	if got := a.Entries(); len(got) != 0 {
		t.Errorf("failed AddTree left %d entries, want 0", len(got))
	}
}

func TestAddTree(t *testing.T) {
	src := t.TempDir()
	mk := func(p string, mode fs.FileMode, data string) {
		t.Helper()
		full := filepath.Join(src, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, mode); err != nil {
			t.Fatal(err)
		}
	}
	mk("bin/tool", 0o755, "tool")
	mk("etc/conf", 0o640, "conf")
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../bin/tool", filepath.Join(src, "etc/tool")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("bin", filepath.Join(src, "sbin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(src, 0o700); err != nil {
		t.Fatal(err)
	}

	a := New()
	if err := a.AddTree("opt/x", src); err != nil {
		t.Fatalf("AddTree: %v", err)
	}
	var got []string
	for _, e := range a.Entries() {
		got = append(got, e.Name+" "+e.Mode.String()+" "+e.Target)
	}
	want := []string{
		"opt drwxr-xr-x ",
		"opt/x drwxr-xr-x ",
		"opt/x/bin drwxr-xr-x ",
		"opt/x/bin/tool -rwxr-xr-x ",
		"opt/x/empty drwx------ ",
		"opt/x/etc drwxr-xr-x ",
		"opt/x/etc/conf -rw-r----- ",
		"opt/x/etc/tool Lrwxrwxrwx ../bin/tool",
		"opt/x/sbin Lrwxrwxrwx bin",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("AddTree entries =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Adding the same tree again is a no-op.
	if err := a.AddTree("opt/x", src); err != nil {
		t.Errorf("AddTree again = %v, want nil", err)
	}
}

func TestAddTreeRejects(t *testing.T) {
	tests := []struct {
		desc    string
		setup   func(t *testing.T, src string)
		wantErr string
	}{
		{"absolute symlink", func(t *testing.T, src string) {
			symlink(t, "/etc/passwd", filepath.Join(src, "passwd"))
		}, "passwd -> /etc/passwd points outside the tree (absolute target)"},
		{"relative symlink out", func(t *testing.T, src string) {
			mkdir(t, filepath.Join(src, "d"))
			symlink(t, "../../x", filepath.Join(src, "d/l"))
		}, "d/l -> ../../x points outside the tree"},
		{"symlink to the tree's parent", func(t *testing.T, src string) {
			symlink(t, "..", filepath.Join(src, "up"))
		}, "up -> .. points outside the tree"},
		{"chain out through another link", func(t *testing.T, src string) {
			mkdir(t, filepath.Join(src, "d"))
			// d/x looks inside lexically, but y (walked after d) leads out.
			symlink(t, "../y/etc", filepath.Join(src, "d/x"))
			symlink(t, "/", filepath.Join(src, "y"))
		}, "d/x -> ../y/etc points outside the tree (resolves to /etc)"},
		{"fifo", func(t *testing.T, src string) {
			if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "pipe: unsupported file type"},
		{"char device", func(t *testing.T, src string) {
			if err := unix.Mknod(filepath.Join(src, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
				t.Fatalf("mknod (needs root): %v", err)
			}
		}, "null: unsupported file type"},
	}
	for _, tt := range tests {
		src := t.TempDir()
		if err := os.WriteFile(filepath.Join(src, "a"), []byte("a"), 0o644); err != nil {
			t.Fatal(err)
		}
		tt.setup(t, src)
		a := New()
		if err := a.AddFile("init", 0o755, nil); err != nil {
			t.Fatal(err)
		}
		before := a.Entries()
		err := a.AddTree("t", src)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: AddTree = %v, want an error containing %q", tt.desc, err, tt.wantErr)
		}
		if after := a.Entries(); !reflect.DeepEqual(after, before) {
			t.Errorf("%s: failed AddTree changed the entries to %v, want %v", tt.desc, after, before)
		}
	}
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
}
