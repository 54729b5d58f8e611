package bootloader

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/internal/fileutil"
)

// SystemdBootFiles lays out systemd-boot's ESP in dir through builder/install (the same door the
// kernel hooks use on the running image: loader.conf, one entry, image and
// kpreload initramfs per kernel, the first kernel the default) and returns
// every file to copy onto the ESP, systemd-boot's binaries included.
func SystemdBootFiles(ctx context.Context, dir, root string, kernels []string, cmdline string) ([]disk.File, error) {
	for _, k := range kernels {
		if _, err := os.Stat(filepath.Join(root, install.KernelImagePath(k))); err != nil {
			return nil, fmt.Errorf("kernel %s: %w (did linux-image-%s install?)", k, err, k)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, install.ESPEntriesDir), 0o755); err != nil {
		return nil, err
	}
	if _, err := install.Install(ctx, install.Options{
		Root: root, ESP: dir, Bootloader: install.SystemdBoot, Kernels: kernels,
		Default: kernels[0], Cmdline: cmdline, SkipInitramfs: true,
	}); err != nil {
		return nil, err
	}
	files := []disk.File{
		{Src: SystemdBootEFI, Dst: install.ESPBootloader},
		{Src: SystemdBootEFI, Dst: install.ESPSystemdBoot},
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		files = append(files, disk.File{Src: p, Dst: filepath.ToSlash(rel)})
		return err
	})
	return files, err
}

// GrubFiles sets up GRUB in root: /etc/default/grub, GRUB's images and
// modules, and grub.cfg through builder/install (whose /etc/grub.d script
// puts kpreload's entries first); it returns the ESP's files (GRUB's UEFI
// image as the removable-media loader) and core.img for the BIOS boot
// partition.
func GrubFiles(ctx context.Context, g Grub, work, root, rootUUID, cmdline string, kpreload bool) ([]disk.File, string, error) {
	if err := fileutil.WriteAtomicAll(filepath.Join(root, "etc/default/grub"), []byte(defaultGrub(cmdline)), 0o644, false); err != nil {
		return nil, "", err
	}
	core, err := grubImages(ctx, g, root, rootUUID, work)
	if err != nil {
		return nil, "", err
	}
	update := buildRootUpdateGrub(g, rootUUID)
	if !kpreload {
		// A plain image: GRUB's own entries, the distribution's initramfs.
		err = update(ctx, root, io.Discard)
	} else {
		_, err = install.Install(ctx, install.Options{Root: root, Bootloader: install.GRUB, SkipInitramfs: true, UpdateGrub: update})
	}
	if err != nil {
		return nil, "", err
	}
	esp, err := shimESP(root, work, rootUUID)
	return esp, core, err
}
