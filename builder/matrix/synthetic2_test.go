package matrix

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// unpackedPackage writes files into downloads/sources/<name>_<version>, as
// builder/archive leaves a package it unpacked, so nothing is downloaded.
func unpackedPackage(t *testing.T, downloads, name, version string, files map[string]string) {
	t.Helper()
	for rel, text := range files {
		p := filepath.Join(downloads, "sources", name+"_"+version, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const gpusPath = "usr/share/doc/nvidia/supported-gpus.json"

// TestSupportedGPUsSynthetic: a recipe's supported-gpus list is read from its
// package, checked, digested into the cell's key and stored with the set;
// FetchSupportedGPUs keeps one entry per package version, and a list that
// is not NVIDIA's format is refused naming it.
func TestSupportedGPUsSynthetic(t *testing.T) {
	s := newSynth(t, synthKernels[0])
	good := `{"chips": [{"devid": "0x2330", "name": "NVIDIA H100 80GB HBM3"}]}`
	unpackedPackage(t, s.downloads, "nvidia-gpus", "550.1-1", map[string]string{gpusPath: good})
	unpackedPackage(t, s.downloads, "nvidia-gpus", "0.bad", map[string]string{gpusPath: `{"devices": []}`})
	withList := func(name, version string) *recipe.Recipe {
		r := fakeRecipe(t, name)
		r.SupportedGPUs = &recipe.PackageFile{Package: "nvidia-gpus=" + version, Path: gpusPath}
		return r
	}
	a, b := withList("alpha", "550.1-1"), withList("beta", "550.1-1")

	results, err := Run(context.Background(), s.options(t, a))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := results[0].Key["supported_gpus_sha256"], sha256Hex([]byte(good)); got != want {
		t.Errorf("key supported_gpus_sha256 = %q, want %q", got, want)
	}

	opts := Options{DownloadDir: s.downloads}
	lists, err := FetchSupportedGPUs(context.Background(), []*recipe.Recipe{a, fakeRecipe(t, "none"), b}, opts)
	if err != nil {
		t.Fatal(err)
	}
	wantPath := filepath.Join(SupportedDir(s.downloads, "nvidia-gpus", "550.1-1"), "supported-gpus.json")
	if len(lists) != 1 || strings.Join(lists[0].Recipes, ",") != "alpha,beta" || lists[0].Path != wantPath || !lists[0].Fetched || lists[0].SHA256 != sha256Hex([]byte(good)) {
		t.Errorf("FetchSupportedGPUs = %+v, want one fetched list for alpha and beta at %s", lists, wantPath)
	}
	again, err := FetchSupportedGPUs(context.Background(), []*recipe.Recipe{a}, opts)
	if err != nil || len(again) != 1 || again[0].Fetched || again[0].SHA256 != lists[0].SHA256 {
		t.Errorf("second FetchSupportedGPUs = %+v, %v; want the list already there, not fetched", again, err)
	}

	for _, tt := range []struct {
		name string
		r    *recipe.Recipe
		want string
	}{
		{"not NVIDIA's format", withList("bad", "0.bad"), "recipe bad: "},
		{"no version", withList("unpinned", ""), `recipe unpinned: supported-gpus.package "nvidia-gpus=" is not name=version`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(context.Background(), s.options(t, tt.r))
			if !errors.Is(err, ErrCellsFailed) || len(res) != 1 || !strings.HasPrefix(res[0].Err.Error(), tt.want) {
				t.Errorf("Run = %v, %v; want the cell failed with %q", res, err, tt.want)
			}
		})
	}
}

// TestRebuildSynthetic rebuilds a stored set from its recipe (found by set
// id or key id) and finds the same bytes; a recipe that gives another key
// is named with the key entries that differ.
func TestRebuildSynthetic(t *testing.T) {
	s := newSynth(t, synthKernels[0])
	alpha := fakeRecipe(t, "alpha")
	opts := s.options(t, alpha)
	results, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(opts.CacheDir)
	if err != nil {
		t.Fatal(err)
	}
	rb := Options{DownloadDir: s.downloads, Driver: s.driver, TempDir: t.TempDir(), LogDir: t.TempDir(), Lister: opts.Lister}
	for _, ref := range []string{results[0].SetID, results[0].SetID[:12]} {
		got, err := Rebuild(context.Background(), st, ref, []*recipe.Recipe{fakeRecipe(t, "other"), alpha}, rb)
		if err != nil {
			t.Fatalf("Rebuild(%s): %v", ref, err)
		}
		if !got.Identical || got.RebuiltSet != results[0].SetID || got.Kernel != synthKernels[0] || len(got.Modules) != 1 || !got.Modules[0].Identical {
			t.Errorf("Rebuild(%s) = %+v, want the same set, identical", ref, got)
		}
	}

	// The same driver from another tree: another source digest.
	moved := fakeRecipe(t, "alpha")
	if err := os.WriteFile(filepath.Join(moved.Source.Dir, "extra.c"), []byte("int x;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Rebuild(context.Background(), st, results[0].SetID, []*recipe.Recipe{moved}, rb)
	if err == nil || !strings.Contains(err.Error(), "no recipe gives the stored key here") || !strings.Contains(err.Error(), "source_sha256 is") {
		t.Errorf("Rebuild with another source = %v, want the key entries that differ", err)
	}
	_, err = Rebuild(context.Background(), st, results[0].SetID, []*recipe.Recipe{fakeRecipe(t, "unrelated")}, rb)
	if err == nil || !strings.Contains(err.Error(), "no recipe builds alpha 1.0") {
		t.Errorf("Rebuild without the driver's recipe = %v, want it named", err)
	}
	if _, err := Rebuild(context.Background(), st, "ffffffff", []*recipe.Recipe{alpha}, rb); err == nil {
		t.Error("Rebuild of an unknown set succeeded")
	}
}

func TestKeyDiff(t *testing.T) {
	tests := []struct {
		name string
		a, b map[string]string
		want string
	}{
		{"same", map[string]string{"k": "1"}, map[string]string{"k": "1"}, ""},
		{"differs", map[string]string{"k": "1", "z": "x"}, map[string]string{"k": "2", "z": "x"}, `k is "2" here, "1" in the set`},
		{"missing here", map[string]string{"a": "1"}, map[string]string{}, `a is "" here, "1" in the set`},
		{"sorted", map[string]string{"b": "1", "a": "1"}, map[string]string{"b": "2", "a": "2"}, `a is "2" here, "1" in the set; b is "2" here, "1" in the set`},
	}
	for _, tt := range tests {
		if got := keyDiff(tt.a, tt.b); got != tt.want {
			t.Errorf("%s: keyDiff = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// suiteLister lists per suite; "" is the default suite.
type suiteLister map[string][]string

func (l suiteLister) Available() ([]string, error) { return l[""], nil }

func (l suiteLister) InSuite(s string) (recipe.KernelLister, error) {
	if _, ok := l[s]; !ok {
		return nil, errors.New("no suite " + s)
	}
	return recipe.ListerFunc(func() ([]string, error) { return l[s], nil }), nil
}

func TestCheckKernels(t *testing.T) {
	downloads := newSynth(t, synthKernels[0]).downloads
	kdir := filepath.Join(downloads, "kernels")
	const trixie = "6.12.99+deb13-cloud-amd64"
	cells := func(ks ...string) []Cell {
		var c []Cell
		for _, k := range ks {
			c = append(c, Cell{Kernel: k})
		}
		return c
	}
	plain := recipe.ListerFunc(func() ([]string, error) { return []string{"6.1.0-50-cloud-amd64", "6.1.0-50-amd64"}, nil })
	suites := suiteLister{"": {"6.1.0-50-cloud-amd64"}, "trixie": {trixie}}
	tests := []struct {
		name   string
		cells  []Cell
		lister recipe.KernelLister
		suites map[string]string
		want   string // "" is no error
	}{
		{"unpacked", cells(synthKernels[0], synthKernels[0]), plain, nil, ""},
		{"offered", cells("6.1.0-50-cloud-amd64"), plain, nil, ""},
		{"unknown, same flavour listed", cells("6.1.0-51-cloud-amd64"), plain, nil,
			"unknown kernel 6.1.0-51-cloud-amd64: not unpacked in " + kdir + " and not in the apt archive; available: unpacked: " + synthKernels[0] + "; archive, cloud-amd64: 6.1.0-50-cloud-amd64"},
		{"unknown, other flavour: all listed", cells("6.1.0-51-rt-arm64"), plain, nil,
			"unknown kernel 6.1.0-51-rt-arm64: not unpacked in " + kdir + " and not in the apt archive; available: unpacked: " + synthKernels[0] + "; archive: 6.1.0-50-cloud-amd64, 6.1.0-50-amd64"},
		{"another suite", cells(trixie), suites, map[string]string{trixie: "trixie"}, ""},
		{"another suite, plain lister", cells(trixie), plain, map[string]string{trixie: "trixie"},
			"kernel " + trixie + " is in suite trixie, which this lister cannot read"},
		{"unknown suite", cells(trixie), suites, map[string]string{trixie: "forky"}, "no suite forky"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkKernels(tt.cells, downloads, tt.lister, tt.suites)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("checkKernels = %q, want %q", got, tt.want)
			}
			if strings.HasPrefix(tt.want, "unknown kernel") && !errors.Is(err, ErrUnknownKernel) {
				t.Errorf("checkKernels = %v, want ErrUnknownKernel", err)
			}
		})
	}
}

func TestKernelFlavor(t *testing.T) {
	for _, tt := range []struct{ release, want string }{
		{"6.1.0-56-cloud-amd64", "cloud-amd64"},
		{"6.12.117+deb12-cloud-amd64", "cloud-amd64"},
		{"6.1.0-56-amd64", "amd64"},
		{"6.1.0", ""},
	} {
		if got := kernelFlavor(tt.release); got != tt.want {
			t.Errorf("kernelFlavor(%q) = %q, want %q", tt.release, got, tt.want)
		}
	}
}

func TestShardString(t *testing.T) {
	if got, want := (Shard{Index: 2, Count: 5}).String(), "2/5"; got != want {
		t.Errorf("Shard.String = %q, want %q", got, want)
	}
}
