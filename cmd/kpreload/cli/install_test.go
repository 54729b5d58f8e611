package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
