package testenv

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// The static binaries StaticBinary built in this test process.
var (
	staticMu   sync.Mutex
	staticDir  string
	staticBins = map[string]string{} // name -> path
	staticErrs = map[string]error{}
)

// StaticBinary builds pkg (a path from the module root) as the static binary
// name, as `make build` does (GoBuildStatic), once per test process, and
// returns its path; a failed build fails every test that asks for it. The
// package's TestMain removes the binaries with RemoveStaticBinaries.
func StaticBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	staticMu.Lock()
	defer staticMu.Unlock()
	if err := staticErrs[name]; err != nil {
		t.Fatal(err)
	}
	if p, ok := staticBins[name]; ok {
		return p
	}
	if staticDir == "" {
		d, err := os.MkdirTemp("", "kpreload-test-bin-")
		if err != nil {
			staticErrs[name] = fmt.Errorf("static binaries' directory: %w", err)
			t.Fatal(staticErrs[name])
		}
		staticDir = d
	}
	staticErrs[name] = fmt.Errorf("go build %s failed in an earlier test", pkg)
	p := GoBuildStatic(t, staticDir, name, pkg) // t.Fatalf on failure
	delete(staticErrs, name)
	staticBins[name] = p
	return p
}

// RemoveStaticBinaries removes what StaticBinary built; TestMain calls it
// after the package's tests.
func RemoveStaticBinaries() {
	staticMu.Lock()
	defer staticMu.Unlock()
	if staticDir != "" {
		os.RemoveAll(staticDir)
	}
}
