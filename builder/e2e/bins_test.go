package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// The static binaries the package's tests run, built once per test run (as
// `make build` builds them) instead of once per test, and removed after them.
var (
	binsMu  sync.Mutex
	binsDir string
	built   = map[string]error{} // name -> the build's error; present once built
)

// TestMain removes the shared binaries after the package's tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if binsDir != "" {
		os.RemoveAll(binsDir)
	}
	testenv.RemoveStaticBinaries()
	os.Exit(code)
}

// staticBinary returns the shared static binary name: "kpreload",
// "kpreload-init" or "kpreload-rootinit" (the root disk's test init).
func staticBinary(t *testing.T, name string) string {
	t.Helper()
	binsMu.Lock()
	defer binsMu.Unlock()
	if binsDir == "" {
		d, err := os.MkdirTemp("", "kpreload-builder-e2e-bin-")
		if err != nil {
			t.Fatal(err)
		}
		binsDir = d
	}
	out := filepath.Join(binsDir, name)
	err, ok := built[name]
	if !ok {
		switch name {
		case "kpreload":
			return testenv.StaticBinary(t, name, "./cmd/kpreload")
		case "kpreload-init":
			return testenv.StaticBinary(t, name, "./cmd/kpreload-init")
		case "kpreload-rootinit":
			err = rootdisk.BuildRootInit(context.Background(), out)
		default:
			err = fmt.Errorf("no shared binary %q", name)
		}
		built[name] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}
