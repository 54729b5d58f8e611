package dibtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GrubRootUUID is the filesystem UUID of GrubRoot's image.
const GrubRootUUID = "5a1e0b0c-2222-4333-8444-555555555555"

// GrubRootPackages are what GrubRoot's root holds beyond mmdebstrap's
// minbase: GRUB's BIOS modules, grub-mkimage, update-grub, grub-probe and
// grub-mkconfig.
var GrubRootPackages = []string{"grub-pc-bin", "grub2-common"}

// GrubRoot returns an ext4 filesystem image (no partition table, UUID
// GrubRootUUID) of a Debian 12 root made by mmdebstrap with
// GrubRootPackages, made once per machine and kept under
// $KPRELOAD_CACHE/grubroot/<key>/debian.raw (Cached); it has no kernel.
// Callers change a copy (Copy), never the image itself.
func GrubRoot(ctx context.Context, t testing.TB) string {
	t.Helper()
	h := sha256.Sum256([]byte(fmt.Sprintf("bookworm minbase %q ext4 %s", GrubRootPackages, GrubRootUUID)))
	return Cached(ctx, t, "grubroot", hex.EncodeToString(h[:])[:16], func(dir, out string, log *os.File) error {
		tree := filepath.Join(dir, "tree")
		os.RemoveAll(tree)
		defer os.RemoveAll(tree)
		for _, argv := range [][]string{
			{"mmdebstrap", "--variant=minbase", "--include=" + strings.Join(GrubRootPackages, ","), "bookworm", tree, "http://deb.debian.org/debian"},
			{"mkfs.ext4", "-q", "-F", "-U", GrubRootUUID, "-d", tree, filepath.Join(out, "debian.raw"), "1G"},
		} {
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Stdout, cmd.Stderr = log, log
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s: %w", argv[0], err)
			}
		}
		return nil
	})
}
