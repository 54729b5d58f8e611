package follow

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/dkms/dkmstest"
	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// benchKernelsMax is how many synthetic kernels a matrix of the scale
// benchmark has at most; the recipes make up the rest of the cells.
const benchKernelsMax = 25

// BenchmarkNothingNew is the scale figure of scripts/bench-follow.sh
// --cells: for each matrix size in $KPRELOAD_BENCH_CELLS (a comma list of
// cell counts, default 50), synthetic recipes × synthetic kernels against a
// real registry on loopback, whose first cycle pushes every cell (not
// timed), it times a follow cycle with nothing new (Cycle: the registry's
// check, the lock, the archives' refresh, the matrix, one lookup per cell,
// the first-seen record) and a build with the registry with nothing new
// (matrix.Run with Remote, as kpreload build --remote runs it). It reports
// follow-s and build-s (seconds per run), their per-cell ms, and the
// per-cell CPU ms of this process (the client's work, less stretched by
// other load on the host than the wall clock).
func BenchmarkNothingNew(b *testing.B) {
	sizes := []int{50}
	if v := os.Getenv("KPRELOAD_BENCH_CELLS"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("KPRELOAD_BENCH_CELLS=%q: want a comma list of cell counts", v)
			}
			sizes = append(sizes, n)
		}
	}
	reg := testenv.StartRegistry(b)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("cells=%d", n), func(b *testing.B) { benchNothingNew(b, reg.Addr, n) })
	}
}

func benchNothingNew(b *testing.B, addr string, cells int) {
	dir := b.TempDir()
	downloads := filepath.Join(dir, "downloads")
	nk := min(cells, benchKernelsMax)
	nr := int(math.Ceil(float64(cells) / float64(nk)))
	var kernels []string
	mods := map[string]string{}
	for i := range nk {
		k := fmt.Sprintf("6.1.0-%d-cloud-amd64", 1000+i)
		kernels = append(kernels, k)
		testenv.SyntheticKernel(b, downloads, k)
		mods[k] = testenv.SyntheticModule(b, "dummy", k)
	}
	// nr recipes; the last one takes only the kernels that make up cells.
	perRecipe := map[*recipe.Recipe][]string{}
	var recipes []*recipe.Recipe
	left := cells
	for i := range nr {
		name := fmt.Sprintf("synthetic%03d", i)
		src := filepath.Join(dir, "src", name)
		if err := os.MkdirAll(src, 0o755); err != nil {
			b.Fatal(err)
		}
		conf := fmt.Sprintf("PACKAGE_NAME=%q\nPACKAGE_VERSION=\"1.0\"\nBUILT_MODULE_NAME[0]=\"dummy\"\n", name)
		if err := os.WriteFile(filepath.Join(src, "dkms.conf"), []byte(conf), 0o644); err != nil {
			b.Fatal(err)
		}
		r := &recipe.Recipe{Name: name, Driver: recipe.Driver{Name: name, Version: "1.0"}, Flavor: recipe.FlavorOpen,
			Source: recipe.Source{Dir: src}, Modules: []string{"dummy"}}
		recipes = append(recipes, r)
		perRecipe[r] = kernels[:min(left, nk)]
		left -= len(perRecipe[r])
	}
	key := filepath.Join(dir, "team.key")
	signer, err := cellsign.Generate(key, key+".pub")
	if err != nil {
		b.Fatal(err)
	}
	rm, err := remote.Open(fmt.Sprintf("oci://%s/scale-%d", addr, cells), remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(dir, "none.json"), Signer: signer})
	if err != nil {
		b.Fatal(err)
	}
	driver := &dkmstest.Driver{Modules: func(k string) ([]string, error) { return []string{mods[k]}, nil }}
	o := Options{
		Build: matrix.Options{
			Recipes: recipes, RecipeKernels: perRecipe,
			Lister:   recipe.ListerFunc(func() ([]string, error) { return kernels, nil }),
			Archives: dates{time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
			CacheDir: filepath.Join(dir, "cache"), DownloadDir: downloads,
			LogDir: filepath.Join(dir, "logs"), TempDir: dir, Driver: driver,
			Remote: rm,
		},
		StateDir: filepath.Join(dir, "state"),
	}
	ctx := context.Background()
	first, err := Cycle(ctx, o)
	if err != nil {
		b.Fatalf("first cycle: %v", err)
	}
	if first.New != cells || len(first.Cells) != cells {
		b.Fatalf("first cycle pushed %d of %d cells, want %d", first.New, len(first.Cells), cells)
	}
	built := len(driver.Requests())

	var follow, build, followCPU, buildCPU time.Duration
	b.ResetTimer()
	for range b.N {
		t, c := time.Now(), cpuTime(b)
		rep, err := Cycle(ctx, o)
		follow, followCPU = follow+time.Since(t), followCPU+cpuTime(b)-c
		if err != nil || rep.New != 0 || rep.Failed != 0 || len(rep.Cells) != cells {
			b.Fatalf("cycle with nothing new: %v; new %d, failed %d, %d cells", err, rep.New, rep.Failed, len(rep.Cells))
		}
		t, c = time.Now(), cpuTime(b)
		results, err := matrix.Run(ctx, o.Build)
		build, buildCPU = build+time.Since(t), buildCPU+cpuTime(b)-c
		if err != nil || len(results) != cells {
			b.Fatalf("build with nothing new: %v, %d results", err, len(results))
		}
		for _, res := range results {
			if res.State != matrix.StateCached || res.Remote != "present" {
				b.Fatalf("build with nothing new: cell %s/%s %s, remote %q; want cached and present", res.Recipe.Name, res.Kernel, res.State, res.Remote)
			}
		}
	}
	b.StopTimer()
	if n := len(driver.Requests()); n != built {
		b.Fatalf("runs with nothing new asked dkms %d times, want 0", n-built)
	}
	per := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
	b.ReportMetric(per(follow), "follow-s")
	b.ReportMetric(per(build), "build-s")
	b.ReportMetric(per(follow)*1000/float64(cells), "follow-ms/cell")
	b.ReportMetric(per(build)*1000/float64(cells), "build-ms/cell")
	b.ReportMetric(per(followCPU)*1000/float64(cells), "follow-cpu-ms/cell")
	b.ReportMetric(per(buildCPU)*1000/float64(cells), "build-cpu-ms/cell")
}

// cpuTime is the CPU time (user and system) this process has used: the
// client's share of the work, which other load on the host does not
// stretch as it stretches the wall clock (the registry's is not counted).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
