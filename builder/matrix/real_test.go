package matrix

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// TestRealMatrix builds recipes/testdriver.yaml and a broken copy of it with
// the real dkms for both test kernels into a fresh cache, then runs again to
// see every good cell come from the cache without running dkms.
func TestRealMatrix(t *testing.T) {
	requireTools(t)
	requireKernels(t)
	good, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	// A broken copy: same recipe, source with a missing ';'.
	dir := t.TempDir()
	copyTree(t, filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver"), filepath.Join(dir, "testdriver"))
	editFile(t, filepath.Join(dir, "testdriver", "kpreload_edu.c"),
		"edu->id = ioread32(edu->bar0 + EDU_REG_ID);",
		"edu->id = ioread32(edu->bar0 + EDU_REG_ID)")
	yml, err := os.ReadFile(good.File)
	if err != nil {
		t.Fatal(err)
	}
	brokenFile := filepath.Join(dir, "testdriver-broken.yaml")
	if err := os.WriteFile(brokenFile, []byte(strings.Replace(string(yml), "name: testdriver\n", "name: testdriver-broken\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	broken, err := recipe.Load(brokenFile)
	if err != nil {
		t.Fatal(err)
	}

	counter := &countingDriver{Driver: dkms.New()}
	opts := Options{
		Recipes:     []*recipe.Recipe{good, broken},
		Kernels:     testKernels,
		CacheDir:    keptCacheDir(t),
		DownloadDir: downloadDir(),
		LogDir:      filepath.Join(t.TempDir(), "logs"),
		TempDir:     t.TempDir(),
		Driver:      counter,
	}
	results, err := Run(context.Background(), opts)
	if !errors.Is(err, ErrCellsFailed) {
		t.Fatalf("Run(good, broken) error = %v, want ErrCellsFailed", err)
	}
	if got := counter.calls.Load(); got != 4 {
		t.Errorf("Run(good, broken) ran dkms %d times, want 4", got)
	}
	st, err := store.Open(opts.CacheDir)
	if err != nil {
		t.Fatal(err)
	}
	got := byCell(results)
	for _, kver := range testKernels {
		res := got["testdriver/"+kver]
		t.Logf("testdriver/%s: %s in %v, set %.12s, log %s", kver, res.State, res.Duration.Round(1e8), res.SetID, res.LogPath)
		if res.State != StateOK {
			t.Errorf("testdriver/%s = %s (%v), want ok", kver, res.State, res.Err)
			continue
		}
		m, err := st.Get(res.SetID)
		if err != nil {
			t.Fatal(err)
		}
		if m.Kernel != kver || m.Driver != "kpreload-edu" || len(m.Modules) != 1 || m.Modules[0].Name != "kpreload_edu" || !strings.HasPrefix(m.Modules[0].Vermagic, kver+" ") {
			t.Errorf("set of testdriver/%s = kernel %s driver %s modules %+v, want one kpreload_edu module for %s", kver, m.Kernel, m.Driver, m.Modules, kver)
		}
		for _, k := range []string{"source_sha256", "headers_package", "module_symvers_sha256", "kernel_config_sha256", "compiler", "kernel_cc", "dkms"} {
			if res.Key[k] == "" || res.Key[k] == "unknown" {
				t.Errorf("testdriver/%s key %s = %q, want a value", kver, k, res.Key[k])
			}
		}
		// Debian's cloud kernels take init_module and cannot decompress zstd: /init does.
		if got, want := res.Key["module_compression"], "zstd"; got != want {
			t.Errorf("testdriver/%s key module_compression = %q, want %q", kver, got, want)
		}
		if m.Modules[0].Compression != "zstd" || m.Modules[0].File != "kpreload_edu.ko.zst" {
			t.Errorf("set of testdriver/%s stores %s (compression %q), want kpreload_edu.ko.zst", kver, m.Modules[0].File, m.Modules[0].Compression)
		}
		if !strings.Contains(res.Key["compiler"], "gcc-12") {
			t.Errorf("testdriver/%s key compiler = %q, want gcc-12", kver, res.Key["compiler"])
		}

		bad := got["testdriver-broken/"+kver]
		t.Logf("testdriver-broken/%s: %s: %s (log %s)", kver, bad.State, bad.FirstError, bad.LogPath)
		if bad.State != StateFailed || !strings.Contains(bad.FirstError, "kpreload_edu.c:") || !strings.Contains(bad.FirstError, "error: expected ';'") {
			t.Errorf("testdriver-broken/%s = %s %q, want failed with gcc's missing ';' error", kver, bad.State, bad.FirstError)
		}
		if log, err := os.ReadFile(bad.LogPath); err != nil || !strings.Contains(string(log), bad.FirstError) {
			t.Errorf("testdriver-broken/%s log %s (err %v) lacks the first error", kver, bad.LogPath, err)
		}
	}
	if ix, err := st.Index(testKernels[0]); err != nil || ix == nil {
		t.Errorf("boot index of %s: %v", testKernels[0], err)
	}

	// Again: the good cells come from the cache, dkms never runs.
	opts.Recipes = []*recipe.Recipe{good}
	before := counter.calls.Load()
	again, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("second Run(good): %v", err)
	}
	if n := counter.calls.Load() - before; n != 0 {
		t.Errorf("second Run(good) ran dkms %d times, want 0", n)
	}
	for _, res := range again {
		if res.State != StateCached || res.SetID != got["testdriver/"+res.Kernel].SetID {
			t.Errorf("second Run testdriver/%s = %s set %.12s, want cached set %.12s", res.Kernel, res.State, res.SetID, got["testdriver/"+res.Kernel].SetID)
		}
	}
	if left, _ := os.ReadDir(opts.TempDir); len(left) != 0 {
		t.Errorf("Run left %d entries in TempDir", len(left))
	}
	if !t.Failed() {
		keepRealCells(opts.CacheDir)
	}
}
