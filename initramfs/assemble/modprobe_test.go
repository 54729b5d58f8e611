package assemble

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/initramfs/archive"
	"github.com/kpreload/kpreload/initramfs/modprobe"
)

// TestNoModuleHelperLink: the archive, unpacked by the real cpio, has no
// /sbin/modprobe, only the directory /init makes it in: the kernel runs that
// helper for its own requests before /init starts too, each run a start of
// the Go binary that serves none of them (modprobe.HelperPath).
func TestNoModuleHelperLink(t *testing.T) {
	kver := "6.1.0-56-cloud-amd64"
	o := Options{Kernel: kver, ModulesDir: filepath.Join(kernelRoot(t, kver), "lib/modules", kver), Init: fakeInit(t),
		Filesystems: []string{"ext4"}, Compression: archive.None}
	var buf bytes.Buffer
	if _, err := Build(o, &buf); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("cpio", "-idm", "--quiet", "--no-absolute-filenames")
	cmd.Dir, cmd.Stdin = dir, &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio: %v\n%s", err, out)
	}
	if _, err := os.Lstat(filepath.Join(dir, modprobe.HelperPath)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s in the archive (%v), want none: /init makes it", modprobe.HelperPath, err)
	}
	if st, err := os.Stat(filepath.Join(dir, filepath.Dir(modprobe.HelperPath))); err != nil || !st.IsDir() {
		t.Errorf("%s: %v, want a directory", filepath.Dir(modprobe.HelperPath), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "init")); err != nil {
		t.Errorf("no /init in the archive: %v", err)
	}
}
