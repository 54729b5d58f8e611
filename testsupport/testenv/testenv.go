// Package testenv is what kpreload's tests share about their environment: the
// repository root, the download cache, the unpacked Debian kernels (fetched
// through the project's own script when missing) and static builds of the
// project's binaries. Only tests import it.
package testenv

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/kpreload/kpreload/internal/fileutil"
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
// The link is shared by every test process of a run (sharedStatic); each test
// gets a copy of its own.
func GoBuildStatic(t testing.TB, dir, name, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	if err := sharedStatic(RepoRoot(t), pkg, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// sharedStatic builds pkg as a static binary with `make build`'s flags (but
// the version) into kpreload-testbin under the Go build cache (GOCACHE), one
// directory per checkout and package, and copies it to dst, all under a lock
// the other test processes wait for. The go command links only when the
// binary there is not current (it compares the file's build ID with what the
// sources and flags give), so a run's first test links and the others copy,
// and an edited source links again.
func sharedStatic(repo, pkg, dst string) error {
	gocache, err := goCache()
	if err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	bin := sharedBinary(gocache, repo, pkg)
	dir := filepath.Dir(bin)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	defer lock.Close() // and with it the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("go build %s: lock %s: %w", pkg, lock.Name(), err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil { // as go build -o would
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	if err := fileutil.CopyAtomic(bin, dst, 0o755, false); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
}

// goCache is the Go build cache's directory (go env GOCACHE).
func goCache() (string, error) {
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOCACHE: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" || dir == "off" {
		return "", fmt.Errorf("no Go build cache (GOCACHE=%q) to share the binary in", dir)
	}
	return dir, nil
}

// sharedBinary is where sharedStatic keeps the checkout repo's pkg.
func sharedBinary(gocache, repo, pkg string) string {
	rel := strings.TrimPrefix(path.Clean(pkg), "cmd/")
	checkout := sha256.Sum256([]byte(repo))
	return filepath.Join(gocache, "kpreload-testbin", fmt.Sprintf("%x-%s", checkout[:6], strings.ReplaceAll(rel, "/", "_")), path.Base(rel))
}
