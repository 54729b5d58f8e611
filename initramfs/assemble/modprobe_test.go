package assemble

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/initramfs/archive"
)

// TestModuleHelperLink: the kernel's request_module() runs /sbin/modprobe,
// which in the initramfs, unpacked by the real cpio, is a link to /init.
func TestModuleHelperLink(t *testing.T) {
	kver := "6.1.0-56-cloud-amd64"
	init := fakeInit(t)
	o := Options{Kernel: kver, ModulesDir: filepath.Join(kernelRoot(t, kver), "lib/modules", kver), Init: init,
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
	if got, err := os.Readlink(filepath.Join(dir, "sbin/modprobe")); err != nil || got != "../init" {
		t.Fatalf("sbin/modprobe links to %q (%v), want ../init", got, err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "sbin/modprobe"))
	want, _ := os.ReadFile(init)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("sbin/modprobe reads %q (%v), want /init's content %q", got, err, want)
	}
}
