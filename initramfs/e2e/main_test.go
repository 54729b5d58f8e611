package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestMain removes the temporary directories the shared, once-per-run helpers
// (binaries, kpreloadBinary, twoVersions, sharedInitramfs) made.
func TestMain(m *testing.M) {
	code := m.Run()
	if initrdDir != "" {
		os.RemoveAll(initrdDir)
	}
	testenv.RemoveStaticBinaries()
	if twoVersionsCache != "" {
		os.RemoveAll(filepath.Dir(twoVersionsCache))
	}
	os.Exit(code)
}
