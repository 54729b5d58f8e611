// Package testenv is what kpreload's tests share about their environment: the
// repository root, the download cache, the unpacked Debian kernels (fetched
// through the project's own script when missing) and static builds of the
// project's binaries. Only tests import it.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// root is the repository root: the nearest directory at or above the working
// directory (go test runs a package's tests in its source directory) that holds
// a go.mod. Not runtime.Caller: a test binary built with -trimpath has no
// absolute source path to start from.
var root, rootErr = func() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod at or above %s", wd)
		}
	}
}()

// RepoRoot returns the repository root (where go.mod is).
func RepoRoot(t testing.TB) string {
	t.Helper()
	if rootErr != nil {
		t.Fatalf("repository root not found: %v", rootErr)
	}
	return root
}

// CacheRoot returns $KPRELOAD_CACHE, default /var/cache/kpreload, where
// scripts/ keep downloads and unpacked kernels.
func CacheRoot() string {
	if d := os.Getenv("KPRELOAD_CACHE"); d != "" {
		return d
	}
	return "/var/cache/kpreload"
}

var kernelOnce sync.Map

// KernelTree returns the root of an unpacked Debian kernel (boot/, lib/modules,
// usr/src headers) under CacheRoot, running scripts/kernels.sh once when it is
// not there yet; the test fails with the script's output if that fails. Under
// -short it skips the test (SkipShort): the unit tier neither downloads kernels
// nor reads them, so it passes the same on every machine.
func KernelTree(t testing.TB, kver string) string {
	t.Helper()
	SkipShort(t, "needs the Debian kernel "+kver+" (scripts/kernels.sh "+kver+" fetches it)")
	dir := filepath.Join(CacheRoot(), "kernels", kver)
	complete := filepath.Join(dir, ".complete")
	once, _ := kernelOnce.LoadOrStore(kver, &sync.Once{})
	once.(*sync.Once).Do(func() {
		if _, err := os.Stat(complete); err == nil {
			return
		}
		cmd := exec.Command(filepath.Join(RepoRoot(t), "scripts", "kernels.sh"), kver)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/kernels.sh %s: %v\n%s", kver, err, out)
		}
	})
	if _, err := os.Stat(complete); err != nil {
		t.Fatalf("kernel %s is not unpacked at %s (scripts/kernels.sh failed earlier)", kver, dir)
	}
	return dir
}

// GoBuildStatic builds the package pkg (a path relative to the repository root,
// such as ./cmd/kpreload) as a static binary named name in dir, and returns its path.
func GoBuildStatic(t testing.TB, dir, name, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = RepoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}
