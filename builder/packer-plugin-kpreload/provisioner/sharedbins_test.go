package provisioner

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// What the package's tests share, made once per test run and removed after
// them: the static binaries the target runs, and the module cache the real
// provisioning runs stage the test driver's 6.1 cell from (the first run's
// real dkms build fills it; a later run takes the cell from it, as a second
// build on one machine does).
var (
	sharedMu  sync.Mutex
	sharedDir string
	cacheDir  string
)

// TestMain removes what the package's tests shared.
func TestMain(m *testing.M) {
	code := m.Run()
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	testenv.RemoveStaticBinaries()
	os.Exit(code)
}

// shared returns the directory that holds what the tests share; sharedMu is held.
func shared() (string, error) {
	if sharedDir == "" {
		d, err := os.MkdirTemp("", "kpreload-provisioner-test-")
		if err != nil {
			return "", fmt.Errorf("shared test directory: %w", err)
		}
		sharedDir = d
	}
	return sharedDir, nil
}

// staticBinary builds pkg (a path from the repository root) once per test
// run as a static binary named name, as `make build` does, and returns it.
func staticBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	return testenv.StaticBinary(t, name, pkg)
}

// moduleCache returns the module cache (cache_dir) that the package's real
// provisioning runs share.
func moduleCache(t testing.TB) string {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if cacheDir == "" {
		dir, err := shared()
		if err != nil {
			t.Fatal(err)
		}
		cacheDir = filepath.Join(dir, "cache")
	}
	return cacheDir
}
