package follow

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/buildroot"
	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// testKernel is unpacked under the download cache (scripts/kernels.sh).
const testKernel = "6.1.0-56-cloud-amd64"

func downloads() string {
	if c := os.Getenv("KPRELOAD_CACHE"); c != "" {
		return c
	}
	return matrix.DefaultDownloadDir
}

// fakeDKMS stands in for dkms in these unit tests: a build copies the
// kernel's own dummy module.
type fakeDKMS struct {
	calls atomic.Int32
	fail  atomic.Bool // every build fails, as a driver that does not build on a kernel
}

func (f *fakeDKMS) Version(ctx context.Context, root *buildroot.Root) (string, error) {
	return "fake-dkms", nil
}

func (f *fakeDKMS) Build(ctx context.Context, req dkms.BuildRequest) (*dkms.BuildResult, error) {
	f.calls.Add(1)
	if f.fail.Load() {
		return nil, &dkms.BuildError{Name: "alpha", Version: "1.0", Kernel: req.Kernel, ExitCode: 10,
			FirstError: "error: implicit declaration of function 'pci_resize'", Err: errors.New("exit status 10")}
	}
	tree := filepath.Join(downloads(), "kernels", req.Kernel, "lib", "modules", req.Kernel, "kernel", "drivers", "net")
	found, _ := filepath.Glob(filepath.Join(tree, "dummy.ko*"))
	if len(found) != 1 {
		return nil, fmt.Errorf("fake build: no dummy module in %s", tree)
	}
	dst := filepath.Join(req.WorkDir, "module", filepath.Base(found[0]))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return nil, err
	}
	if err := fileutil.CopyFile(found[0], dst, 0o644); err != nil {
		return nil, err
	}
	log := filepath.Join(req.WorkDir, "make.log")
	if err := os.WriteFile(log, []byte("CC dummy.o\n"), 0o644); err != nil {
		return nil, err
	}
	return &dkms.BuildResult{Kernel: req.Kernel, Modules: []string{dst}, LogPath: log}, nil
}

// dates is a fake archive whose every package was published at one date.
type dates struct{ at time.Time }

func (d dates) Open(r *recipe.Recipe, suite string) (recipe.Carrier, string, error) {
	return d, suite, nil
}

func (d dates) Carried(ctx context.Context, name string) ([]archive.Carried, error) {
	return []archive.Carried{{Version: "1", Suite: "bookworm", Published: d.at}}, nil
}

// setup returns the options of a cycle over one fake recipe for
// testKernel, pushing to registry url through a client signing with a
// fresh key.
func setup(t *testing.T, url string, published time.Time) (Options, *fakeDKMS) {
	t.Helper()
	return setupIn(t, t.TempDir(), url, published)
}

// setupIn is setup with its source, caches and state under dir.
func setupIn(t *testing.T, dir, url string, published time.Time) (Options, *fakeDKMS) {
	t.Helper()
	testenv.KernelTree(t, testKernel) // its dummy module is what fakeDKMS builds; not in -short
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "PACKAGE_NAME=\"alpha\"\nPACKAGE_VERSION=\"1.0\"\nBUILT_MODULE_NAME[0]=\"dummy\"\n"
	if err := os.WriteFile(filepath.Join(src, "dkms.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &recipe.Recipe{Name: "alpha", Driver: recipe.Driver{Name: "alpha", Version: "1.0"}, Flavor: recipe.FlavorOpen,
		Source: recipe.Source{Dir: src}, Modules: []string{"dummy"}}
	f := &fakeDKMS{}
	return Options{
		Build: matrix.Options{
			Recipes: []*recipe.Recipe{r}, Kernels: []string{testKernel},
			CacheDir: filepath.Join(dir, "cache"), DownloadDir: downloads(),
			LogDir: filepath.Join(dir, "logs"), TempDir: t.TempDir(), Driver: f,
			Archives: dates{published},
			Remote:   openRemote(t, url, filepath.Join(t.TempDir(), "key"), false),
		},
		StateDir: filepath.Join(dir, "state"),
	}, f
}

func openRemote(t *testing.T, url, key string, stall bool) *remote.Remote {
	t.Helper()
	s, err := cellsign.Generate(key, key+".pub")
	if err != nil {
		t.Fatal(err)
	}
	rm, err := remote.Open("oci://"+url+"/follow", remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "none.json"), Signer: s, StallBeforeManifest: stall})
	if err != nil {
		t.Fatal(err)
	}
	return rm
}

// TestCycle: a first cycle builds and pushes the new cell with its dates;
// a second finds nothing new, builds nothing, keeps the first-seen date
// and takes under 10 s.
func TestCycle(t *testing.T) {
	reg := testenv.StartRegistry(t)
	published := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	o, f := setup(t, reg.Addr, published)
	ctx := context.Background()

	rep, err := Cycle(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(rep.New, rep.Failed, len(rep.Cells), f.calls.Load()), "1 0 1 1"; got != want {
		t.Fatalf("first cycle: new, failed, cells, builds = %s, want %s: %+v", got, want, rep.Cells)
	}
	c := rep.Cells[0]
	if !c.New || c.Published == nil || !c.Published.Equal(published) || c.Pushed == nil || c.LagSeconds == nil {
		t.Fatalf("first cycle's row: %+v, want new, published %s, pushed, a lag", c, published)
	}
	if lag := c.Pushed.Sub(published).Seconds(); *c.LagSeconds != lag {
		t.Errorf("lag %v, want %v", *c.LagSeconds, lag)
	}

	// The archive's Release moves on (a later Date): the first-seen date stays.
	o.Build.Archives = dates{published.Add(24 * time.Hour)}
	o.Build.CacheDir = filepath.Join(t.TempDir(), "fresh-cache") // another builder
	start := time.Now()
	rep2, err := Cycle(ctx, o)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if rep2.New != 0 || rep2.Failed != 0 || f.calls.Load() != 1 {
		t.Fatalf("second cycle: new %d, failed %d, builds %d, want 0 0 1: %+v", rep2.New, rep2.Failed, f.calls.Load(), rep2.Cells)
	}
	c2 := rep2.Cells[0]
	if c2.New || !c2.Published.Equal(published) || !c2.Pushed.Equal(*c.Pushed) {
		t.Errorf("second cycle's row: %+v, want not new, published %s, pushed %s", c2, published, c.Pushed)
	}
	t.Logf("cycle with nothing new: %s (scripts/bench-follow.sh measures it)", took)
	var b strings.Builder
	if err := rep2.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"KERNEL", "PUBLISHED", "LAG", testKernel, "2026-11-20 08:00Z", "1 cells: 0 new, 0 failed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestCycleKnownFailure: a cell that fails to build is a failure of its
// cycle (recorded in the registry); the next cycle, on another builder,
// does not rebuild it, lists it as a known failure and is no failure: an
// unattended cycle over a driver that cannot build on one kernel does not
// fail forever. A cycle with --retry-failed rebuilds it.
func TestCycleKnownFailure(t *testing.T) {
	reg := testenv.StartRegistry(t)
	o, f := setup(t, reg.Addr, time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC))
	f.fail.Store(true)
	ctx := context.Background()

	rep, err := Cycle(ctx, o)
	if err == nil || rep == nil || rep.Failed != 1 || rep.KnownFailures != 0 {
		t.Fatalf("first cycle: %v, %+v; want an error and 1 failed", err, rep)
	}
	o.Build.CacheDir = filepath.Join(t.TempDir(), "another-builder")
	rep, err = Cycle(ctx, o)
	if err != nil {
		t.Fatalf("second cycle over a recorded failure: %v\n%+v", err, rep.Cells)
	}
	if got, want := fmt.Sprint(rep.New, rep.Failed, rep.KnownFailures, f.calls.Load()), "0 0 1 1"; got != want {
		t.Fatalf("second cycle: new, failed, known, builds = %s, want %s: %+v", got, want, rep.Cells)
	}
	if c := rep.Cells[0]; !strings.Contains(c.Error, "pci_resize") {
		t.Errorf("known failure's row: %+v, want the recorded error", c)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if want := "0 failed, 1 known failures"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}

	o.Build.RetryFailed = true
	if rep, err = Cycle(ctx, o); err == nil || rep.Failed != 1 || f.calls.Load() != 2 {
		t.Fatalf("cycle with retry-failed: %v, %+v, builds %d; want it rebuilt and failed", err, rep, f.calls.Load())
	}
}

// TestCycleLocked: while a cycle holds the lock (or a killed one held it),
// another builds nothing and says so; once it is free the cycle runs.
func TestCycleLocked(t *testing.T) {
	reg := testenv.StartRegistry(t)
	o, f := setup(t, reg.Addr, time.Time{})
	unlock, err := lock(context.Background(), o.StateDir, LockFile, false)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Cycle(context.Background(), o)
	if !errors.Is(err, ErrRunning) || rep != nil || f.calls.Load() != 0 {
		t.Fatalf("cycle beside another: %v (report %v, %d builds), want ErrRunning and nothing built", err, rep, f.calls.Load())
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("error %q does not name the running cycle", err)
	}
	// --wait: waits for the other cycle.
	o.Wait = true
	go func() { time.Sleep(500 * time.Millisecond); unlock() }()
	rep, err = Cycle(context.Background(), o)
	if err != nil || rep.New != 1 {
		t.Fatalf("waiting cycle: %v, %+v", err, rep)
	}
}

// TestCycleRegistryFails: a registry that fails mid-cycle (its manifest
// uploads refused) makes a failed cycle that names the push; the next
// cycle pushes the cell built before without building it again.
func TestCycleRegistryFails(t *testing.T) {
	reg := testenv.StartRegistry(t)
	target, _ := url.Parse("http://" + reg.Addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var failing atomic.Bool
	failing.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/") {
			http.Error(w, "registry down", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	o, f := setup(t, strings.TrimPrefix(srv.URL, "http://"), time.Time{})
	rep, err := Cycle(context.Background(), o)
	if err == nil || !errors.Is(err, matrix.ErrPushFailed) || rep == nil || rep.Failed != 1 || rep.New != 0 {
		t.Fatalf("cycle with a failing registry: %v, %+v; want a push failure, nothing new", err, rep)
	}
	if !strings.Contains(rep.Cells[0].Error, "503") && !strings.Contains(rep.Cells[0].Error, "registry down") && !strings.Contains(rep.Cells[0].Error, "Service Unavailable") {
		t.Errorf("row error %q does not say what the registry answered", rep.Cells[0].Error)
	}
	failing.Store(false)
	rep, err = Cycle(context.Background(), o)
	if err != nil || rep.New != 1 || f.calls.Load() != 1 {
		t.Fatalf("next cycle: %v, %+v, %d builds; want the cell pushed, built once", err, rep, f.calls.Load())
	}
}
