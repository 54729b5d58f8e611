package image

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/recipe"
)

// debFileName is the file name pattern apt gives a package's .deb
// ("name_version_arch.deb", the epoch's ':' written as "%3a").
func debFileName(name, version, arch string) string {
	return name + "_" + strings.ReplaceAll(version, ":", "%3a") + "_" + arch + ".deb"
}

// downloadDeb returns the .deb of a pinned package ("name=version") in dir,
// fetching it with apt-get download (the host's apt sources) when it is not
// there. Pinned versions never change, so a .deb found there is the right one.
func downloadDeb(ctx context.Context, ref, dir string) (string, error) {
	name, version, ok := recipe.SplitPackage(ref)
	if !ok {
		return "", fmt.Errorf("package %q: want name=version", ref)
	}
	if found, _ := filepath.Glob(filepath.Join(dir, debFileName(name, version, "*"))); len(found) > 0 {
		return found[0], nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, ".tmp-download-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "apt-get", "download", "-q", name+"="+version)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s=%s: %w: %s (is the package's component enabled in the apt sources? scripts/deps.sh enables contrib, non-free and non-free-firmware)", name, version, err, bytes.TrimSpace(out))
	}
	got, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(got) != 1 {
		return "", fmt.Errorf("apt-get download %s=%s: got %d .deb files, want 1", name, version, len(got))
	}
	dst := filepath.Join(dir, filepath.Base(got[0]))
	if err := os.Rename(got[0], dst); err != nil {
		return "", err
	}
	return dst, nil
}

// dpkgExtract unpacks a .deb's files into dir with dpkg -x (no maintainer
// scripts, nothing registered with dpkg).
func dpkgExtract(ctx context.Context, deb, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "dpkg", "-x", deb, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg -x %s: %w: %s", deb, err, bytes.TrimSpace(out))
	}
	return nil
}
