package matrix

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/testsupport/buildtest"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/buildroot"
	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
)

// testKernels are the kernels of scripts/lib.sh's default matrix.
var testKernels = []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"}

// downloadDir is where kernels are unpacked (builder/archive, scripts/kernels.sh).
func downloadDir() string {
	if c := os.Getenv("KPRELOAD_CACHE"); c != "" {
		return c
	}
	return DefaultDownloadDir
}

// requireKernels makes sure the test kernels are unpacked, fetching missing
// ones as the matrix does (archive.FetchKernel: kept when already there);
// under -short it skips the test (testenv.SkipShort).
func requireKernels(t *testing.T) {
	t.Helper()
	testenv.SkipShort(t, "needs the Debian kernels "+strings.Join(testKernels, ", ")+" (fetched from Debian's archive when missing)")
	for _, kver := range testKernels {
		a, err := archive.New(archive.KernelSuite(kver), downloadDir())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.FetchKernel(context.Background(), kver, downloadDir(), nil); err != nil {
			t.Fatalf("fetch kernel %s: %v", kver, err)
		}
	}
}

// fakeRecipe returns a recipe whose source is a fresh directory with a
// dkms.conf and which keeps the module "dummy".
func fakeRecipe(t *testing.T, name string) *recipe.Recipe {
	t.Helper()
	dir := t.TempDir()
	conf := fmt.Sprintf("PACKAGE_NAME=%q\nPACKAGE_VERSION=\"1.0\"\nBUILT_MODULE_NAME[0]=\"dummy\"\n", name)
	if err := os.WriteFile(filepath.Join(dir, "dkms.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return &recipe.Recipe{
		Name:    name,
		Driver:  recipe.Driver{Name: name, Version: "1.0"},
		Flavor:  recipe.FlavorOpen,
		Source:  recipe.Source{Dir: dir},
		Modules: []string{"dummy"},
	}
}

// fakeDriver stands in for dkms: it "builds" a cell by copying the kernel's
// own dummy module into WorkDir under a dkms-style renamed file name
// (renamed-dummy.ko*, so the module must be found by its modinfo name), plus
// the kernel's ifb module, which no recipe keeps.
type fakeDriver struct {
	// fail reports whether the build of req fails.
	fail func(req dkms.BuildRequest) bool
	// barrier, if > 0, makes each build wait (up to 10 s) until that many
	// builds have started, to prove they run at the same time.
	barrier int
	// block, if set, makes builds wait for ctx to end.
	block bool
	// started is closed by the first build.
	started   chan struct{}
	startOnce sync.Once

	calls, inflight, maxInflight atomic.Int32
	mu                           sync.Mutex
	reqs                         []dkms.BuildRequest
	barrierMissed                bool
}

// Version implements dkms.Driver.
func (f *fakeDriver) Version(ctx context.Context, root *buildroot.Root) (string, error) {
	return "fake-dkms", nil
}

// Build implements dkms.Driver.
func (f *fakeDriver) Build(ctx context.Context, req dkms.BuildRequest) (*dkms.BuildResult, error) {
	n := f.calls.Add(1)
	in := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		m := f.maxInflight.Load()
		if in <= m || f.maxInflight.CompareAndSwap(m, in) {
			break
		}
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	if f.started != nil {
		f.startOnce.Do(func() { close(f.started) })
	}
	if f.barrier > 0 {
		deadline := time.Now().Add(10 * time.Second)
		for f.calls.Load() < int32(f.barrier) && n <= int32(f.barrier) {
			if time.Now().After(deadline) {
				f.mu.Lock()
				f.barrierMissed = true
				f.mu.Unlock()
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err := os.MkdirAll(filepath.Join(req.WorkDir, "module"), 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(req.WorkDir, "make.log")
	if f.fail != nil && f.fail(req) {
		first := "fake.c:1:1: error: expected ';' before '}' token"
		if err := os.WriteFile(logPath, []byte("CC fake.o\n"+first+"\nmake: *** Error 1\n"), 0o644); err != nil {
			return nil, err
		}
		return nil, &dkms.BuildError{Name: "fake", Version: "1.0", Kernel: req.Kernel, ExitCode: 10, LogPath: logPath, FirstError: first, Err: fmt.Errorf("exit status 10")}
	}
	if err := os.WriteFile(logPath, []byte("CC fake.o\nLD fake.ko\n"), 0o644); err != nil {
		return nil, err
	}
	tree := filepath.Join(downloadDir(), "kernels", req.Kernel, "lib", "modules", req.Kernel, "kernel", "drivers", "net")
	var mods []string
	for _, name := range []string{"dummy", "ifb"} {
		found, _ := filepath.Glob(filepath.Join(tree, name+".ko*"))
		if len(found) != 1 {
			return nil, fmt.Errorf("fake build: no %s module in %s", name, tree)
		}
		// dkms builds plain modules (the sandbox has no modules.dep to
		// make it compress), whatever the kernel's own are.
		elf, _, err := modinfo.Open(found[0])
		if err != nil {
			return nil, err
		}
		dst := filepath.Join(req.WorkDir, "module", "renamed-"+name+".ko")
		if err := os.WriteFile(dst, elf, 0o644); err != nil {
			return nil, err
		}
		mods = append(mods, dst)
	}
	return &dkms.BuildResult{Kernel: req.Kernel, Modules: mods, LogPath: logPath}, nil
}

// countingDriver counts the builds it passes on to Driver.
type countingDriver struct {
	dkms.Driver
	calls atomic.Int32
}

// Build implements dkms.Driver.
func (c *countingDriver) Build(ctx context.Context, req dkms.BuildRequest) (*dkms.BuildResult, error) {
	c.calls.Add(1)
	return c.Driver.Build(ctx, req)
}

// byCell indexes results by "recipe/kernel".
func byCell(results []Result) map[string]Result {
	m := map[string]Result{}
	for _, r := range results {
		m[r.Recipe.Name+"/"+r.Kernel] = r
	}
	return m
}

func requireTools(t *testing.T)                    { buildtest.RequireTools(t, dkms.DefaultPath) }
func copyTree(t *testing.T, src, dst string)       { buildtest.CopyTree(t, src, dst) }
func editFile(t *testing.T, path, old, new string) { buildtest.EditFile(t, path, old, new) }
