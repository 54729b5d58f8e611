package stage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/inroot"
)

// downloadDeb returns the .deb of a pinned package ("name=version") of
// recipe r in dir, fetching it from the recipe's suite (builder/archive's
// private apt configuration under cache) when dir does not have it. Pinned versions never change, so a .deb
// found there is the right one; a version the suite lacks is refused, naming
// what it has.
func downloadDeb(ctx context.Context, r *recipe.Recipe, ref, dir, cache string) (string, error) {
	name, version, ok := recipe.SplitPackage(ref)
	if !ok {
		return "", fmt.Errorf("package %q: want name=version", ref)
	}
	a, err := r.Archive(cache)
	if err != nil {
		return "", err
	}
	return a.Download(ctx, name, version, dir)
}

// extractFirmware unpacks a firmware package's files into root/lib/firmware,
// where the kernel looks for them (its search path is /lib/firmware, never
// /usr/lib/firmware). Trixie's packages ship usr/lib/firmware, bookworm's
// lib/firmware: both land in root/lib/firmware, which on a merged-/usr root
// (lib -> usr/lib) is usr/lib/firmware, and on a plain directory is a real
// lib/firmware. The package's other files (documentation) are left out.
func extractFirmware(ctx context.Context, dpkg Dpkg, deb, root string) error {
	tmp, err := os.MkdirTemp("", "kpreload-firmware-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := dpkg.Extract(ctx, deb, tmp); err != nil {
		return err
	}
	found := false
	for _, dir := range []string{"lib/firmware", "usr/lib/firmware"} {
		src := filepath.Join(tmp, dir)
		if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
			continue
		}
		found = true
		// Into the root's lib/firmware, resolved inside the root (a
		// merged-/usr lib link is followed there, never out of it).
		if err := inroot.CopyTree(root, "lib/firmware", src); err != nil {
			return fmt.Errorf("firmware %s: %w", deb, err)
		}
	}
	if !found {
		return fmt.Errorf("firmware package %s has no lib/firmware or usr/lib/firmware", deb)
	}
	return nil
}
