package bootloader

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/install"
)

// TestSystemdBootFiles lays out systemd-boot's ESP for a root with one
// kernel through builder/install: systemd-boot as the removable-media loader
// and as itself, one entry with the command line, the kernel; a kernel the
// root lacks is an error naming its package.
func TestSystemdBootFiles(t *testing.T) {
	ctx := context.Background()
	const k = "6.1.0-56-cloud-amd64"
	root := t.TempDir()
	for p, s := range map[string]string{
		install.KernelImagePath(k):          "kernel",
		"lib/modules/" + k + "/modules.dep": "",
		install.InitramfsPath(k):            "initramfs",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	files, err := SystemdBootFiles(ctx, dir, root, []string{k}, "root=UUID=x rw console=ttyS0")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		got[f.Dst] = f.Src
	}
	if got[install.ESPBootloader] != SystemdBootEFI || got[install.ESPSystemdBoot] != SystemdBootEFI {
		t.Errorf("ESP files %v: want systemd-boot as %s and %s", got, install.ESPBootloader, install.ESPSystemdBoot)
	}
	var entry string
	for dst, src := range got {
		if strings.HasPrefix(dst, install.ESPEntriesDir+"/") {
			b, _ := os.ReadFile(src)
			entry += string(b)
		}
	}
	if !strings.Contains(entry, "root=UUID=x rw console=ttyS0") || !strings.Contains(entry, k) {
		t.Errorf("loader entries %q, want one for %s with the command line", entry, k)
	}
	if _, err := SystemdBootFiles(ctx, t.TempDir(), root, []string{"6.1.0-99-cloud-amd64"}, ""); err == nil || !strings.Contains(err.Error(), "did linux-image-6.1.0-99-cloud-amd64 install?") {
		t.Errorf("a kernel the root lacks: err = %v", err)
	}
}
