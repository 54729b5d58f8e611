package matrix

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/recipe"
)

// kernel is one kernel of the matrix, unpacked and inspected.
type kernel struct {
	// headersDir is <root>/usr/src/linux-headers-<release>.
	headersDir string
	// headers is what dkms.InspectHeaders read from headersDir.
	headers *dkms.Headers
	// sourceDir is the kernel source tree the headers' build directory was
	// made from (Debian's linux-headers-<x>-common, named by the
	// lib/modules/<release>/source link), inside the unpacked root; "" when
	// there is no such link.
	sourceDir string
	// modulesTree is <root>/lib/modules/<release> when it has modules.dep
	// (for the store's dependency check), else "".
	modulesTree string
	// symvers and config are the SHA-256 of Module.symvers and .config.
	symvers, config string
	// headersPackage is the Version of the linux-headers .deb, or "unknown".
	headersPackage string
	// compiler is the first line of "$CC --version" for the kernel's own
	// compiler, or "" when the kernel was not built with gcc.
	compiler string
}

// prepareKernel makes sure kernel release is unpacked under
// downloads/kernels/<release> (running script, scripts/kernels.sh, when it is
// not) and reads what the cache key needs from its headers.
func prepareKernel(ctx context.Context, release, downloads, script string) (*kernel, error) {
	root := filepath.Join(downloads, "kernels", release)
	if _, err := os.Stat(filepath.Join(root, ".complete")); err != nil {
		if script == "" {
			return nil, fmt.Errorf("kernel %s is not unpacked in %s and no kernels.sh script is known: run scripts/kernels.sh %s", release, root, release)
		}
		if err := runKernelsScript(ctx, script, release, downloads); err != nil {
			return nil, err
		}
	}
	k := &kernel{headersDir: filepath.Join(root, "usr", "src", "linux-headers-"+release)}
	h, err := dkms.InspectHeaders(k.headersDir)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", release, err)
	}
	if h.Release != release {
		return nil, fmt.Errorf("kernel %s: headers %s are for kernel %s", release, k.headersDir, h.Release)
	}
	k.headers = h
	if k.symvers, err = fileDigest(filepath.Join(k.headersDir, "Module.symvers")); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", release, err)
	}
	if k.config, err = fileDigest(filepath.Join(k.headersDir, ".config")); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", release, err)
	}
	tree := filepath.Join(root, "lib", "modules", release)
	if exists(filepath.Join(tree, "modules.dep")) {
		k.modulesTree = tree
	}
	if target, err := os.Readlink(filepath.Join(tree, "source")); err == nil {
		if !filepath.IsAbs(target) {
			target = filepath.Join("/lib/modules", release, target)
		}
		if dir := filepath.Join(root, target); exists(filepath.Join(dir, "Makefile")) {
			k.sourceDir = dir
		}
	}
	if k.headersPackage, err = headersPackageVersion(ctx, filepath.Join(downloads, "debs"), release); err != nil {
		return nil, err
	}
	if h.CC != "" {
		if k.compiler, err = compilerVersion(ctx, h.CC); err != nil {
			return nil, fmt.Errorf("kernel %s (built with %q): %w", release, h.CCVersionText, err)
		}
	}
	return k, nil
}

// runKernelsScript runs "script release" with KPRELOAD_CACHE=downloads. On
// cancellation the script's process group gets SIGTERM, so its EXIT trap
// removes its temporary tree.
func runKernelsScript(ctx context.Context, script, release, downloads string) error {
	cmd := exec.CommandContext(ctx, script, release)
	cmd.Env = append(os.Environ(), "KPRELOAD_CACHE="+downloads)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("fetch kernel %s: %w", release, ctxErr)
		}
		return fmt.Errorf("fetch kernel %s: %s %s: %w: %s", release, script, release, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// headersPackageVersion returns the Version field of the linux-headers .deb
// of release in debs (the newest if several), or "unknown" when there is none.
func headersPackageVersion(ctx context.Context, debs, release string) (string, error) {
	found, _ := filepath.Glob(filepath.Join(debs, "linux-headers-"+release+"_*.deb"))
	var versions []string
	for _, deb := range found {
		out, err := exec.CommandContext(ctx, "dpkg-deb", "-f", deb, "Version").Output()
		if err != nil {
			return "", fmt.Errorf("kernel %s: dpkg-deb -f %s Version: %w", release, deb, err)
		}
		versions = append(versions, strings.TrimSpace(string(out)))
	}
	if len(versions) == 0 {
		return "unknown", nil
	}
	slices.SortFunc(versions, recipe.CompareVersions)
	return versions[len(versions)-1], nil
}

// compilerVersion returns the first line of "cc --version".
func compilerVersion(ctx context.Context, cc string) (string, error) {
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("compiler %s is not installed (run scripts/deps.sh): %w", cc, err)
	}
	out, err := exec.CommandContext(ctx, cc, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", cc, err)
	}
	first, _, _ := bytes.Cut(out, []byte("\n"))
	return strings.TrimSpace(string(first)), nil
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
