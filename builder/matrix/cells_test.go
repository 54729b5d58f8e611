package matrix

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// realCells is the cache of TestRealMatrix's good testdriver cells (both
// test kernels, built with the real dkms), kept after that test for the
// tests that need the same cell built in a cache of their own (TestRebuild,
// TestReproducibleOnHostileHost): they copy the set instead of running the
// same dkms build again. Empty when TestRealMatrix did not run or failed.
var realCells struct {
	sync.Mutex
	dir string
}

// TestMain removes the kept cache once every test has run.
func TestMain(m *testing.M) {
	code := m.Run()
	realCells.Lock()
	if realCells.dir != "" {
		os.RemoveAll(realCells.dir)
	}
	realCells.Unlock()
	os.Exit(code)
}

// keptCacheDir returns a cache directory that outlives the test (removed by
// TestMain), for keepRealCells.
func keptCacheDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kpreload-matrix-cells-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		realCells.Lock()
		defer realCells.Unlock()
		if realCells.dir != dir {
			os.RemoveAll(dir)
		}
	})
	return filepath.Join(dir, "cache")
}

// keepRealCells keeps cache (made by keptCacheDir) for testdriverCell.
func keepRealCells(cache string) {
	realCells.Lock()
	defer realCells.Unlock()
	realCells.dir = filepath.Dir(cache)
}

// testdriverCell puts the cell of recipes/testdriver.yaml for kver into the
// empty cache at cache and returns its set id: copied from TestRealMatrix's
// cache when that test ran, else built with the real dkms (temp is the
// build's TempDir).
func testdriverCell(t *testing.T, kver, cache, temp string) string {
	t.Helper()
	dst, err := store.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	realCells.Lock()
	kept := realCells.dir
	realCells.Unlock()
	if kept != "" {
		src, err := store.Open(filepath.Join(kept, "cache"))
		if err != nil {
			t.Fatal(err)
		}
		entries, err := src.List()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Kernel != kver || e.Driver != "kpreload-edu" {
				continue
			}
			id, err := src.CopySet(context.Background(), dst, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the testdriver cell of %s is TestRealMatrix's (set %.12s), not built again", kver, id)
			return id
		}
	}
	return buildTestdriver(t, kver, cache, temp).SetID
}

// buildTestdriver builds recipes/testdriver.yaml for kver with the real dkms
// into the cache at cache (temp is the build's TempDir) and returns the one
// cell's result, failing the test unless it is ok.
func buildTestdriver(t *testing.T, kver, cache, temp string) Result {
	t.Helper()
	r, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	results, err := Run(context.Background(), Options{
		Recipes:     []*recipe.Recipe{r},
		Kernels:     []string{kver},
		CacheDir:    cache,
		DownloadDir: downloadDir(),
		LogDir:      filepath.Join(temp, "logs"),
		TempDir:     temp,
		Driver:      dkms.New(),
	})
	if err != nil || len(results) != 1 || results[0].State != StateOK {
		t.Fatalf("Run(testdriver, %s) = %+v, %v; want one ok cell", kver, results, err)
	}
	return results[0]
}
