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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/buildroot"
	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/modname"
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
	// Driver builds one cell; nil means dkms.New().
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

// downloadsOf is opts.DownloadDir, else DefaultDownloadDir.
func downloadsOf(opts Options) string {
	if opts.DownloadDir != "" {
		return opts.DownloadDir
	}
	return DefaultDownloadDir
}

// Cells returns the matrix of opts: each recipe × its kernels (its
// opts.RecipeKernels entry, else opts.Kernels, else its matrix), in recipe
// order then kernel order, each cell once.
func Cells(opts Options) ([]Cell, error) {
	cells, _, err := cellsAndSuites(context.Background(), opts)
	return cells, err
}

// cellsAndSuites is Cells that also says which Debian suite carries each
// kernel: the one its recipe's matrix found it in, else the suite its
// release names (archive.KernelSuite). A recipe that selects its driver
// version is resolved first: its cells carry the pinned copy.
func cellsAndSuites(ctx context.Context, opts Options) ([]Cell, map[string]string, error) {
	var cells []Cell
	seen := map[Cell]bool{}
	suites := map[string]string{}
	arcs := opts.Archives
	if arcs == nil {
		arcs = &recipe.AptArchives{Cache: downloadsOf(opts)}
	}
	for _, r := range opts.Recipes {
		pinned, _, err := r.ResolveDriver(ctx, arcs)
		if err != nil {
			return nil, nil, fmt.Errorf("driver version: %w", err)
		}
		kernels, only := opts.RecipeKernels[r]
		if !only {
			kernels = opts.Kernels
		}
		if len(kernels) == 0 && !only {
			lister := opts.Lister
			if lister == nil {
				lister = recipe.AptKernelsIn(downloadsOf(opts))
			}
			found, err := r.ResolveKernelSuites(lister)
			if err != nil {
				return nil, nil, fmt.Errorf("kernel matrix: %w", err)
			}
			for rel, suite := range found {
				kernels = append(kernels, rel)
				suites[rel] = suite
			}
			slices.SortFunc(kernels, recipe.CompareReleases)
		}
		for _, k := range kernels {
			if _, ok := suites[k]; !ok {
				suites[k] = archive.KernelSuite(k)
			}
			c := Cell{Recipe: pinned, Kernel: k}
			if !seen[c] {
				seen[c] = true
				cells = append(cells, c)
			}
		}
	}
	return cells, suites, nil
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
	r := &runner{opts: opts, driver: opts.Driver, suites: suites}
	r.downloads = downloadsOf(opts)
	lister := opts.Lister
	if lister == nil {
		lister = recipe.AptKernelsIn(r.downloads)
	}
	if err := checkKernels(cells, r.downloads, lister, suites); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	local, err := store.Open(opts.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	r.cache = tiered.New(local, tiered.Options{Remote: opts.Remote, PullOnly: opts.PullOnly, RetryFailed: opts.RetryFailed})
	if r.driver == nil {
		r.driver = dkms.New()
	}
	if r.logDir = opts.LogDir; r.logDir == "" {
		r.logDir = filepath.Join(r.downloads, "logs")
	}
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
	opts                   Options
	cache                  *tiered.Cache
	driver                 dkms.Driver
	downloads, logDir, tmp string
	suites                 map[string]string
	makeJobs               int
	progressMu             sync.Mutex
	sources                onceMap[*source]
	extras                 onceMap[*extras]
	kernels                onceMap[*kernel]
	roots                  onceMap[*buildroot.Root]
	archives               onceMap[*archive.Archive]
	recipeIDsMu            sync.Mutex
	recipeIDs              map[*recipe.Recipe]string
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

// inputs is what a cell is built from, prepared: the DKMS source, the
// recipe's extras (signing key, supported-gpus.json), the unpacked kernel
// and, for a kernel of another suite, that suite's build root.
type inputs struct {
	src    *source
	extras *extras
	kernel *kernel
	root   *buildroot.Root
}

// runCell runs one cell through the cache protocol: its inputs, its key,
// the cache's Get; on a miss a dkms build, signed, and the cache's Put. A
// compile failure goes to the cache's Fail.
func (r *runner) runCell(ctx context.Context, i int, c Cell) Result {
	start := time.Now()
	res := Result{Cell: c}
	done := func(state string) Result {
		res.State, res.Duration = state, time.Since(start)
		return res
	}
	fail := func(err error) Result {
		res.State, res.Err, res.Duration = StateFailed, err, time.Since(start)
		res.FirstError = firstError(err)
		return res
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	r.emit(Event{Cell: c, Index: i, State: StatePreparing, Time: time.Now()})
	in, err := r.prepare(ctx, c)
	if err != nil {
		return fail(err)
	}
	res.SourceDir, res.KernelDir = in.src.dir, in.kernel.dir
	if in.root != nil {
		res.BuildRoot = in.root.Dir
	}
	res.Key = cellKey(c.Recipe, in.src, in.kernel, in.extras)
	cell := cacheCell(c, res.Key)

	got, err := r.cache.Get(ctx, cell)
	res.note(got)
	switch {
	case err != nil:
		return fail(err)
	case got.Pulled:
		return done(StatePulled)
	case got.SetID != "":
		return done(StateCached)
	case r.opts.FetchOnly:
		return done(StateFetched)
	}

	r.emit(Event{Cell: c, Index: i, State: StateBuilding, Time: time.Now()})
	files, err := r.build(ctx, i, c, in, &res)
	switch {
	case errors.Is(err, dkms.ErrBuildExclusive):
		return done(StateSkipped)
	case compileFailed(ctx, err):
		// Recorded, so nobody rebuilds it with this key.
		res.note(r.cache.Fail(ctx, cell, firstError(err), res.LogPath))
		return fail(err)
	case err != nil:
		return fail(err)
	}
	if err := sign(ctx, in, files); err != nil {
		return fail(fmt.Errorf("%s for %s: %w", c.Recipe.Name, c.Kernel, err))
	}
	got, err = r.cache.Put(ctx, cell, store.AddRequest{
		Files:         files,
		SupportedGPUs: in.extras.gpus,
		KernelTree:    in.kernel.modulesTree,
		Replace:       true, // a rebuild from changed inputs supersedes the old set
	})
	if err != nil {
		return fail(err)
	}
	res.note(got)
	return done(StateOK)
}

// build runs dkms for cell c (the i-th) and returns the recipe's modules,
// copied out of the build; the build log is kept in res.LogPath, also when
// dkms fails.
func (r *runner) build(ctx context.Context, i int, c Cell, in *inputs, res *Result) ([]string, error) {
	work := filepath.Join(r.tmp, fmt.Sprintf("cell-%03d", i))
	built, err := r.driver.Build(ctx, dkms.BuildRequest{
		SourceDir:       in.src.dir,
		Kernel:          c.Kernel,
		KernelSourceDir: in.kernel.headersDir,
		WorkDir:         filepath.Join(work, "dkms"),
		KernelTree:      in.kernel.sourceDir,
		Jobs:            r.makeJobs,
		Root:            in.kernel.root,
	})
	if err != nil {
		var be *dkms.BuildError
		if errors.As(err, &be) {
			res.LogPath = r.keepLog(c, be.LogPath)
		}
		return nil, err
	}
	res.LogPath = r.keepLog(c, built.LogPath)
	files, err := selectModules(built.Modules, c.Recipe.Modules, filepath.Join(work, "keep"))
	if err != nil {
		return nil, fmt.Errorf("%s for %s: %w", c.Recipe.Name, c.Kernel, err)
	}
	return files, nil
}

// compileFailed reports whether err is dkms failing to compile, for the
// inputs' sake rather than a cancelled run's: a result the same key always
// gives.
func compileFailed(ctx context.Context, err error) bool {
	var be *dkms.BuildError
	return errors.As(err, &be) && !errors.Is(err, dkms.ErrBuildExclusive) && ctx.Err() == nil
}

// sign signs the built modules when the recipe has a signing key, before
// the set enters the cache: the cache holds, and the manifest digests,
// exactly the bytes the kernel will verify.
func sign(ctx context.Context, in *inputs, files []string) error {
	if in.extras.signCert == "" {
		return nil
	}
	return signModules(ctx, in.extras, in.kernel, files)
}

// prepare fetches and inspects what cell c builds from, each input once per
// run however many cells share it.
func (r *runner) prepare(ctx context.Context, c Cell) (*inputs, error) {
	in := &inputs{}
	rid := r.recipeID(c.Recipe)
	var err error
	in.src, err = r.sources.get(rid, func() (*source, error) {
		return prepareSource(ctx, c.Recipe, r.downloads)
	})
	if err != nil {
		return nil, err
	}
	in.extras, err = r.extras.get(rid, func() (*extras, error) {
		return prepareExtras(ctx, c.Recipe, r.downloads, filepath.Join(r.tmp, "recipe-"+strings.ReplaceAll(rid, ":", "-")))
	})
	if err != nil {
		return nil, err
	}
	suite := r.suites[c.Kernel]
	if suite != "" && suite != archive.DefaultSuite {
		// The kernel's own suite builds it: its compiler and kbuild tools.
		in.root, err = r.roots.get(suite, func() (*buildroot.Root, error) {
			return buildroot.Ensure(ctx, buildroot.Spec{Suite: suite, Cache: r.downloads}, nil)
		})
		if err != nil {
			return nil, err
		}
	}
	in.kernel, err = r.kernels.get(c.Kernel, func() (*kernel, error) {
		arc, err := r.archives.get(suite, func() (*archive.Archive, error) {
			return archive.New(suite, r.downloads)
		})
		if err != nil {
			return nil, fmt.Errorf("kernel %s: %w", c.Kernel, err)
		}
		return prepareKernel(ctx, c.Kernel, arc, r.downloads, in.root, r.driver)
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// cacheCell names cell c with key for the cache.
func cacheCell(c Cell, key map[string]string) tiered.Cell {
	rc := c.Recipe
	return tiered.Cell{
		Key: key, Recipe: rc.Name, Kernel: c.Kernel,
		Driver: rc.Driver.Name, Version: rc.Driver.Version, Flavor: rc.Flavor,
	}
}

// note takes what the cache says of the registry into res: its set, what
// happened there and a failed push.
func (res *Result) note(e tiered.Entry) {
	if e.SetID != "" {
		res.SetID = e.SetID
	}
	if e.Remote != "" {
		res.Remote = e.Remote
	}
	if e.Trust != "" {
		res.Trust = e.Trust
	}
	if e.PushErr != nil {
		res.PushErr = e.PushErr
	}
}

// firstError is the line a failed cell shows: the compiler's first error
// line, the first error line the registry recorded, or the error's text.
func firstError(err error) string {
	var be *dkms.BuildError
	if errors.As(err, &be) && be.FirstError != "" {
		return trimWorkPath(be.FirstError)
	}
	var fe *tiered.FailedError
	if errors.As(err, &fe) {
		return fe.FirstError
	}
	return err.Error()
}

// trimWorkPath shortens compiler messages that name files in the build
// directory of dkms's tree in the sandbox
// ("/var/lib/dkms/<name>/<version>/build/x.c:1:2: error:") to the path
// inside the package source ("x.c:1:2: error:").
func trimWorkPath(line string) string {
	i := strings.Index(line, dkms.SandboxDKMSTree+"/")
	if i < 0 {
		return line
	}
	rest := line[i:]
	end := strings.IndexAny(rest, " \t:")
	if end < 0 {
		end = len(rest)
	}
	j := strings.LastIndex(rest[:end], "/build/")
	if j < 0 {
		return line
	}
	return line[:i] + rest[j+len("/build/"):]
}

// keepLog copies a build log into the log directory as
// <recipe>_<kernel>.log and returns the copy's path; when that fails it
// returns the original path (which disappears with the work directory).
func (r *runner) keepLog(c Cell, log string) string {
	if log == "" {
		return ""
	}
	if err := os.MkdirAll(r.logDir, 0o755); err != nil {
		return log
	}
	dst := filepath.Join(r.logDir, c.Recipe.Name+"_"+c.Kernel+".log")
	if err := fileutil.CopyFile(log, dst, 0o644); err != nil {
		return log
	}
	return dst
}

// selectModules picks the modules named in want from the built files and
// copies them into dir, named after want (keeping the .ko suffix, such as
// ".ko" or ".ko.xz"). A built file matches a wanted name by its modinfo name
// or its file name, with '-' and '_' the same: dkms may rename files
// (DEST_MODULE_NAME, nvidia.ko installed as nvidia-current.ko), the kernel
// knows the module by its modinfo name. Every wanted module must be found.
func selectModules(built, want []string, dir string) ([]string, error) {
	type file struct{ path, suffix string }
	byName := map[string]file{}
	var names []string
	for _, path := range built {
		base := filepath.Base(path)
		i := strings.Index(base, ".ko")
		if i < 0 {
			continue
		}
		f := file{path: path, suffix: base[i:]}
		info, err := modinfo.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read built module: %w", err)
		}
		for _, n := range []string{modname.Normalize(base[:i]), modname.Normalize(info.Name)} {
			if _, dup := byName[n]; !dup {
				byName[n] = f
			}
		}
		names = append(names, info.Name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("select modules: %w", err)
	}
	var out, missing []string
	for _, w := range want {
		f, ok := byName[modname.Normalize(w)]
		if !ok {
			missing = append(missing, w)
			continue
		}
		dst := filepath.Join(dir, w+f.suffix)
		if err := fileutil.CopyFile(f.path, dst, 0o644); err != nil {
			return nil, fmt.Errorf("select modules: %w", err)
		}
		out = append(out, dst)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("dkms did not build module(s) %s (built: %s)", strings.Join(missing, ", "), strings.Join(names, ", "))
	}
	return out, nil
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
