package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the temporary directories the shared, once-per-run helpers
// (binaries, kpreloadBinary, twoVersions) made.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if kpreloadDir != "" {
		os.RemoveAll(kpreloadDir)
	}
	if twoVersionsCache != "" {
		os.RemoveAll(filepath.Dir(twoVersionsCache))
	}
	os.Exit(code)
}
