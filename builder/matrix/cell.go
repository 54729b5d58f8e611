// One cell's build: its inputs, the cache protocol around it, dkms, signing
// and the modules kept.

package matrix

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/buildroot"
	"github.com/kpreload/kpreload/builder/dkms"
	toolrun "github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/kmodcache/store"
)

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
	if err := sign(ctx, r.opts.Tools, in, files); err != nil {
		return fail(fmt.Errorf("%s for %s: %w", c.Recipe.Name, c.Kernel, err))
	}
	if files, err = compressModules(files, in.kernel.compression); err != nil {
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
	built, err := r.opts.Driver.Build(ctx, dkms.BuildRequest{
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
// exactly the bytes the kernel will verify. sign-file runs through run.
func sign(ctx context.Context, run toolrun.Runner, in *inputs, files []string) error {
	if in.extras.signCert == "" {
		return nil
	}
	return signModules(ctx, run, in.extras, in.kernel, files)
}

// prepare fetches and inspects what cell c builds from, each input once per
// run however many cells share it.
func (r *runner) prepare(ctx context.Context, c Cell) (*inputs, error) {
	in := &inputs{}
	rid := r.recipeID(c.Recipe)
	var err error
	in.src, err = r.sources.get(rid, func() (*source, error) {
		return prepareSource(ctx, r.opts.Tools, c.Recipe, r.opts.DownloadDir)
	})
	if err != nil {
		return nil, err
	}
	in.extras, err = r.extras.get(rid, func() (*extras, error) {
		return prepareExtras(ctx, c.Recipe, r.opts.DownloadDir, filepath.Join(r.tmp, "recipe-"+strings.ReplaceAll(rid, ":", "-")))
	})
	if err != nil {
		return nil, err
	}
	suite := r.suites[c.Kernel]
	if suite != "" && suite != archive.DefaultSuite {
		// The kernel's own suite builds it: its compiler and kbuild tools.
		in.root, err = r.roots.get(suite, func() (*buildroot.Root, error) {
			return buildroot.Ensure(ctx, buildroot.Spec{Suite: suite, Cache: r.opts.DownloadDir, Runner: r.opts.Tools}, nil)
		})
		if err != nil {
			return nil, err
		}
	}
	in.kernel, err = r.kernels.get(c.Kernel, func() (*kernel, error) {
		arc, err := r.archives.get(suite, func() (*archive.Archive, error) {
			return archive.New(suite, r.opts.DownloadDir)
		})
		if err != nil {
			return nil, fmt.Errorf("kernel %s: %w", c.Kernel, err)
		}
		return prepareKernel(ctx, r.opts.Tools, c.Kernel, arc, r.opts.DownloadDir, in.root, r.opts.Driver)
	})
	if err != nil {
		return nil, err
	}
	return in, nil
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
