package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGrubEntriesNeverFails: grub-entries runs inside grub-mkconfig, which
// must finish with the distribution's entries: a bad boot.yaml is a warning
// (the entries still come, by the default policy), a root it cannot read
// is a warning and no entry; the exit status is 0 either way.
func TestGrubEntriesNeverFails(t *testing.T) {
	const k = "6.1.0-56-cloud-amd64"
	root := t.TempDir()
	for p, s := range map[string]string{
		"boot/vmlinuz-" + k: "k", "boot/kpreload/initrd.img-" + k: "i", "etc/kpreload/boot.yaml": "default: [\nbogus",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runCLI("kernel-hook", "grub-entries", "--root", root)
	if code != 0 || !strings.Contains(out, "menuentry '") || !strings.Contains(errOut, filepath.Join(root, "etc/kpreload/boot.yaml")) {
		t.Errorf("grub-entries with a bad boot.yaml: exit %d\nstdout %s\nstderr %s\nwant 0, the entries, a warning naming the file", code, out, errOut)
	}
	code, out, errOut = runCLI("status", "--root", root)
	if code != 0 || !strings.Contains(errOut, "WARNING") || !strings.Contains(out, "default: "+k) {
		t.Errorf("status with a bad boot.yaml: exit %d\nstdout %s\nstderr %s\nwant 0, the default kernel, a warning", code, out, errOut)
	}
	// /boot is a file: the kernels cannot be listed.
	if err := os.RemoveAll(filepath.Join(root, "boot")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "boot"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI("kernel-hook", "grub-entries", "--root", root)
	if code != 0 || out != "" || !strings.Contains(errOut, "WARNING") {
		t.Errorf("grub-entries on an unreadable /boot: exit %d\nstdout %q\nstderr %s\nwant 0, nothing printed, a warning", code, out, errOut)
	}
}

// TestInstallRootFilesystem: a root whose filesystem cannot be told (a
// directory on tmpfs) is refused, naming the filesystem and the flag that
// names the one it boots from; that flag takes only filesystems /init mounts.
func TestInstallRootFilesystem(t *testing.T) {
	root := t.TempDir()
	if err := unix.Mount("kpreload-test", root, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v (this test needs root)", err)
	}
	t.Cleanup(func() { unix.Unmount(root, 0) })
	if err := os.MkdirAll(filepath.Join(root, "boot/efi/loader"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "boot/efi/loader/loader.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI("install", "--root", root, "--kernel", "6.1.0-56-cloud-amd64")
	if code == 0 || !strings.Contains(errOut, "tmpfs") || !strings.Contains(errOut, "--root-filesystem") {
		t.Errorf("install into a root on tmpfs: exit %d, stderr %s\nwant a failure naming tmpfs and --root-filesystem", code, errOut)
	}
	code, _, errOut = runCLI("install", "--root", root, "--kernel", "6.1.0-56-cloud-amd64", "--root-filesystem", "zfs")
	if code == 0 || !strings.Contains(errOut, "--root-filesystem") || !strings.Contains(errOut, "btrfs, ext4, iso9660, vfat, xfs") {
		t.Errorf("install --root-filesystem zfs: exit %d, stderr %s\nwant a failure listing what /init mounts", code, errOut)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "etc")); len(ents) > 0 {
		t.Errorf("refused installs wrote %v into the root's /etc", ents)
	}
}
