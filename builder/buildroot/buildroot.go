// Package buildroot makes and runs commands in a build root: a minimal
// Debian userland of another suite (trixie, sid, ...) in which dkms, make and
// the kernel's own compiler run, so kernels of that suite are built for with
// their own toolchain. Debian's trixie kernels are built with gcc-14 and
// their linux-kbuild tools (fixdep, modpost, objtool) link against trixie's
// glibc: neither runs on a bookworm build host.
//
// A build root is made once with mmdebstrap (minbase plus the build tools)
// under <cache>/buildroot/<suite>-<key>/ and reused; it is made in a
// temporary directory and renamed into place, so it is complete or absent.
// dkms runs in it chrooted, inside the build's sandbox (package dkms: a
// private mount namespace with the build's own dkms tree, sources and
// kernel): nothing is mounted on the host and nothing is installed there.
package buildroot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// Packages are what a build root holds beyond mmdebstrap's minbase variant:
// dkms and its tools, and what kernel module builds need.
var Packages = []string{"dkms", "make", "gcc", "libc6-dev", "bc", "kmod", "dwarves", "xz-utils", "zstd", "patch", "openssl", "libelf-dev"}

// compilers are the kernel compiler packages a suite's kernels need.
var compilers = map[string][]string{
	"trixie":       {"gcc-14"},
	"forky":        {"gcc-14", "gcc-15"},
	"sid":          {"gcc-14", "gcc-15"},
	"unstable":     {"gcc-14", "gcc-15"},
	"experimental": {"gcc-14", "gcc-15"},
}

// Root is a ready build root.
type Root struct {
	// Suite is the Debian suite of its userland.
	Suite string
	// Dir is its root directory.
	Dir string
	// Runner runs chroot for Output (nil: runner.Default).
	Runner runner.Runner
}

// Spec describes a build root to make.
type Spec struct {
	// Suite is the Debian suite, such as "trixie".
	Suite string
	// Mirror is the Debian archive ("" means http://deb.debian.org/debian).
	Mirror string
	// Cache holds build roots under buildroot/ (kpreload's download cache).
	Cache string
	// Runner runs mmdebstrap, and the Root's programs (nil: runner.Default).
	Runner runner.Runner
}

// packages returns the package list of suite's build root.
func packages(suite string) []string {
	return append(append([]string{}, Packages...), compilers[suite]...)
}

// Key is the digest of what makes the build root: its suite, mirror and
// package list.
func (s Spec) Key() string {
	h := sha256.New()
	fmt.Fprintf(h, "suite %s\nmirror %s\npackages %s\n", s.Suite, s.mirror(), strings.Join(packages(s.Suite), ","))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func (s Spec) mirror() string {
	if s.Mirror == "" {
		return "http://deb.debian.org/debian"
	}
	return s.Mirror
}

// sources are the apt sources of the build root.
func (s Spec) sources() []string {
	const comps = "main contrib non-free non-free-firmware"
	switch s.Suite {
	case "sid", "unstable", "experimental":
		return []string{"deb " + s.mirror() + " sid " + comps}
	}
	return []string{
		"deb " + s.mirror() + " " + s.Suite + " " + comps,
		"deb " + s.mirror() + " " + s.Suite + "-updates " + comps,
		"deb http://deb.debian.org/debian-security " + s.Suite + "-security " + comps,
	}
}

// Ensure returns the build root of spec, making it with mmdebstrap when the
// cache does not have it (a few minutes, once). log receives mmdebstrap's
// output; on failure the error quotes its last lines.
func Ensure(ctx context.Context, spec Spec, log func(string)) (*Root, error) {
	if spec.Suite == "" || spec.Cache == "" {
		return nil, fmt.Errorf("build root: suite and cache are required")
	}
	if _, ok := compilers[spec.Suite]; !ok {
		return nil, fmt.Errorf("build root: no build root for suite %q (kernels of bookworm build on the host; known: trixie, forky, sid, unstable, experimental)", spec.Suite)
	}
	base := filepath.Join(spec.Cache, "buildroot")
	dir := filepath.Join(base, spec.Suite+"-"+spec.Key())
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return &Root{Suite: spec.Suite, Dir: dir, Runner: spec.Runner}, nil
	}
	run := runner.Or(spec.Runner)
	if _, err := run.LookPath("mmdebstrap"); err != nil {
		return nil, fmt.Errorf("build root for %s: mmdebstrap is not installed (run scripts/deps.sh): %w", spec.Suite, err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, fmt.Errorf("build root: %w", err)
	}
	tmp, err := os.MkdirTemp(base, ".tmp-"+spec.Suite+"-")
	if err != nil {
		return nil, fmt.Errorf("build root: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if log != nil {
		log(fmt.Sprintf("making the %s build root (mmdebstrap, once): %s", spec.Suite, strings.Join(packages(spec.Suite), " ")))
	}
	root := filepath.Join(tmp, "root")
	args := append([]string{
		"--variant=minbase", "--mode=root", "--quiet",
		"--include=" + strings.Join(packages(spec.Suite), ","),
		"--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/archives/*.deb",
		spec.Suite, root,
	}, spec.sources()...)
	if _, err := run.Run(ctx, runner.Cmd{Name: "mmdebstrap", Args: args}); err != nil {
		return nil, fmt.Errorf("build root for %s: %w", spec.Suite, err)
	}
	if err := os.WriteFile(filepath.Join(root, ".complete"), []byte(spec.Key()+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("build root: %w", err)
	}
	if err := os.Rename(root, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, ".complete")); statErr == nil {
			return &Root{Suite: spec.Suite, Dir: dir, Runner: spec.Runner}, nil // another build made it meanwhile
		}
		return nil, fmt.Errorf("build root: %w", err)
	}
	return &Root{Suite: spec.Suite, Dir: dir, Runner: spec.Runner}, nil
}

// Has reports whether the build root has the program at path (absolute
// inside the root, or a name looked up in its /usr/bin, /usr/sbin, /bin, /sbin).
func (r *Root) Has(prog string) bool {
	if filepath.IsAbs(prog) {
		_, err := os.Stat(filepath.Join(r.Dir, prog))
		return err == nil
	}
	for _, d := range []string{"usr/bin", "usr/sbin", "bin", "sbin"} {
		if _, err := os.Stat(filepath.Join(r.Dir, d, prog)); err == nil {
			return true
		}
	}
	return false
}

// Output runs name with args in the build root (no binds) and returns its
// standard output.
func (r *Root) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := runner.Or(r.Runner).Run(ctx, runner.Cmd{Name: "chroot", Args: append([]string{r.Dir, name}, args...)})
	if err != nil {
		return nil, fmt.Errorf("%s in the %s build root: %w", name, r.Suite, err)
	}
	return out, nil
}
