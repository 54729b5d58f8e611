// Package matrix builds driver recipes for a matrix of kernels with dkms and
// adds the results to the module cache.
//
// Each (recipe, kernel) pair is a Cell. Before building a cell, Run prepares
// its inputs (the DKMS source, the kernel, fetched and unpacked through
// builder/archive when missing, a build root for another suite's kernel) and
// computes its cache key from everything that decides the result (driver,
// source tree digest, dkms.conf, kernel release, headers package version,
// Module.symvers and .config digests, the kernel's compiler and the host's
// compiler version). It then asks the two-level cache (kmodcache/tiered: the
// local store, then Options.Remote): a hit is "cached" or "pulled" and
// compiles nothing. Misses are built with the dkms Driver, in parallel, each
// in its own work directory under one temporary directory that Run removes
// when it returns (also when ctx is cancelled); the recipe's modules, signed
// when it asks, are put into the cache under the key (the store, then the
// registry), and a compile failure is recorded there. The store writes
// atomically, so an interrupted run leaves the cache as it was. A failed
// cell never stops the others.
package matrix

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/buildroot"
	"github.com/kpreload/kpreload/builder/dkms"
	toolrun "github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/kmodcache/tiered"
)

// States of a cell, as Event.State and Result.State.
const (
	// StateQueued: the cell waits for a worker.
	StateQueued = "queued"
	// StatePreparing: fetching and digesting the source and the kernel headers.
	StatePreparing = "preparing"
	// StateBuilding: dkms is running.
	StateBuilding = "building"
	// StateOK: built and added to the cache.
	StateOK = "ok"
	// StateCached: the cache already holds the set for the cell's key.
	StateCached = "cached"
	// StateSkipped: the package's BUILD_EXCLUSIVE directives exclude the kernel.
	StateSkipped = "skipped"
	// StateFailed: the cell could not be built or stored.
	StateFailed = "failed"
	// StatePulled: the local cache lacked the cell and the remote registry
	// (Options.Remote) had it: pulled, verified, not compiled.
	StatePulled = "pulled"
	// StateFetched: Options.FetchOnly, and the cache lacks the cell: its
	// kernel, source and build root are ready, its key computed, nothing
	// compiled.
	StateFetched = "fetched"
)

// ErrCellsFailed is wrapped by Run's error when at least one cell failed.
var ErrCellsFailed = errors.New("build failed")

// ErrPushFailed is wrapped by Run's error when a cell was built (or found in
// the local cache) but could not be pushed to Options.Remote.
var ErrPushFailed = errors.New("push to the remote cache failed")

// Cell is one recipe built for one kernel.
type Cell struct {
	// Recipe is the driver recipe.
	Recipe *recipe.Recipe
	// Kernel is the kernel release.
	Kernel string
}

// Result is what became of one cell.
type Result struct {
	Cell
	// State is StateOK, StateCached, StateSkipped or StateFailed.
	State string
	// SetID is the id of the cache set holding the cell's modules (ok, cached).
	SetID string
	// Key is the cell's cache key ("" entries included), when it was computed.
	Key map[string]string
	// FirstError is the first error line of the build log (failed builds),
	// or the error's text for failures before or after dkms.
	FirstError string
	// LogPath is the kept build log (make.log, or dkms's output when make
	// never ran) of a cell that was built, under Options.LogDir.
	LogPath string
	// Duration is how long the cell took, dkms included.
	Duration time.Duration
	// Err is the failure (StateFailed) or nil.
	Err error
	// Remote says what happened on Options.Remote, in kmodcache/tiered's
	// words: "pulled", "pushed", "present" (it already held the cell),
	// "recorded failure", "known failure" (it records this key as failed),
	// "absent", ...; "" without a remote.
	Remote string
	// Trust says, of a cell pulled from Options.Remote, whether its
	// signature was verified (kmodcache/remote's Record.Trust: "verified",
	// "unverified", "unsigned"); "" when nothing was pulled.
	Trust string
	// PushErr is why a push to Options.Remote failed, or nil.
	PushErr error
	// SourceDir is the DKMS source tree the cell builds from (patched,
	// when the recipe has patches), once prepared.
	SourceDir string
	// KernelDir is the unpacked kernel (headers, modules) the cell builds
	// against, once prepared.
	KernelDir string
	// BuildRoot is the build root of the kernel's suite the cell builds in,
	// or "" when it builds on the host.
	BuildRoot string
}

// Event reports a cell changing state, for a progress display.
type Event struct {
	// Cell is the cell that changed.
	Cell Cell
	// Index is the cell's position in the matrix (and in Run's results).
	Index int
	// State is the new state.
	State string
	// Time is when the cell entered the state.
	Time time.Time
	// Result is set for the final states (ok, cached, skipped, failed).
	Result *Result
}

// Options configures Run.
type Options struct {
	// Recipes are the recipes to build.
	Recipes []*recipe.Recipe
	// Kernels, if set, replaces every recipe's kernel matrix.
	Kernels []string
	// RecipeKernels, if it has an entry for a recipe, is that recipe's
	// kernel list, replacing Kernels and the recipe's matrix: it asks for
	// single cells (kpreload build RECIPE:KVER).
	RecipeKernels map[*recipe.Recipe][]string
	// Lister resolves recipes' kernel matrices when Kernels is empty; nil
	// means recipe.AptKernelsIn(DownloadDir).
	Lister recipe.KernelLister
	// Tools runs the programs of a run: cp, patch, dpkg-deb, the compiler,
	// sign-file, mmdebstrap and chroot for build roots, and dkms when Driver
	// is nil; nil means the real programs (runner.Default).
	Tools toolrun.Runner
	// Archives resolves recipes that select their driver version
	// (source.select); nil means recipe.AptArchives over DownloadDir.
	Archives recipe.PackageArchives
	// CacheDir is the module cache directory (see kmodcache/store).
	CacheDir string
	// DownloadDir holds downloaded .debs (debs/), unpacked package sources
	// (sources/) and kernels (kernels/<release>/, fetched and unpacked by
	// builder/archive when missing); "" means DefaultDownloadDir (the
	// command fills in $KPRELOAD_CACHE when it is set).
	DownloadDir string
	// LogDir keeps the build log of every cell built; "" means DownloadDir/logs.
	LogDir string
	// TempDir is where the run's temporary work directory is made; "" means
	// os.TempDir().
	TempDir string
	// Jobs is how many cells build at once; 0 means one per two CPUs (at
	// least one). Each dkms build gets make -j CPUs/cells.
	Jobs int
	// Driver builds one cell; nil means the real dkms (dkms.DKMS at
	// dkms.DefaultPath), run through Tools.
	Driver dkms.Driver
	// Progress, if set, is called on every state change, one call at a time.
	Progress func(Event)
	// Shard, when its Count is set, builds only that shard of the matrix
	// (Assign: balanced by expected cost, the same split in every process).
	Shard Shard
	// Remote, if set, is a registry of cells (kmodcache/remote): a cell the
	// local cache lacks is pulled from it when it holds it; cells built here,
	// and cached ones it lacks, are pushed to it; compile failures are
	// recorded in it, and a failure it records under the same key is not
	// rebuilt (unless RetryFailed).
	Remote *remote.Remote
	// PullOnly never compiles: a cell neither the local cache nor Remote
	// holds fails, naming both.
	PullOnly bool
	// RetryFailed builds cells that Remote records as failed.
	RetryFailed bool
	// FetchOnly downloads and prepares everything the cells need (kernels,
	// sources, patches, build roots) and computes their keys, compiling
	// nothing: a cell the cache lacks ends StateFetched.
	FetchOnly bool
}

// DefaultDownloadDir is where downloads live when Options.DownloadDir names
// no directory (as scripts/lib.sh).
const DefaultDownloadDir = "/var/cache/kpreload"

// Resolve returns opts with its defaults applied: the one place the entry
// points (Run, Cells, Rebuild, FetchSupportedGPUs; builder/follow for its
// cycle) fill them in, so everything downstream reads one downloads
// directory, one kernel lister (an apt lister asks the archive once per
// suite and remembers), one set of archives, one runner and one driver.
// Resolving resolved options changes nothing.
func (opts Options) Resolve() Options {
	if opts.DownloadDir == "" {
		opts.DownloadDir = DefaultDownloadDir
	}
	if opts.Lister == nil {
		opts.Lister = recipe.AptKernelsIn(opts.DownloadDir)
	}
	if opts.Archives == nil {
		opts.Archives = &recipe.AptArchives{Cache: opts.DownloadDir}
	}
	opts.Tools = toolrun.Or(opts.Tools)
	if opts.Driver == nil {
		opts.Driver = &dkms.DKMS{Path: dkms.DefaultPath, Runner: opts.Tools}
	}
	if opts.LogDir == "" {
		opts.LogDir = filepath.Join(opts.DownloadDir, "logs")
	}
	return opts
}

// Run builds every cell of the matrix and returns one Result per cell, in
// Cells order. Failed cells do not stop the others; when any failed the
// error wraps ErrCellsFailed (the results are still returned). A cancelled
// ctx stops running builds and returns ctx's error.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	if len(opts.Recipes) == 0 {
		return nil, errors.New("build: no recipes")
	}
	if opts.CacheDir == "" {
		return nil, errors.New("build: no cache directory")
	}
	opts = opts.Resolve()
	cells, suites, err := cellsAndSuites(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	if len(cells) == 0 {
		return nil, errors.New("build: the request has no cells (no kernels)")
	}
	if opts.Shard.Count > 0 {
		if err := opts.Shard.check(); err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
		cells = Assign(cells, opts.Shard.Count)[opts.Shard.Index-1]
		if len(cells) == 0 {
			// More shards than cells: this one has nothing to do.
			return []Result{}, nil
		}
	}
	if opts.PullOnly && opts.Remote == nil {
		return nil, errors.New("build: pull-only needs a remote cache")
	}
	if opts.FetchOnly && (opts.Remote != nil || opts.PullOnly) {
		return nil, errors.New("build: fetch-only neither pulls nor pushes: leave out the remote cache")
	}
	r := &runner{opts: opts, suites: suites}
	if err := checkKernels(cells, opts.DownloadDir, opts.Lister, suites); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	local, err := store.Open(opts.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	r.cache = tiered.New(local, tiered.Options{Remote: opts.Remote, PullOnly: opts.PullOnly, RetryFailed: opts.RetryFailed})
	workers, makeJobs := parallelism(opts.Jobs, len(cells), runtime.NumCPU())
	r.makeJobs = makeJobs

	if r.tmp, err = os.MkdirTemp(opts.TempDir, "kpreload-build-"); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	defer os.RemoveAll(r.tmp)

	for i, c := range cells {
		r.emit(Event{Cell: c, Index: i, State: StateQueued, Time: time.Now()})
	}
	results := make([]Result, len(cells))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res := r.runCell(ctx, i, cells[i])
				results[i] = res
				r.emit(Event{Cell: res.Cell, Index: i, State: res.State, Time: time.Now(), Result: &res})
			}
		}()
	}
	for i := range cells {
		next <- i
	}
	close(next)
	wg.Wait()

	if err := ctx.Err(); err != nil {
		return results, fmt.Errorf("build: %w", err)
	}
	var failed []string
	for _, res := range results {
		if res.State == StateFailed {
			failed = append(failed, res.Recipe.Name+"/"+res.Kernel)
		}
	}
	var pushErrs []error
	for _, res := range results {
		if res.PushErr != nil {
			pushErrs = append(pushErrs, res.PushErr)
		}
	}
	var errs []error
	if len(failed) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d of %d cells failed (%s)", ErrCellsFailed, len(failed), len(cells), strings.Join(failed, ", ")))
	}
	if len(pushErrs) > 0 {
		errs = append(errs, fmt.Errorf("%w (%s): %w", ErrPushFailed, opts.Remote, errors.Join(pushErrs...)))
	}
	return results, errors.Join(errs...)
}

// parallelism returns how many cells to build at once and the make -j of
// each: jobs cells (default cpus/2, at least 1, at most the number of
// cells), each with cpus/cells make jobs (at least 1).
func parallelism(jobs, cells, cpus int) (workers, makeJobs int) {
	workers = jobs
	if workers <= 0 {
		workers = max(1, cpus/2)
	}
	workers = max(1, min(workers, cells))
	return workers, max(1, cpus/workers)
}

// runner holds one Run's shared state.
type runner struct {
	opts        Options // resolved: every default applied
	cache       *tiered.Cache
	tmp         string
	suites      map[string]string
	makeJobs    int
	progressMu  sync.Mutex
	sources     onceMap[*source]
	extras      onceMap[*extras]
	kernels     onceMap[*kernel]
	roots       onceMap[*buildroot.Root]
	archives    onceMap[*archive.Archive]
	recipeIDsMu sync.Mutex
	recipeIDs   map[*recipe.Recipe]string
}

// emit calls the progress function, one event at a time.
func (r *runner) emit(e Event) {
	if r.opts.Progress == nil {
		return
	}
	r.progressMu.Lock()
	defer r.progressMu.Unlock()
	r.opts.Progress(e)
}

// recipeID names a recipe uniquely within the run (two recipes may share a name).
func (r *runner) recipeID(rc *recipe.Recipe) string {
	r.recipeIDsMu.Lock()
	defer r.recipeIDsMu.Unlock()
	if r.recipeIDs == nil {
		r.recipeIDs = map[*recipe.Recipe]string{}
	}
	id, ok := r.recipeIDs[rc]
	if !ok {
		id = fmt.Sprintf("%d:%s", len(r.recipeIDs), rc.Name)
		r.recipeIDs[rc] = id
	}
	return id
}

// onceMap computes one value per key, once, for concurrent callers.
type onceMap[T any] struct {
	mu sync.Mutex
	m  map[string]*onceEntry[T]
}

type onceEntry[T any] struct {
	once sync.Once
	v    T
	err  error
}

// get returns the value for key, calling f to compute it the first time.
func (o *onceMap[T]) get(key string, f func() (T, error)) (T, error) {
	o.mu.Lock()
	if o.m == nil {
		o.m = map[string]*onceEntry[T]{}
	}
	e, ok := o.m[key]
	if !ok {
		e = &onceEntry[T]{}
		o.m[key] = e
	}
	o.mu.Unlock()
	e.once.Do(func() { e.v, e.err = f() })
	return e.v, e.err
}
