package bootloader

import (
	"context"
	"os"
	"testing"

	"github.com/kpreload/kpreload/builder/internal/sandbox/sandboxtest"
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
