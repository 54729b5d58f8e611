package matrix

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// TestSupportedGPUs: a recipe with a supported-gpus section (the real
// nvidia-535 one: nvidia-driver 535.261.03-1's supported-gpus.json.gz,
// fetched with apt-get download and dpkg -x) gets the file, uncompressed,
// stored with its set, named by the manifest and the boot index, and in its
// cache key. The build itself is the fake driver's.
func TestSupportedGPUs(t *testing.T) {
	requireKernels(t)
	nv, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", "nvidia-535.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := fakeRecipe(t, "gpus")
	r.SupportedGPUs = nv.SupportedGPUs
	dir := t.TempDir()
	results, err := Run(context.Background(), Options{
		Recipes:     []*recipe.Recipe{r},
		Kernels:     testKernels[:1],
		CacheDir:    filepath.Join(dir, "cache"),
		DownloadDir: downloadDir(),
		LogDir:      filepath.Join(dir, "logs"),
		TempDir:     t.TempDir(),
		Driver:      &fakeDriver{},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	res := results[0]

	// What the package ships, read independently.
	gz, err := os.ReadFile(filepath.Join(downloadDir(), "sources", "nvidia-driver_535.261.03-1", nv.SupportedGPUs.Path))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	want, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}

	st, err := store.Open(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Get(res.SetID)
	if err != nil {
		t.Fatal(err)
	}
	if m.SupportedGPUs == nil || m.SupportedGPUs.File != manifest.SupportedGPUsFile || m.SupportedGPUs.Size != int64(len(want)) {
		t.Fatalf("manifest supported_gpus = %+v, want %s of %d bytes", m.SupportedGPUs, manifest.SupportedGPUsFile, len(want))
	}
	if got := res.Key["supported_gpus_sha256"]; got != m.SupportedGPUs.SHA256 {
		t.Errorf("key supported_gpus_sha256 = %q, want %q", got, m.SupportedGPUs.SHA256)
	}
	ix, err := st.Index(testKernels[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Sets) != 1 || ix.Sets[0].SupportedGPUs == "" {
		t.Fatalf("boot index sets = %+v, want one with supported_gpus", ix.Sets)
	}
	got, err := os.ReadFile(filepath.Join(filepath.Dir(st.IndexPath(testKernels[0])), ix.Sets[0].Dir, ix.Sets[0].SupportedGPUs))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the index's supported-gpus.json (%d bytes) differs from the package's (%d bytes)", len(got), len(want))
	}
	var doc struct {
		Chips []struct {
			DevID string `json:"devid"`
		} `json:"chips"`
	}
	if err := json.Unmarshal(got, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Chips) != 2192 {
		t.Errorf("supported-gpus.json has %d chips, want 2192 (nvidia-driver 535.261.03)", len(doc.Chips))
	}
	if probs, err := st.Verify(context.Background()); err != nil || len(probs) != 0 {
		t.Errorf("Verify = %v, %v; want a healthy cache", probs, err)
	}
}
