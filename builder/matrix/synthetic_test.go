package matrix

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/dkms/dkmstest"
	"github.com/kpreload/kpreload/builder/internal/runner/runnertest"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// synthKernels are releases no Debian archive has: the synthetic tests'
// kernels, unpacked by testenv.SyntheticKernel.
var synthKernels = []string{"6.1.0-901-cloud-amd64", "6.1.0-902-cloud-amd64"}

// synth is a download directory of synthetic kernels and a fake dkms that
// "builds" a synthetic module named dummy for each of them: Run's whole
// path (kernel check, inputs, key, cache, dkms, modules kept, logs) with
// no network and no compiler but gcc making the modules once.
type synth struct {
	downloads string
	kernels   []string
	driver    *dkmstest.Driver
}

func newSynth(t *testing.T, kernels ...string) *synth {
	t.Helper()
	s := &synth{downloads: t.TempDir(), kernels: kernels}
	mods := map[string]string{}
	for _, k := range kernels {
		testenv.SyntheticKernel(t, s.downloads, k)
		mods[k] = testenv.SyntheticModule(t, "dummy", k)
	}
	s.driver = &dkmstest.Driver{Modules: func(k string) ([]string, error) {
		m, ok := mods[k]
		if !ok {
			return nil, fmt.Errorf("no synthetic module for %s", k)
		}
		return []string{m}, nil
	}}
	return s
}

// options are Run's options over s for recipes, each on every kernel, with
// a lister that offers nothing beyond s's kernels.
func (s *synth) options(t *testing.T, recipes ...*recipe.Recipe) Options {
	t.Helper()
	return Options{
		Recipes:     recipes,
		Kernels:     s.kernels,
		Lister:      recipe.ListerFunc(func() ([]string, error) { return s.kernels, nil }),
		CacheDir:    filepath.Join(t.TempDir(), "cache"),
		DownloadDir: s.downloads,
		LogDir:      filepath.Join(t.TempDir(), "logs"),
		TempDir:     t.TempDir(),
		Driver:      s.driver,
	}
}

func states(results []Result) map[string]string {
	m := map[string]string{}
	for _, r := range results {
		m[r.Recipe.Name+"/"+r.Kernel] = r.State
	}
	return m
}

// TestRunSynthetic runs a 2×2 matrix twice: the first run builds every cell
// (one fails to compile, one is excluded by BUILD_EXCLUSIVE), keeps the
// logs and reports each cell's states in order; the second finds the built
// cells in the cache under the same keys and compiles nothing new.
func TestRunSynthetic(t *testing.T) {
	s := newSynth(t, synthKernels...)
	alpha, beta := fakeRecipe(t, "alpha"), fakeRecipe(t, "beta")
	s.driver.Fail = func(req dkms.BuildRequest) bool {
		return req.SourceDir == beta.Source.Dir && req.Kernel == synthKernels[1]
	}
	s.driver.Exclusive = func(req dkms.BuildRequest) bool {
		return req.SourceDir == beta.Source.Dir && req.Kernel == synthKernels[0]
	}
	opts := s.options(t, alpha, beta)
	var mu sync.Mutex
	seen := map[int][]string{}
	opts.Progress = func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		seen[e.Index] = append(seen[e.Index], e.State)
	}
	ctx := context.Background()
	results, err := Run(ctx, opts)
	if !errors.Is(err, ErrCellsFailed) || !strings.Contains(err.Error(), "1 of 4 cells failed (beta/"+synthKernels[1]+")") {
		t.Errorf("Run error = %v, want ErrCellsFailed naming beta/%s", err, synthKernels[1])
	}
	want := map[string]string{
		"alpha/" + synthKernels[0]: StateOK,
		"alpha/" + synthKernels[1]: StateOK,
		"beta/" + synthKernels[0]:  StateSkipped,
		"beta/" + synthKernels[1]:  StateFailed,
	}
	if got := states(results); !mapsEqual(got, want) {
		t.Errorf("states = %v, want %v", got, want)
	}
	wantEvents := map[string][]string{
		StateOK:      {StateQueued, StatePreparing, StateBuilding, StateOK},
		StateSkipped: {StateQueued, StatePreparing, StateBuilding, StateSkipped},
		StateFailed:  {StateQueued, StatePreparing, StateBuilding, StateFailed},
	}
	for i, res := range results {
		if got := seen[i]; !slices.Equal(got, wantEvents[res.State]) {
			t.Errorf("cell %d (%s/%s) events = %v, want %v", i, res.Recipe.Name, res.Kernel, got, wantEvents[res.State])
		}
		if res.KernelDir != filepath.Join(s.downloads, "kernels", res.Kernel) {
			t.Errorf("cell %d KernelDir = %q, want the synthetic kernel", i, res.KernelDir)
		}
		if res.Key["kernel"] != res.Kernel || res.Key["dkms"] != "dkmstest" {
			t.Errorf("cell %d key = %v, want kernel %s and dkms dkmstest", i, res.Key, res.Kernel)
		}
	}
	byName := byCell(results)
	failed := byName["beta/"+synthKernels[1]]
	if failed.FirstError != dkmstest.FirstError {
		t.Errorf("failed cell FirstError = %q, want %q", failed.FirstError, dkmstest.FirstError)
	}
	if want := filepath.Join(opts.LogDir, "beta_"+synthKernels[1]+".log"); failed.LogPath != want {
		t.Errorf("failed cell LogPath = %q, want %q", failed.LogPath, want)
	} else if b, err := os.ReadFile(want); err != nil || !strings.Contains(string(b), dkmstest.FirstError) {
		t.Errorf("kept log %s = %q, %v; want the compiler error", want, b, err)
	}
	ok := byName["alpha/"+synthKernels[0]]
	st, err := store.Open(opts.CacheDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Get(ok.SetID)
	if err != nil {
		t.Fatalf("built set %q: %v", ok.SetID, err)
	}
	// The synthetic kernels take init_module: zstd (ModuleCompression).
	if m.Kernel != synthKernels[0] || len(m.Modules) != 1 || m.Modules[0].File != "dummy.ko.zst" || m.Modules[0].Compression != "zstd" {
		t.Errorf("built set = kernel %s, modules %+v; want %s with dummy.ko.zst", m.Kernel, m.Modules, synthKernels[0])
	}
	builds := len(s.driver.Requests())

	// Again: the cache answers, under the same keys; only the failure and
	// the excluded cell are tried again (no remote records them).
	again, err := Run(ctx, opts)
	if !errors.Is(err, ErrCellsFailed) {
		t.Errorf("second Run error = %v, want ErrCellsFailed", err)
	}
	for i, res := range again {
		wantState := results[i].State
		if wantState == StateOK {
			wantState = StateCached
		}
		if res.State != wantState || (res.State == StateCached && res.SetID != results[i].SetID) || !mapsEqual(res.Key, results[i].Key) {
			t.Errorf("second run cell %d = %s %s, want %s %s under the same key", i, res.State, res.SetID, wantState, results[i].SetID)
		}
	}
	if got := len(s.driver.Requests()) - builds; got != 2 {
		t.Errorf("second run asked dkms %d times, want 2 (the failure and the excluded cell)", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestRunSyntheticFetchOnly computes the keys without compiling; the keys
// are the ones a build then uses.
func TestRunSyntheticFetchOnly(t *testing.T) {
	s := newSynth(t, synthKernels...)
	opts := s.options(t, fakeRecipe(t, "alpha"))
	opts.FetchOnly = true
	fetched, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.driver.Requests()); n != 0 {
		t.Errorf("fetch-only asked dkms %d times, want 0", n)
	}
	opts.FetchOnly = false
	built, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fetched {
		if fetched[i].State != StateFetched || built[i].State != StateOK || !mapsEqual(fetched[i].Key, built[i].Key) {
			t.Errorf("cell %d: fetch-only %s %v, build %s %v; want fetched then ok under one key", i, fetched[i].State, fetched[i].Key, built[i].State, built[i].Key)
		}
	}
}

// TestRunRefuses: what Run refuses before building anything, with the
// message a user sees.
func TestRunRefuses(t *testing.T) {
	s := newSynth(t, synthKernels[0])
	alpha := fakeRecipe(t, "alpha")
	tests := []struct {
		name string
		edit func(o *Options)
		want string
		is   error
	}{
		{"no recipes", func(o *Options) { o.Recipes = nil }, "build: no recipes", nil},
		{"no cache", func(o *Options) { o.CacheDir = "" }, "build: no cache directory", nil},
		{"no cells", func(o *Options) { o.RecipeKernels = map[*recipe.Recipe][]string{alpha: {}} }, "build: the request has no cells (no kernels)", nil},
		{"pull-only without remote", func(o *Options) { o.PullOnly = true }, "build: pull-only needs a remote cache", nil},
		{"fetch-only and pull-only", func(o *Options) { o.FetchOnly, o.PullOnly = true, true }, "build: pull-only needs a remote cache", nil},
		{"bad shard", func(o *Options) { o.Shard = Shard{Index: 3, Count: 2} }, "build: shard 3/2", nil},
		{"unknown kernel", func(o *Options) { o.Kernels = []string{"6.1.0-999-cloud-amd64"} },
			"build: unknown kernel 6.1.0-999-cloud-amd64: not unpacked in " + filepath.Join(s.downloads, "kernels") + " and not in the apt archive; available: unpacked: " + synthKernels[0] + "; archive, cloud-amd64: " + synthKernels[0], ErrUnknownKernel},
		{"lister fails", func(o *Options) {
			o.Kernels = []string{"6.1.0-999-cloud-amd64"}
			o.Lister = recipe.ListerFunc(func() ([]string, error) { return nil, errors.New("apt is down") })
		}, "build: kernels 6.1.0-999-cloud-amd64 are not unpacked in " + filepath.Join(s.downloads, "kernels") + ", and the archive cannot be asked: apt is down", nil},
		{"matrix from a failing lister", func(o *Options) {
			o.Kernels, o.Recipes = nil, []*recipe.Recipe{selecting(alpha, 1)}
			o.Lister = recipe.ListerFunc(func() ([]string, error) { return nil, errors.New("apt is down") })
		}, "build: kernel matrix:", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := s.options(t, alpha)
			tt.edit(&opts)
			res, err := Run(context.Background(), opts)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Run error = %v, want %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("Run error = %v, want it to wrap %v", err, tt.is)
			}
			if res != nil {
				t.Errorf("Run results = %v, want none", res)
			}
			if n := len(s.driver.Requests()); n != 0 {
				t.Errorf("dkms asked %d times, want 0", n)
			}
		})
	}
}

// TestRunSyntheticShards: the shards of a matrix cover it once.
func TestRunSyntheticShards(t *testing.T) {
	s := newSynth(t, synthKernels...)
	recipes := []*recipe.Recipe{fakeRecipe(t, "alpha"), fakeRecipe(t, "beta"), fakeRecipe(t, "gamma")}
	seen := map[string]int{}
	for i := 1; i <= 4; i++ {
		opts := s.options(t, recipes...)
		opts.Shard = Shard{Index: i, Count: 4}
		results, err := Run(context.Background(), opts)
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		for _, r := range results {
			seen[r.Recipe.Name+"/"+r.Kernel]++
		}
	}
	if len(seen) != 6 {
		t.Errorf("shards ran %v, want the 6 cells", seen)
	}
	for c, n := range seen {
		if n != 1 {
			t.Errorf("cell %s ran %d times, want once", c, n)
		}
	}
	opts := s.options(t, recipes[0])
	opts.Shard = Shard{Index: 5, Count: 5}
	if res, err := Run(context.Background(), opts); err != nil || len(res) != 0 {
		t.Errorf("a shard beyond the cells: %v, %v; want no cells, no error", res, err)
	}
}

// TestRunCancelled: a cancelled run fails its cells and says so.
func TestRunCancelled(t *testing.T) {
	s := newSynth(t, synthKernels[0])
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	results, err := Run(ctx, s.options(t, fakeRecipe(t, "alpha")))
	if !errors.Is(err, context.Canceled) || len(results) != 1 || results[0].State != StateFailed {
		t.Errorf("cancelled Run = %v, %v; want one failed cell and context.Canceled", results, err)
	}
}

// TestRunSyntheticSignsThroughTools: a recipe with a signing key has every
// module signed with the kernel's sign-file, run through Options.Tools, and
// the certificate's id in its key.
func TestRunSyntheticSignsThroughTools(t *testing.T) {
	s := newSynth(t, synthKernels[0])
	signFile := filepath.Join(s.downloads, "kernels", synthKernels[0], "usr", "src", "linux-headers-"+synthKernels[0], "scripts", "sign-file")
	if err := os.WriteFile(signFile, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	key, cert := signingPair(t, t.TempDir(), "synthetic")
	r := fakeRecipe(t, "alpha")
	r.Signing = &recipe.Signing{Key: key, Cert: cert}
	opts := s.options(t, r)
	tools := &runnertest.Recorder{}
	opts.Tools = tools
	results, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	id, err := dkms.CertID(cert)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := results[0].Key["signing_key"], id+" "+recipe.DefaultSignHash; got != want {
		t.Errorf("key signing_key = %q, want %q", got, want)
	}
	signs := tools.Ran(signFile)
	if len(signs) != 1 || !strings.Contains(signs[0], " "+recipe.DefaultSignHash+" "+key+" "+cert+" ") || !strings.HasSuffix(signs[0], "dummy.ko") {
		t.Errorf("sign-file runs through Tools = %q, want one: sign-file %s KEY CERT .../dummy.ko", signs, recipe.DefaultSignHash)
	}
}

// selecting is a copy of r whose matrix is the newest n 6.1 cloud kernels.
func selecting(r *recipe.Recipe, n int) *recipe.Recipe {
	c := *r
	c.Kernels = recipe.Matrix{Select: []recipe.Selector{{Series: "6.1", Flavor: "cloud-amd64", Newest: n}}}
	return &c
}

// TestRunSyntheticMatrixFromLister: without Kernels, a recipe's selectors
// pick its kernels from the lister, and the same lister answers the kernel
// check: the archive is asked once.
func TestRunSyntheticMatrixFromLister(t *testing.T) {
	s := newSynth(t, synthKernels...)
	opts := s.options(t, selecting(fakeRecipe(t, "alpha"), 1))
	opts.Kernels = nil
	calls := 0
	opts.Lister = recipe.ListerFunc(func() ([]string, error) {
		calls++
		return append([]string{"6.1.0-903-cloud-amd64"}, s.kernels...), nil
	})
	// 903 is offered but not unpacked: the check asks the lister again,
	// and fetching it would need the network, so only the cells' list is
	// compared, through Cells.
	cells, err := Cells(opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 1 || cells[0].Kernel != "6.1.0-903-cloud-amd64" {
		t.Errorf("Cells = %v, want the newest offered kernel", cells)
	}
	calls = 0
	opts.Lister = recipe.ListerFunc(func() ([]string, error) {
		calls++
		return s.kernels, nil
	})
	results, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Kernel != synthKernels[1] || results[0].State != StateOK {
		t.Errorf("Run = %+v, want %s built", results, synthKernels[1])
	}
	if calls != 1 {
		t.Errorf("the lister was asked %d times, want 1 (the matrix; the kernel is unpacked)", calls)
	}
}
