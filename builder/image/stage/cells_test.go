package stage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// testKernel is the kernel the stage tests read modules of (scripts/lib.sh's first).
const testKernel = "6.1.0-56-cloud-amd64"

func TestCheckKernels(t *testing.T) {
	lister := recipe.ListerFunc(func() ([]string, error) {
		return []string{"6.1.0-55-cloud-amd64", "6.1.0-56-cloud-amd64"}, nil
	})
	r := &recipe.Recipe{Name: "testdriver", File: "recipes/testdriver.yaml", Kernels: recipe.Matrix{Releases: []string{"6.1.0-56-cloud-amd64"}}}
	if err := CheckKernels([]string{"6.1.0-56-cloud-amd64"}, []*recipe.Recipe{r}, lister, true, ""); err != nil {
		t.Errorf("known kernel: %v", err)
	}
	err := CheckKernels([]string{"6.1.0-99-cloud-amd64"}, nil, lister, false, "")
	if !errors.Is(err, ErrUnknownKernel) || !strings.Contains(err.Error(), "available: 6.1.0-55-cloud-amd64, 6.1.0-56-cloud-amd64") {
		t.Errorf("unknown kernel: err = %v, want ErrUnknownKernel listing the available kernels", err)
	}
	err = CheckKernels([]string{"6.1.0-55-cloud-amd64"}, []*recipe.Recipe{r}, lister, true, "")
	if !errors.Is(err, ErrUnknownKernel) || !strings.Contains(err.Error(), "not in the kernel matrix of recipe testdriver") || !strings.Contains(err.Error(), "6.1.0-56-cloud-amd64") {
		t.Errorf("kernel outside the matrix: err = %v, want it named with the matrix", err)
	}
	if err := CheckKernels([]string{"6.1.0-55-cloud-amd64"}, []*recipe.Recipe{r}, lister, false, ""); err != nil {
		t.Errorf("kernel outside the matrix, cached cells only: %v", err)
	}
}

// realModule returns a small real module of the unpacked 6.1 kernel.
func realModule(t *testing.T) (kver, path string) {
	t.Helper()
	kver = testKernel
	path = filepath.Join(testenv.KernelTree(t, kver), "lib", "modules", kver, "kernel", "drivers", "misc", "pvpanic", "pvpanic.ko")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("kernel %s is not unpacked (%v): run scripts/kernels.sh %s", kver, err, kver)
	}
	return kver, path
}

func TestResolveCellsMissing(t *testing.T) {
	ctx := context.Background()
	cacheDir := t.TempDir()
	r := &recipe.Recipe{Name: "testdriver", Driver: recipe.Driver{Name: "kpreload-edu", Version: "1.0.0"}, Flavor: "open"}

	_, err := resolveCells(ctx, cacheDir, "", []*recipe.Recipe{r}, []string{"6.1.0-56-cloud-amd64"}, false, nil, nil, nil)
	if !errors.Is(err, ErrMissingCells) || !strings.Contains(err.Error(), "holds: nothing") || !strings.Contains(err.Error(), "testdriver (kpreload-edu 1.0.0 open) for 6.1.0-56-cloud-amd64") {
		t.Errorf("empty cache: err = %v, want ErrMissingCells naming the cell and an empty cache", err)
	}

	kver, mod := realModule(t)
	st, err := store.Open(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.AddFiles(ctx, store.AddRequest{Driver: "kpreload-edu", Version: "1.0.0", Flavor: "open", Files: []string{mod}}); err != nil {
		t.Fatal(err)
	}
	cells, err := resolveCells(ctx, cacheDir, "", []*recipe.Recipe{r}, []string{kver}, false, nil, nil, nil)
	if err != nil || len(cells) != 1 || cells[0].kernel != kver || cells[0].m.Driver != "kpreload-edu" {
		t.Fatalf("cached cell: cells %+v, err %v; want the one set", cells, err)
	}
	_, err = resolveCells(ctx, cacheDir, "", []*recipe.Recipe{r}, []string{kver, "6.12.117+deb12-cloud-amd64"}, false, nil, nil, nil)
	if !errors.Is(err, ErrMissingCells) || !strings.Contains(err.Error(), "for 6.12.117+deb12-cloud-amd64") || !strings.Contains(err.Error(), "holds: kpreload-edu 1.0.0 open for "+kver) {
		t.Errorf("one cell missing: err = %v, want the 6.12 cell named and the cache's 6.1 set listed", err)
	}
}

// TestResolveCellsFromRemote builds the test driver with the real dkms and
// pushes it to a real registry; an image's cell lookup with an empty module
// cache then pulls exactly that cell (by its content key) instead of failing
// or building, and without the remote the same lookup is a missing cell.
func TestResolveCellsFromRemote(t *testing.T) {
	if testing.Short() {
		t.Skip("real dkms build and registry: skipped with -short")
	}
	ctx := context.Background()
	reg := testenv.StartRegistry(t)
	rm, err := remote.Open("oci://"+reg.Addr+"/images", remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "none.json")})
	if err != nil {
		t.Fatal(err)
	}
	r, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kver := testKernel
	testenv.KernelTree(t, kver)
	built, err := matrix.Run(ctx, matrix.Options{Recipes: []*recipe.Recipe{r}, Kernels: []string{kver}, CacheDir: t.TempDir(), Remote: rm})
	if err != nil || len(built) != 1 || built[0].Remote != "pushed" {
		t.Fatalf("build and push: %+v, %v", built, err)
	}
	empty := t.TempDir()
	if _, err := resolveCells(ctx, empty, "", []*recipe.Recipe{r}, []string{kver}, false, nil, nil, nil); !errors.Is(err, ErrMissingCells) {
		t.Fatalf("without the remote: %v, want ErrMissingCells", err)
	}
	var said []string
	cells, err := resolveCells(ctx, empty, "", []*recipe.Recipe{r}, []string{kver}, false, rm, nil, func(s string) { said = append(said, s) })
	if err != nil {
		t.Fatalf("with the remote: %v", err)
	}
	if len(cells) != 1 || cells[0].id != built[0].SetID {
		t.Errorf("cells %+v, want the pushed set %s", cells, built[0].SetID)
	}
	if !slices.ContainsFunc(said, func(s string) bool { return strings.Contains(s, "pulled") }) {
		t.Errorf("progress %q does not say the cell was pulled", said)
	}
}
