package install

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// genericKernel is bookworm's generic kernel: ext4, jbd2 and crc32c are
// modules there (the cloud kernel builds them in).
const genericKernel = "6.1.0-56-amd64"

// ext4Root makes a real ext4 filesystem as mkfs.ext4 makes it (with
// metadata_csum), mounts it from a loop device and returns the mount point
// and the device, undone when the test ends. It needs root and loop devices.
func ext4Root(t *testing.T) (dir, dev string) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "root.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	sh := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s (install e2fsprogs and util-linux: scripts/deps.sh)", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	sh("mkfs.ext4", "-q", "-F", img)
	dev = sh("losetup", "-f", "--show", img)
	t.Cleanup(func() { sh("losetup", "-d", dev) })
	dir = t.TempDir()
	if err := unix.Mount(dev, dir, "ext4", 0, ""); err != nil {
		t.Fatalf("mount %s on %s: %v (this test needs root and loop devices)", dev, dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, 0) })
	return dir, dev
}

// snapshot returns every path under root with its mode and content.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[strings.TrimPrefix(p, root)] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInstallRefusesUnmountableRoot: kpreload install into a root on a real
// ext4 filesystem (metadata_csum), with the generic kernel, whose initramfs
// would carry only vfat's modules, fails saying what is missing (ext4, and
// the crc32c its metadata_csum needs) and leaves the root, its boot loader
// included, as it was; with every filesystem's modules it installs.
func TestInstallRefusesUnmountableRoot(t *testing.T) {
	modules := filepath.Join(testenv.KernelTreeOrSkipShort(t, genericKernel), "lib/modules", genericKernel)
	init, err := os.ReadFile(testInit(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, bl := range []Bootloader{SystemdBoot, GRUB} {
		t.Run(string(bl), func(t *testing.T) {
			root, dev := ext4Root(t)
			files := map[string]string{
				"boot/vmlinuz-" + genericKernel: "kernel", Init: string(init), Cmdline: "root=UUID=x rw\n",
				"boot/efi/loader/loader.conf":         "default debian.conf\ntimeout 3\n",
				"boot/efi/loader/entries/debian.conf": "title debian\n",
				"boot/grub/grub.cfg":                  grubHeader,
				"etc/grub.d/10_linux":                 "#!/bin/sh\n",
				"usr/sbin/update-grub":                "",
			}
			if bl == GRUB {
				delete(files, "boot/efi/loader/loader.conf")
				delete(files, "boot/efi/loader/entries/debian.conf")
			}
			for p, s := range files {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			updated := false
			var log bytes.Buffer
			o := Options{
				Root: root, Bootloader: bl, Kernels: []string{genericKernel}, Log: &log,
				ModulesDir:  func(string) string { return modules },
				Filesystems: []string{"vfat"},
				UpdateGrub: func(ctx context.Context, root string, w io.Writer) error {
					updated = true
					return chrootUpdateGrub(ctx, root, w)
				},
			}
			before := snapshot(t, root)
			_, err := Install(context.Background(), o)
			t.Logf("install: %v", err)
			for _, want := range []string{
				"cannot mount the root, ext4 (metadata_csum) on " + dev,
				"lacks ext4 (fs-ext4) (ext4's module)",
				"crc32c_intel or crc32c_generic (crypto-crc32c) (ext4's metadata_csum)",
				"needs ext4 among its --filesystems",
			} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("install of a vfat-only initramfs into an ext4 root: %v\nwant an error saying %q", err, want)
				}
			}
			if updated {
				t.Error("update-grub ran")
			}
			after := snapshot(t, root)
			// Install holds the hook lock while it runs: the empty lock
			// file and its directories are no change to the root's boot.
			for p := HookLock; p != "."; p = filepath.Dir(p) {
				if _, was := before["/"+p]; !was {
					delete(after, "/"+p)
				}
			}
			for p, v := range after {
				if before[p] != v {
					t.Errorf("refused install changed %s (%.40q, was %.40q)", p, v, before[p])
				}
			}
			for p := range before {
				if _, ok := after[p]; !ok {
					t.Errorf("refused install removed %s", p)
				}
			}

			// With every filesystem's modules, the same install goes through.
			o.Filesystems = nil
			if _, err := Install(context.Background(), o); err != nil {
				t.Fatalf("install with every filesystem's modules: %v\n%s", err, log.String())
			}
			if _, err := os.Stat(filepath.Join(root, InitramfsPath(genericKernel))); err != nil {
				t.Errorf("no kpreload initramfs after the install: %v", err)
			}
		})
	}
}
