package stage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/none"
	"github.com/kpreload/kpreload/internal/progress"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// ErrMissingCells is wrapped by the error of Stage and EnsureCells (and so
// builder/image's Build) when the module cache lacks a (recipe, kernel) cell
// and BuildMissing is off.
var ErrMissingCells = errors.New("module cache lacks cells")

// ErrUnknownKernel is wrapped by CheckKernels' error when a kernel is not in
// the archive or not in a recipe's kernel matrix, and by Stage's when a
// build finds it neither unpacked nor in the archive: builder/matrix's.
var ErrUnknownKernel = matrix.ErrUnknownKernel

// cell is one recipe's set for one kernel, as found in the cache.
type cell struct {
	recipe *recipe.Recipe
	kernel string
	id     string
	m      *manifest.Manifest
}

// CheckKernels checks that every kernel is offered by the archive (lister)
// in suite (the image's root filesystem suite; "" means each kernel's own,
// archive.KernelSuite) and, when matrix is set, is in every recipe's kernel
// matrix (needed to build it). The error lists what is available. A nil
// lister means recipe.AptKernels().
func CheckKernels(kernels []string, recipes []*recipe.Recipe, lister recipe.KernelLister, matrix bool, suite string) error {
	if lister == nil {
		lister = recipe.AptKernels()
	}
	avails := map[string][]string{}
	available := func(k string) (string, []string, error) {
		s := suite
		if s == "" {
			s = archive.KernelSuite(k)
		}
		if a, ok := avails[s]; ok {
			return s, a, nil
		}
		l := lister
		if s != archive.DefaultSuite {
			sl, ok := lister.(recipe.SuiteLister)
			if !ok {
				return s, nil, fmt.Errorf("cannot list the kernels of suite %s", s)
			}
			var err error
			if l, err = sl.InSuite(s); err != nil {
				return s, nil, err
			}
		}
		a, err := l.Available()
		if err != nil {
			return s, nil, fmt.Errorf("list the archive's %s kernels: %w", s, err)
		}
		avails[s] = a
		return s, a, nil
	}
	var errs []error
	known := map[string]bool{}
	for _, k := range kernels {
		s, avail, err := available(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.Contains(avail, k) {
			errs = append(errs, fmt.Errorf("%w %s: %s has no linux-image-%s with headers (available: %s)", ErrUnknownKernel, k, s, k, none.List(avail)))
			continue
		}
		known[k] = true
	}
	if matrix {
		errs = append(errs, inMatrices(kernels, recipes, lister, func(k string) bool { return known[k] }))
	}
	return errors.Join(errs...)
}

// inMatrices checks that every kernel for which check says so is in every
// recipe's kernel matrix (lister resolves the matrices).
func inMatrices(kernels []string, recipes []*recipe.Recipe, lister recipe.KernelLister, check func(string) bool) error {
	var errs []error
	for _, r := range recipes {
		rels, err := r.ResolveKernels(lister)
		if err != nil {
			errs = append(errs, fmt.Errorf("recipe %s: %w", r.Name, err))
			continue
		}
		for _, k := range kernels {
			if check(k) && !slices.Contains(rels, k) {
				errs = append(errs, fmt.Errorf("%w %s: not in the kernel matrix of recipe %s (%s: %s)", ErrUnknownKernel, k, r.Name, recipeFile(r), none.List(rels)))
			}
		}
	}
	return errors.Join(errs...)
}

// recipeFile names where a recipe came from, for messages.
func recipeFile(r *recipe.Recipe) string {
	if r.File == "" {
		return "built-in recipe"
	}
	return r.File
}

// EnsureCells makes sure the module cache o.CacheDir holds the cell of every
// recipe for every kernel of o: found there, pulled from o.Remote or, with
// o.BuildMissing, built with dkms (see resolveCells). The cells it adds stay:
// the cache is content-addressed and each cell is stored whole or not at all.
func EnsureCells(ctx context.Context, o Options) error {
	o = o.Resolve()
	_, err := resolveCells(ctx, o.CacheDir, o.DownloadDir, o.Recipes, o.Kernels, o.BuildMissing, o.Remote, o.Lister, o.Progress)
	return err
}

// resolveCells finds the cache set of every recipe for every kernel. With
// buildMissing, the cells are first run through builder/matrix (which skips the
// ones whose cache key is already there and builds the rest with dkms);
// otherwise a missing cell is an error that lists the missing cells and what
// the cache holds.
//
// With a remote cache (rm), the cells are run through builder/matrix too:
// each cell's content key is computed, a cell the local cache lacks is
// pulled from the registry (exactly the cells the image needs, verified),
// and, with buildMissing, cells the registry lacks are built and pushed;
// without it they are an error naming the cell and the registry.
func resolveCells(ctx context.Context, cacheDir, downloadDir string, recipes []*recipe.Recipe, kernels []string, buildMissing bool, rm *remote.Remote, lister recipe.KernelLister, report func(string)) ([]cell, error) {
	if len(recipes) == 0 {
		return nil, nil
	}
	st, err := store.Open(cacheDir)
	if err != nil {
		return nil, err
	}
	say := func(format string, a ...any) { progress.Say(report, format, a...) }
	if buildMissing || rm != nil {
		switch {
		case rm != nil && buildMissing:
			say("drivers: %d recipe(s) x %d kernel(s): cells missing here are pulled from %s, else built with dkms and pushed", len(recipes), len(kernels), rm)
		case rm != nil:
			say("drivers: %d recipe(s) x %d kernel(s): cells missing here are pulled from %s", len(recipes), len(kernels), rm)
		default:
			say("drivers: building missing cells of %d recipe(s) x %d kernel(s) with dkms (cached cells are skipped)", len(recipes), len(kernels))
		}
		results, err := matrix.Run(ctx, matrix.Options{
			Recipes:     recipes,
			Kernels:     kernels,
			Lister:      lister,
			CacheDir:    cacheDir,
			DownloadDir: downloadDir,
			Remote:      rm,
			PullOnly:    rm != nil && !buildMissing,
			Progress: func(e matrix.Event) {
				if e.Result != nil {
					state := e.State
					if t := e.Result.Trust; t != "" && t != remote.TrustVerified {
						state += ", " + t + ": taken without trusted keys" // unsigned is never silent
					}
					say("drivers: %s for %s: %s (%.1fs)", e.Cell.Recipe.Name, e.Cell.Kernel, state, e.Result.Duration.Seconds())
				}
			},
		})
		if err != nil {
			var lines []string
			for _, r := range results {
				if r.State == matrix.StateFailed || r.State == matrix.StateSkipped {
					lines = append(lines, fmt.Sprintf("%s/%s: %s %s", r.Recipe.Name, r.Kernel, r.State, r.FirstError))
				}
			}
			if len(lines) > 0 {
				return nil, fmt.Errorf("build driver cells: %w\n  %s", err, strings.Join(lines, "\n  "))
			}
			return nil, fmt.Errorf("build driver cells: %w", err)
		}
		var out []cell
		for _, r := range results {
			if r.State == matrix.StateSkipped {
				return nil, fmt.Errorf("recipe %s cannot be built for kernel %s (its dkms.conf BUILD_EXCLUSIVE rules exclude it): drop the kernel or the recipe", r.Recipe.Name, r.Kernel)
			}
			m, err := st.Get(r.SetID)
			if err != nil {
				return nil, fmt.Errorf("recipe %s for %s: %w", r.Recipe.Name, r.Kernel, err)
			}
			out = append(out, cell{recipe: r.Recipe, kernel: r.Kernel, id: r.SetID, m: m})
		}
		return out, nil
	}
	entries, err := st.List()
	if err != nil {
		return nil, fmt.Errorf("read module cache %s: %w", cacheDir, err)
	}
	var out []cell
	var missing []string
	for _, r := range recipes {
		for _, k := range kernels {
			i := slices.IndexFunc(entries, func(e store.Entry) bool {
				return e.Kernel == k && e.Driver == r.Driver.Name && e.Version == r.Driver.Version && e.Flavor == r.Flavor
			})
			if i < 0 {
				missing = append(missing, fmt.Sprintf("%s (%s %s %s) for %s", r.Name, r.Driver.Name, r.Driver.Version, r.Flavor, k))
				continue
			}
			m, err := st.Get(entries[i].ID)
			if err != nil {
				return nil, fmt.Errorf("recipe %s for %s: %w", r.Name, k, err)
			}
			out = append(out, cell{recipe: r, kernel: k, id: entries[i].ID, m: m})
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s\n  cache %s holds: %s\n  build them with `kpreload build RECIPE --kernel KVER --cache %s`, or have them built where they are missing (--build-missing of image build and install --stage; Packer: build_missing)",
			ErrMissingCells, strings.Join(missing, "; "), cacheDir, describeEntries(entries), cacheDir)
	}
	return out, nil
}

// describeEntries lists cache entries as "driver version flavor for kernel".
func describeEntries(entries []store.Entry) string {
	if len(entries) == 0 {
		return "nothing"
	}
	var s []string
	for _, e := range entries {
		s = append(s, fmt.Sprintf("%s %s %s for %s", e.Driver, e.Version, e.Flavor, e.Kernel))
	}
	return strings.Join(s, "; ")
}
