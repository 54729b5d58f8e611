package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/internal/fileutil"
)

// espFiles lays out the ESP in dir through builder/install (the same door the
// kernel hooks use on the running image: loader.conf, one entry, image and
// kpreload initramfs per kernel, the first kernel the default) and returns
// every file to copy onto the ESP, systemd-boot's binaries included.
func espFiles(ctx context.Context, dir, root string, kernels []string, cmdline string) ([]espFile, error) {
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
	files := []espFile{
		{Src: SystemdBootEFI, Dst: install.ESPBootloader},
		{Src: SystemdBootEFI, Dst: install.ESPSystemdBoot},
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		files = append(files, espFile{Src: p, Dst: filepath.ToSlash(rel)})
		return err
	})
	return files, err
}

// grubFiles sets up GRUB in root: /etc/default/grub, GRUB's images and
// modules, and grub.cfg through builder/install (whose /etc/grub.d script
// puts kpreload's entries first); it returns the ESP's files (GRUB's UEFI
// image as the removable-media loader) and core.img for the BIOS boot
// partition.
func grubFiles(ctx context.Context, g Grub, work, root, rootUUID, cmdline string, kpreload bool) ([]espFile, string, error) {
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

// digest returns a file's size and SHA-256.
func digest(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("digest %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ReadManifest reads a manifest Build wrote.
func ReadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("image manifest %s: %w", path, err)
	}
	return &m, nil
}
