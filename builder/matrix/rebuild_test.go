package matrix

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// TestRebuild takes the test driver's 6.1 cell built with the real dkms
// (TestRealMatrix's when it ran), rebuilds it by set id (identical),
// rebuilds a forged set stored under the same key, asked by the key's
// digest (refused: the bytes differ), and asks a recipe whose source
// changed (refused: another key, naming the entry).
func TestRebuild(t *testing.T) {
	requireTools(t)
	requireKernels(t)
	kver := testKernels[0]
	good, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver-2.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache")
	opts := func() Options {
		return Options{DownloadDir: downloadDir(), TempDir: t.TempDir(), LogDir: t.TempDir(), Driver: dkms.New()}
	}
	// The stored cell: TestRealMatrix's, when it ran (testdriverCell).
	set := testdriverCell(t, kver, cache, t.TempDir())
	st, err := store.Open(cache)
	if err != nil {
		t.Fatal(err)
	}

	m, err := st.Get(set)
	if err != nil {
		t.Fatal(err)
	}
	keyID := manifest.KeyID(m.CacheKey)
	got, err := Rebuild(context.Background(), st, set[:12], []*recipe.Recipe{other, good}, opts())
	if err != nil {
		t.Fatalf("Rebuild(%s): %v", set[:12], err)
	}
	if !got.Identical || got.RebuiltSet != set || got.Set != set || got.KeyID != keyID || got.Recipe != good.File || len(got.Modules) != 1 || !got.Modules[0].Identical {
		t.Errorf("Rebuild(%s) = %+v, want identical set %s (key %s) from %s", set[:12], got, set, keyID, good.File)
	}

	// A forged set under the same key: the module with bytes appended (to
	// the plain module, stored compressed as the cell's). It is asked by
	// its key digest, which now names the forged set: one dkms build checks
	// both the lookup by key and the refusal.
	forged := filepath.Join(t.TempDir(), m.Modules[0].File)
	elf, _, err := modinfo.Open(st.ObjectPath(m.Modules[0].SHA256))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	data := enc.EncodeAll(append(elf, "forged"...), nil)
	if err := os.WriteFile(forged, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, fid, err := st.AddFiles(context.Background(), store.AddRequest{Driver: m.Driver, Version: m.Version, Flavor: m.Flavor, Files: []string{forged}, CacheKey: m.CacheKey, Replace: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err = Rebuild(context.Background(), st, keyID[:12], []*recipe.Recipe{good}, opts())
	if !errors.Is(err, ErrNotReproduced) || got == nil || got.Set != fid || got.KeyID != keyID || got.Identical || got.Modules[0].Identical || got.Modules[0].StoredSize != int64(len(data)) {
		t.Errorf("Rebuild(%s, the forged set's key) = %+v, %v; want set %.12s, ErrNotReproduced with the module differing", keyID[:12], got, err, fid)
	}

	// A recipe whose source changed gives another key: nothing to compare.
	dir := t.TempDir()
	copyTree(t, filepath.Dir(good.File), dir)
	editFile(t, filepath.Join(dir, "testdriver", "kpreload_edu.c"), "edu->id = ioread32(edu->bar0 + EDU_REG_ID);", "edu->id = ioread32(edu->bar0 + EDU_REG_ID); /* changed */")
	changed, err := recipe.Load(filepath.Join(dir, "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Rebuild(context.Background(), st, fid, []*recipe.Recipe{changed}, opts()); err == nil || !strings.Contains(err.Error(), "source_sha256") {
		t.Errorf("Rebuild(changed source) = %v, want a refusal naming source_sha256", err)
	}
	if _, err := Rebuild(context.Background(), st, fid, []*recipe.Recipe{other}, opts()); err == nil || !strings.Contains(err.Error(), "no recipe builds kpreload-edu 1.0.0") {
		t.Errorf("Rebuild(another version's recipe) = %v, want a refusal naming the driver", err)
	}
}
