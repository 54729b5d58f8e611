package stage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestStageCachedCell stages a root from a module cache holding the
// recipe's cell (a synthetic module) and a recipe whose userspace is built
// from source (through a recorder): the set is copied into the root's cache
// and reported, the userspace lands under DriversDir/<version>/, and a cell
// for another kernel is ErrMissingCells naming what the cache holds.
func TestStageCachedCell(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	st, err := store.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	ko := testenv.SyntheticModule(t, "kpreload_syn", testKernel)
	_, id, err := st.AddFiles(ctx, store.AddRequest{Driver: "kpreload-syn", Version: "1.0.0", Flavor: "open", Files: []string{ko}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "userspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "userspace", "Makefile"), []byte("install:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &recipe.Recipe{Name: "syn", File: filepath.Join(dir, "syn.yaml"), Driver: recipe.Driver{Name: "kpreload-syn", Version: "1.0.0"}, Flavor: "open",
		UserspaceSource: &recipe.SourceDir{Dir: "userspace"}}
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := recorder(t, "")
	var said []string
	root := t.TempDir()
	res, err := Stage(ctx, Options{
		Kernels: []string{testKernel}, Recipes: []*recipe.Recipe{r}, CacheDir: cache, DownloadDir: t.TempDir(),
		KpreloadBinary: bin, InitBinary: bin, NoInitramfs: true,
		Tools:    Tools{Dpkg: Host{Runner: f}, Userspace: Host{Runner: f}},
		Progress: func(m string) { said = append(said, m) },
	}, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Drivers) != 1 || res.Drivers[0].SetID != id || res.Drivers[0].Kernel != testKernel || !slices.Equal(res.Drivers[0].Modules, []string{"kpreload_syn"}) {
		t.Errorf("drivers %+v, want set %s for %s with kpreload_syn", res.Drivers, id, testKernel)
	}
	in, err := store.Open(filepath.Join(root, install.CacheDir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Get(id); err != nil {
		t.Errorf("the root's cache lacks set %s: %v", id, err)
	}
	if got, want := strings.Join(res.Userspace["1.0.0"], " "), "source:userspace"; got != want {
		t.Errorf("userspace %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, DriversDir, "1.0.0/usr/bin/fake-smi")); err != nil {
		t.Errorf("the built userspace is not in the root: %v", err)
	}
	if !slices.ContainsFunc(said, func(s string) bool { return strings.Contains(s, "userspace built from userspace") }) {
		t.Errorf("progress %q does not name the userspace build", said)
	}

	_, err = Stage(ctx, Options{
		Kernels: []string{"6.12.117+deb12-cloud-amd64"}, Recipes: []*recipe.Recipe{r}, CacheDir: cache, DownloadDir: t.TempDir(),
		KpreloadBinary: bin, InitBinary: bin, NoInitramfs: true, Tools: Tools{Dpkg: Host{Runner: f}, Userspace: Host{Runner: f}},
	}, t.TempDir())
	if !errors.Is(err, ErrMissingCells) || !strings.Contains(err.Error(), "holds: kpreload-syn 1.0.0 open for "+testKernel) {
		t.Errorf("a kernel the cache has no cell for: %v, want ErrMissingCells listing the cache", err)
	}
	if err := EnsureCells(ctx, Options{Kernels: []string{testKernel}, Recipes: []*recipe.Recipe{r}, CacheDir: cache, DownloadDir: t.TempDir()}); err != nil {
		t.Errorf("EnsureCells with the cell cached: %v", err)
	}
}
