package bootloader

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/internal/sandbox/sandboxtest"
	"github.com/kpreload/kpreload/testsupport/dibtest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestGrubToolsSandboxed plants a hostile static program as the root's
// grub-mkimage and grub-mkconfig, which an image build runs: each runs, and
// nothing it writes, the chroot escape included, lands on the host.
func TestGrubToolsSandboxed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs the root's GRUB tools as the image build does, as root: it needs root")
	}
	root := grubRoot(t)
	esc := sandboxtest.Plant(t, root, "usr/bin/grub-mkimage", "usr/sbin/grub-mkconfig")
	ctx := context.Background()
	if err := (Host{}).MkImage(ctx, root, "-O", "i386-pc", "-o", "/tmp/core.img"); err != nil {
		t.Errorf("grub-mkimage: %v", err)
	}
	esc.Check(t, "grub-mkimage")
	update := buildRootUpdateGrub(Host{}, "0b0e0f0a-1111-4222-8333-444444444444")
	if err := update(ctx, root, nil); err != nil {
		t.Errorf("grub-mkconfig: %v", err)
	}
	esc.Check(t, "grub-mkconfig")
}

// TestRealGrubToolsSandboxed runs a real Debian 12 root's grub-mkimage and
// grub-mkconfig (dibtest.GrubRoot, mounted from a copy) as an image build
// does, in the root's sandbox: core.img is made, and grub.cfg's Linux entry
// names the root by the build's UUID (10_linux found /dev/disk/by-uuid's
// link, grubDevLinks, in the sandbox's /dev).
func TestRealGrubToolsSandboxed(t *testing.T) {
	testenv.SkipShort(t, "mmdebstrap of a Debian root with GRUB (a download), once per machine")
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (a loop mount, the sandbox)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 20*time.Minute))
	defer cancel()
	img := filepath.Join(t.TempDir(), "debian.raw")
	dibtest.Copy(t, dibtest.GrubRoot(ctx, t), img)
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, root).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", root).Run() })
	const uuid = "0b0e0f0a-1111-4222-8333-444444444444"
	const kernel = "6.1.0-56-amd64"
	// A stand-in kernel with an initramfs (without one, 10_linux names
	// the device, not the UUID), and a stand-in for the UEFI modules'
	// package (the real root has GRUB's BIOS modules only).
	for p, s := range map[string]string{"boot/vmlinuz-" + kernel: "kernel", "boot/initrd.img-" + kernel: "initramfs",
		"etc/default/grub": defaultGrub("console=ttyS0"), "usr/lib/grub/x86_64-efi/normal.mod": ""} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	core, err := grubImages(ctx, Host{}, root, uuid, t.TempDir())
	if err != nil {
		t.Fatalf("grub-mkimage: %v", err)
	}
	if fi, err := os.Stat(core); err != nil || fi.Size() < 16<<10 {
		t.Errorf("core.img: %v, want GRUB's BIOS core image", err)
	}
	if err := buildRootUpdateGrub(Host{}, uuid)(ctx, root, nil); err != nil {
		t.Fatalf("grub-mkconfig: %v", err)
	}
	cfg, err := os.ReadFile(filepath.Join(root, install.GrubConfig))
	if err != nil {
		t.Fatal(err)
	}
	if want := "linux\t/boot/vmlinuz-" + kernel + " root=UUID=" + uuid + " ro "; !strings.Contains(string(cfg), want) {
		t.Errorf("grub.cfg lacks %q:\n%s", want, cfg)
	}
	if b, err := os.ReadFile(filepath.Join(root, "usr/sbin/grub-probe")); err != nil || strings.Contains(string(b), "kpreload image build") {
		t.Errorf("the root's grub-probe was not put back: %v", err)
	}
}
