package stage

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/initramfs/rootfs"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestImageRootIsWhatMkfsMakes makes a root filesystem the way writeDisk
// makes one (the host's mkfs.ext4, its defaults) and checks that imageRoot,
// which the initramfs must mount, says what its superblock says.
func TestImageRootIsWhatMkfsMakes(t *testing.T) {
	img := filepath.Join(t.TempDir(), "root.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", "root", "-U", disk.NewUUID(), "-d", t.TempDir(), img, "65536k").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s (install e2fsprogs: scripts/deps.sh)", err, out)
	}
	fstype, features, err := rootfs.ReadFeatures(img)
	if err != nil || fstype != imageRoot.FSType || !slices.Equal(features, imageRoot.Features) {
		t.Errorf("mkfs.ext4 made %s %q (%v); imageRoot says %s %q", fstype, features, err, imageRoot.FSType, imageRoot.Features)
	}
}

// TestStageRefusesUnmountableRoot stages an image for bookworm's generic
// kernel whose module tree lacks ext4 (a copy of the real one without it):
// the image's ext4 root could not be mounted, so Stage stops, saying what
// the initramfs lacks, before any initramfs is written (and before the boot
// loader, which Build sets up after Stage).
func TestStageRefusesUnmountableRoot(t *testing.T) {
	const k = "6.1.0-56-amd64"
	real := filepath.Join(testenv.KernelTreeOrSkipShort(t, k), "lib/modules", k)
	mods := filepath.Join(t.TempDir(), k)
	if err := os.MkdirAll(mods, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(real, "kernel"), filepath.Join(mods, "kernel")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"modules.dep", "modules.alias", "modules.softdep", "modules.builtin", "modules.builtin.modinfo"} {
		b, err := os.ReadFile(filepath.Join(real, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "modules.dep" {
			var kept []string
			for _, l := range strings.SplitAfter(string(b), "\n") {
				if !strings.HasPrefix(l, "kernel/fs/ext4/ext4.ko:") {
					kept = append(kept, l)
				}
			}
			b = []byte(strings.Join(kept, ""))
		}
		if err := os.WriteFile(filepath.Join(mods, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	_, err := Stage(context.Background(), Options{
		Kernels: []string{k}, CacheDir: t.TempDir(), DownloadDir: t.TempDir(), KpreloadBinary: bin, InitBinary: bin,
		ModulesDir: func(string) string { return mods },
	}, root)
	for _, want := range []string{"cannot mount the root, ext4 (metadata_csum) on the image's root partition", "lacks ext4 (fs-ext4)", "crc32c_intel or crc32c_generic (crypto-crc32c)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Stage with a kernel without ext4: %v\nwant an error saying %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "scripts/kernels.sh") {
		t.Errorf("Stage error %q sends the user to fetch a kernel that is there", err)
	}
	if _, err := os.Stat(filepath.Join(root, install.InitramfsPath(k))); err == nil {
		t.Errorf("an initramfs that cannot mount the root was written")
	}
}
