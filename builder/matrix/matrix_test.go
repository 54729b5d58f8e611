package matrix

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// fakeOptions returns Options for recipes built with driver into a fresh
// cache, log and temp directory, over the test kernels.
func fakeOptions(t *testing.T, driver dkms.Driver, recipes ...*recipe.Recipe) Options {
	t.Helper()
	requireKernels(t)
	return Options{
		Recipes:     recipes,
		Kernels:     testKernels,
		CacheDir:    filepath.Join(t.TempDir(), "cache"),
		DownloadDir: downloadDir(),
		LogDir:      filepath.Join(t.TempDir(), "logs"),
		TempDir:     t.TempDir(),
		Driver:      driver,
	}
}

func TestParallelism(t *testing.T) {
	tests := []struct {
		jobs, cells, cpus int
		workers, makeJobs int
	}{
		{jobs: 0, cells: 4, cpus: 2, workers: 1, makeJobs: 2},
		{jobs: 0, cells: 4, cpus: 8, workers: 4, makeJobs: 2},
		{jobs: 0, cells: 2, cpus: 16, workers: 2, makeJobs: 8},
		{jobs: 0, cells: 4, cpus: 1, workers: 1, makeJobs: 1},
		{jobs: 3, cells: 4, cpus: 2, workers: 3, makeJobs: 1},
		{jobs: 8, cells: 2, cpus: 4, workers: 2, makeJobs: 2},
		{jobs: 1, cells: 0, cpus: 4, workers: 1, makeJobs: 4},
	}
	for _, tt := range tests {
		w, m := parallelism(tt.jobs, tt.cells, tt.cpus)
		if w != tt.workers || m != tt.makeJobs {
			t.Errorf("parallelism(%d, %d, %d) = %d, %d, want %d, %d", tt.jobs, tt.cells, tt.cpus, w, m, tt.workers, tt.makeJobs)
		}
	}
}

// TestRunParallel checks that Jobs cells build at the same time and never more.
func TestRunParallel(t *testing.T) {
	for _, jobs := range []int{1, 2} {
		f := &fakeDriver{barrier: jobs}
		opts := fakeOptions(t, f, fakeRecipe(t, "alpha"), fakeRecipe(t, "beta"))
		opts.Jobs = jobs
		var mu sync.Mutex
		var states []string
		opts.Progress = func(e Event) {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, e.Cell.Recipe.Name+"/"+e.Cell.Kernel+":"+e.State)
		}
		results, err := Run(context.Background(), opts)
		if err != nil {
			t.Fatalf("Run(jobs=%d): %v", jobs, err)
		}
		if len(results) != 4 {
			t.Fatalf("Run(jobs=%d) gave %d results, want 4", jobs, len(results))
		}
		for _, r := range results {
			if r.State != StateOK {
				t.Errorf("jobs=%d: cell %s/%s = %s (%v), want ok", jobs, r.Recipe.Name, r.Kernel, r.State, r.Err)
			}
		}
		if f.barrierMissed {
			t.Errorf("jobs=%d: builds did not run %d at a time", jobs, jobs)
		}
		if got := int(f.maxInflight.Load()); got != jobs {
			t.Errorf("jobs=%d: at most %d builds ran at once, want %d", jobs, got, jobs)
		}
		wantMake := max(1, runtime.NumCPU()/jobs)
		for _, req := range f.reqs {
			if req.Jobs != wantMake {
				t.Errorf("jobs=%d: dkms got -j %d, want %d", jobs, req.Jobs, wantMake)
			}
			if !strings.HasPrefix(req.WorkDir, opts.TempDir) {
				t.Errorf("jobs=%d: WorkDir %s is not under TempDir %s", jobs, req.WorkDir, opts.TempDir)
			}
		}
		for _, want := range []string{"alpha/" + testKernels[0] + ":queued", "alpha/" + testKernels[0] + ":building", "beta/" + testKernels[1] + ":ok"} {
			if !slices.Contains(states, want) {
				t.Errorf("jobs=%d: progress events %v lack %s", jobs, states, want)
			}
		}
		if left, _ := os.ReadDir(opts.TempDir); len(left) != 0 {
			t.Errorf("jobs=%d: Run left %d entries in TempDir", jobs, len(left))
		}
	}
}

// TestRunFailureIsolated checks that one failed cell leaves the others built
// and stored, reports the first error and keeps the log.
func TestRunFailureIsolated(t *testing.T) {
	alpha, beta := fakeRecipe(t, "alpha"), fakeRecipe(t, "beta")
	f := &fakeDriver{fail: func(req dkms.BuildRequest) bool {
		return req.SourceDir == beta.Source.Dir && req.Kernel == testKernels[1]
	}}
	opts := fakeOptions(t, f, alpha, beta)
	opts.Jobs = 2
	results, err := Run(context.Background(), opts)
	if !errors.Is(err, ErrCellsFailed) {
		t.Fatalf("Run error = %v, want ErrCellsFailed", err)
	}
	got := byCell(results)
	for cell, want := range map[string]string{
		"alpha/" + testKernels[0]: StateOK,
		"alpha/" + testKernels[1]: StateOK,
		"beta/" + testKernels[0]:  StateOK,
		"beta/" + testKernels[1]:  StateFailed,
	} {
		if got[cell].State != want {
			t.Errorf("cell %s = %s (%v), want %s", cell, got[cell].State, got[cell].Err, want)
		}
	}
	bad := got["beta/"+testKernels[1]]
	if want := "fake.c:1:1: error: expected ';' before '}' token"; bad.FirstError != want {
		t.Errorf("failed cell FirstError = %q, want %q", bad.FirstError, want)
	}
	if !strings.HasPrefix(bad.LogPath, opts.LogDir) {
		t.Errorf("failed cell LogPath = %q, want a file under %s", bad.LogPath, opts.LogDir)
	}
	if log, err := os.ReadFile(bad.LogPath); err != nil || !strings.Contains(string(log), bad.FirstError) {
		t.Errorf("kept log %s = %q, %v; want it to hold the first error", bad.LogPath, log, err)
	}
	st, err := store.Open(opts.CacheDir)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	var sets []string
	for _, e := range entries {
		sets = append(sets, e.Driver+"/"+e.Kernel)
		if e.Modules != 1 {
			t.Errorf("set %s/%s has %d modules, want 1 (only dummy, not ifb)", e.Driver, e.Kernel, e.Modules)
		}
	}
	slices.Sort(sets)
	want := []string{"alpha/" + testKernels[0], "alpha/" + testKernels[1], "beta/" + testKernels[0]}
	if !slices.Equal(sets, want) {
		t.Errorf("cache sets = %v, want %v", sets, want)
	}
	// The kept module is named after the recipe, found by its modinfo name.
	m, err := st.Get(got["alpha/"+testKernels[1]].SetID)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Modules) != 1 || m.Modules[0].Name != "dummy" || m.Modules[0].File != "dummy.ko.zst" {
		t.Errorf("set modules = %+v, want one dummy.ko.zst named dummy", m.Modules)
	}
}

// TestRunCached checks that a second run finds every cell in the cache and
// builds nothing, and that a changed source builds again.
func TestRunCached(t *testing.T) {
	f := &fakeDriver{}
	r := fakeRecipe(t, "alpha")
	opts := fakeOptions(t, f, r)
	first, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("first Run: %v", err)
	}
	if got := f.calls.Load(); got != 2 {
		t.Fatalf("first Run built %d cells, want 2", got)
	}
	second, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if got := f.calls.Load(); got != 2 {
		t.Errorf("second Run built %d cells, want 0", got-2)
	}
	for i, res := range second {
		if res.State != StateCached || res.SetID != first[i].SetID {
			t.Errorf("second Run cell %s = %s set %s, want cached set %s", res.Kernel, res.State, res.SetID, first[i].SetID)
		}
	}
	if err := os.WriteFile(filepath.Join(r.Source.Dir, "extra.c"), []byte("int x;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	third, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("third Run: %v", err)
	}
	if got := f.calls.Load(); got != 4 {
		t.Errorf("Run after a source change built %d cells, want 2", got-2)
	}
	for i, res := range third {
		if res.State != StateOK || res.Key["source_sha256"] == first[i].Key["source_sha256"] {
			t.Errorf("Run after a source change: cell %s = %s, source digest %s (was %s), want ok with a new digest", res.Kernel, res.State, res.Key["source_sha256"], first[i].Key["source_sha256"])
		}
	}
}

// TestRunFetchOnly checks that FetchOnly prepares every cell and computes
// its key without building, that the keys are those a real run caches under,
// and that a cached cell stays cached.
func TestRunFetchOnly(t *testing.T) {
	f := &fakeDriver{}
	r := fakeRecipe(t, "alpha")
	opts := fakeOptions(t, f, r)
	opts.FetchOnly = true
	fetched, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("fetch-only Run: %v", err)
	}
	if got := f.calls.Load(); got != 0 {
		t.Fatalf("fetch-only Run built %d cells, want 0", got)
	}
	for _, res := range fetched {
		if res.State != StateFetched || res.Key == nil || res.SourceDir == "" || res.KernelDir == "" {
			t.Errorf("fetch-only cell %s = %s (key %v, source %q, kernel %q), want fetched with key, source and kernel", res.Kernel, res.State, res.Key != nil, res.SourceDir, res.KernelDir)
		}
	}
	opts.FetchOnly = false
	built, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i, res := range built {
		if got, want := res.Key["source_sha256"], fetched[i].Key["source_sha256"]; res.State != StateOK || got != want {
			t.Errorf("cell %s = %s, source key %s, want ok with the fetched key %s", res.Kernel, res.State, got, want)
		}
	}
	opts.FetchOnly = true
	again, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("fetch-only Run after the build: %v", err)
	}
	for i, res := range again {
		if res.State != StateCached || res.SetID != built[i].SetID {
			t.Errorf("fetch-only after the build: cell %s = %s set %s, want cached set %s", res.Kernel, res.State, res.SetID, built[i].SetID)
		}
	}
	if got := f.calls.Load(); got != int32(len(built)) {
		t.Errorf("dkms ran %d times, want %d (the one real run)", got, len(built))
	}
}

// TestRunMissingModule checks that a build lacking a recipe module fails.
func TestRunMissingModule(t *testing.T) {
	r := fakeRecipe(t, "alpha")
	r.Modules = []string{"dummy", "not-built"}
	opts := fakeOptions(t, &fakeDriver{}, r)
	opts.Kernels = testKernels[:1]
	results, err := Run(context.Background(), opts)
	if !errors.Is(err, ErrCellsFailed) {
		t.Fatalf("Run error = %v, want ErrCellsFailed", err)
	}
	if res := results[0]; res.State != StateFailed || !strings.Contains(res.FirstError, "did not build module(s) not-built") {
		t.Errorf("cell = %s %q, want failed naming not-built", res.State, res.FirstError)
	}
}

// TestRunCancel checks that cancelling stops the builds, returns the
// context's error and removes the work directories.
func TestRunCancel(t *testing.T) {
	f := &fakeDriver{block: true, started: make(chan struct{})}
	opts := fakeOptions(t, f, fakeRecipe(t, "alpha"))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-f.started
		cancel()
	}()
	results, err := Run(ctx, opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run error = %v, want context.Canceled", err)
	}
	for _, res := range results {
		if res.State != StateFailed {
			t.Errorf("cancelled cell %s = %s, want failed", res.Kernel, res.State)
		}
	}
	if got := f.calls.Load(); got != 1 {
		t.Errorf("%d builds started, want 1 (the rest cancelled before starting)", got)
	}
	if left, _ := os.ReadDir(opts.TempDir); len(left) != 0 {
		t.Errorf("Run left %d entries in TempDir", len(left))
	}
	st, err := store.Open(opts.CacheDir)
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := st.List(); len(entries) != 0 {
		t.Errorf("cancelled Run left %d sets in the cache, want 0", len(entries))
	}
}

func TestTreeDigest(t *testing.T) {
	base := func(t *testing.T) string {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string]string{"dkms.conf": "PACKAGE_NAME=x\n", "sub/a.c": "int a;\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	ref, err := treeDigest(context.Background(), base(t))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(dir string) error
		same   bool
	}{
		{"unchanged copy", func(string) error { return nil }, true},
		{"content", func(d string) error { return os.WriteFile(filepath.Join(d, "sub/a.c"), []byte("int b;\n"), 0o644) }, false},
		{"rename", func(d string) error { return os.Rename(filepath.Join(d, "sub/a.c"), filepath.Join(d, "sub/b.c")) }, false},
		{"new file", func(d string) error { return os.WriteFile(filepath.Join(d, "c.h"), nil, 0o644) }, false},
		{"exec bit", func(d string) error { return os.Chmod(filepath.Join(d, "sub/a.c"), 0o755) }, false},
		{"symlink", func(d string) error { return os.Symlink("sub/a.c", filepath.Join(d, "link")) }, false},
	}
	for _, tt := range tests {
		dir := base(t)
		if err := tt.change(dir); err != nil {
			t.Fatal(err)
		}
		got, err := treeDigest(context.Background(), dir)
		if err != nil {
			t.Fatalf("treeDigest(%s): %v", tt.name, err)
		}
		if (got == ref) != tt.same {
			t.Errorf("treeDigest after %s = %s, reference %s: same = %t, want %t", tt.name, got, ref, got == ref, tt.same)
		}
	}
}

func TestTrimWorkPath(t *testing.T) {
	tree := "/var/lib/dkms"
	tests := []struct{ in, want string }{
		{tree + "/kpreload-edu/1.0.0/build/kpreload_edu.c:80:51: error: expected ';'", "kpreload_edu.c:80:51: error: expected ';'"},
		{tree + "/nvidia/1/build/nvidia/os.c:1:2: error: x", "nvidia/os.c:1:2: error: x"},
		{"ERROR: modpost: \"foo\" [" + tree + "/x/1/x.ko] undefined!", "ERROR: modpost: \"foo\" [" + tree + "/x/1/x.ko] undefined!"},
		{"/elsewhere/build/a.c:1:1: error: y", "/elsewhere/build/a.c:1:1: error: y"},
	}
	for _, tt := range tests {
		if got := trimWorkPath(tt.in); got != tt.want {
			t.Errorf("trimWorkPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
