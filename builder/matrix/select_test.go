package matrix

import (
	"context"
	"slices"
	"testing"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/manifest"
)

// oneArchive answers every suite with the same package versions.
type oneArchive map[string][]archive.Carried

func (a oneArchive) Open(*recipe.Recipe, string) (recipe.Carrier, string, error) {
	return a, "trixie", nil
}

func (a oneArchive) Carried(_ context.Context, name string) ([]archive.Carried, error) {
	return a[name], nil
}

// followRecipe selects the newest 550 of trixie and trixie-backports.
const followRecipe = `name: follow
driver:
  name: nvidia
flavor: open
source:
  package: nvidia-open-kernel-dkms
  path: usr/src/nvidia-current-open-{version}
  select:
    branch: "550"
    suites: [trixie, trixie-backports]
modules: [nvidia]
firmware: [firmware-nvidia-gsp]
kernels:
  releases: [6.1.0-56-cloud-amd64]
`

// TestCellsResolveDriver: a recipe that selects its driver version builds
// cells of the version the archive has now, pinned, and a single-cell
// request (RecipeKernels) still finds it.
func TestCellsResolveDriver(t *testing.T) {
	r, err := recipe.Parse("follow.yaml", []byte(followRecipe))
	if err != nil {
		t.Fatal(err)
	}
	arcs := oneArchive{
		"nvidia-open-kernel-dkms": {{Version: "550.163.01-4~bpo13+1", Suite: "trixie-backports"}, {Version: "550.163.01-2", Suite: "trixie"}},
		"firmware-nvidia-gsp":     {{Version: "550.163.01-4~bpo13+1", Suite: "trixie-backports"}},
	}
	lister := recipe.StaticLister{Default: []string{"6.1.0-56-cloud-amd64", "6.1.0-57-cloud-amd64"}}
	for _, tc := range []struct {
		name string
		opts Options
		want []string
	}{
		{"matrix", Options{Recipes: []*recipe.Recipe{r}, Lister: lister, Archives: arcs}, []string{"6.1.0-56-cloud-amd64"}},
		{"one cell", Options{Recipes: []*recipe.Recipe{r}, Lister: lister, Archives: arcs, RecipeKernels: map[*recipe.Recipe][]string{r: {"6.1.0-57-cloud-amd64"}}}, []string{"6.1.0-57-cloud-amd64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cells, err := Cells(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range cells {
				got = append(got, c.Kernel)
				if c.Recipe.Driver.Version != "550.163.01" || c.Recipe.Source.Package != "nvidia-open-kernel-dkms=550.163.01-4~bpo13+1" ||
					c.Recipe.Source.Path != "usr/src/nvidia-current-open-550.163.01" || c.Recipe.Firmware[0] != "firmware-nvidia-gsp=550.163.01-4~bpo13+1" {
					t.Errorf("cell recipe driver %+v source %+v firmware %v, want 550.163.01-4~bpo13+1 pinned", c.Recipe.Driver, c.Recipe.Source, c.Recipe.Firmware)
				}
			}
			if len(got) != len(tc.want) || got[0] != tc.want[0] {
				t.Errorf("cells for %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSameDriverPinsSelectingRecipes checks Rebuild's candidates: a recipe
// that selects by branch is pinned to the source package version the stored
// cell's key names (an older one than the newest included), a pinning recipe
// matches on its version, and other drivers, flavours and branches do not.
func TestSameDriverPinsSelectingRecipes(t *testing.T) {
	sel, err := recipe.Parse("follow.yaml", []byte(followRecipe))
	if err != nil {
		t.Fatal(err)
	}
	pinning := &recipe.Recipe{Name: "pinned", Driver: recipe.Driver{Name: "nvidia", Version: "550.163.01"}, Flavor: "open"}
	arcs := oneArchive{
		"nvidia-open-kernel-dkms": {{Version: "550.170.01-1", Suite: "trixie-backports"}, {Version: "550.163.01-2", Suite: "trixie"}},
		"firmware-nvidia-gsp":     {{Version: "550.170.01-1", Suite: "trixie-backports"}, {Version: "550.163.01-2", Suite: "trixie"}},
	}
	stored := func(version, srcpkg string) *manifest.Manifest {
		return &manifest.Manifest{Driver: "nvidia", Version: version, Flavor: "open", CacheKey: map[string]string{"source_package": srcpkg}}
	}
	for _, tc := range []struct {
		name   string
		stored *manifest.Manifest
		want   []string // each candidate's source package
	}{
		{"an older version of the branch", stored("550.163.01", "nvidia-open-kernel-dkms=550.163.01-2"), []string{"nvidia-open-kernel-dkms=550.163.01-2", ""}},
		{"the newest", stored("550.170.01", "nvidia-open-kernel-dkms=550.170.01-1"), []string{"nvidia-open-kernel-dkms=550.170.01-1"}},
		{"another branch", stored("535.261.03", "nvidia-open-kernel-dkms=535.261.03-1"), nil},
		{"another source package", stored("550.163.01", "nvidia-kernel-dkms=550.163.01-2"), []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			same, err := sameDriver(context.Background(), tc.stored, []*recipe.Recipe{sel, pinning}, Options{Archives: arcs})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range same {
				got = append(got, r.Source.Package)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("candidates' source packages = %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := sameDriver(context.Background(), stored("550.150.01", "nvidia-open-kernel-dkms=550.150.01-1"), []*recipe.Recipe{sel}, Options{Archives: arcs}); err == nil {
		t.Error("a version the suites no longer carry: no error")
	}
}
