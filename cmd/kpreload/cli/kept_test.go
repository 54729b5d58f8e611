package cli

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/testsupport/buildtest"
)

// kept is the cache of TestBuildJSONAndExitStatus's real dkms build (the test
// driver's cell of 6.1.0-56-cloud-amd64), kept after that test so that
// TestFollowHelpExamples starts from that cell instead of compiling it again;
// TestMain removes it. Empty when the build test did not run or failed.
var kept struct {
	sync.Mutex
	dir string
}

// keptDir returns a folder that outlives the test, for keep.
func keptDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kpreload-cli-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kept.Lock()
		defer kept.Unlock()
		if kept.dir != dir {
			os.RemoveAll(dir)
		}
	})
	return dir
}

// keep keeps dir (from keptDir), which holds a cache in dir/cache.
func keep(dir string) {
	kept.Lock()
	defer kept.Unlock()
	kept.dir = dir
}

// removeKept removes what keep kept.
func removeKept() {
	kept.Lock()
	defer kept.Unlock()
	if kept.dir != "" {
		os.RemoveAll(kept.dir)
		kept.dir = ""
	}
}

// seedCache copies the sets of the kept cache, if any, into the cache at dst.
func seedCache(t *testing.T, dst string) {
	t.Helper()
	kept.Lock()
	dir := kept.dir
	kept.Unlock()
	if dir == "" {
		return
	}
	for _, e := range buildtest.CopyCells(t, filepath.Join(dir, "cache"), dst) {
		t.Logf("cache starts with set %.12s (%s %s for %s), built by TestBuildJSONAndExitStatus", e.ID, e.Driver, e.Version, e.Kernel)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	removeKept()
	os.Exit(code)
}
