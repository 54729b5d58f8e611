package matrix

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// Rebuilt is what Rebuild found: a stored set and the same cell built again.
type Rebuilt struct {
	// Set is the stored set's id; KeyID its cache key's digest.
	Set   string `json:"set"`
	KeyID string `json:"key_id"`
	// Recipe is the file of the recipe the cell was rebuilt from; Kernel
	// its kernel release.
	Recipe string `json:"recipe"`
	Kernel string `json:"kernel"`
	// RebuiltSet is the id of the set the rebuild made: the same as Set
	// exactly when every byte of the manifest and the modules is the same.
	RebuiltSet string `json:"rebuilt_set"`
	// Identical reports whether every module's bytes are the same.
	Identical bool `json:"identical"`
	// Modules compares the set's modules one by one, by file name.
	Modules []ModuleComparison `json:"modules"`
}

// ModuleComparison is one module file of a stored set against its rebuild.
type ModuleComparison struct {
	File          string `json:"file"`
	StoredSHA256  string `json:"stored_sha256"`
	StoredSize    int64  `json:"stored_size"`
	RebuiltSHA256 string `json:"rebuilt_sha256,omitempty"`
	RebuiltSize   int64  `json:"rebuilt_size,omitempty"`
	Identical     bool   `json:"identical"`
}

// ErrNotReproduced is wrapped by Rebuild's error when the rebuild's bytes
// differ from the stored set's.
var ErrNotReproduced = errors.New("the rebuild differs from the stored set")

// Rebuild builds the cell that stored set ref was made from again, with the
// real dkms in a temporary cache (opts' downloads, driver and progress; its
// CacheDir, Recipes and Kernels are ignored), and compares the modules byte
// for byte. ref is a set id or a cache key digest (manifest.KeyID, as named
// under the cache's keys/), or a prefix of either. The recipe is the one
// of candidates whose key for the set's kernel is the stored key: a team
// checks a registry's cells against its own build this way. Rebuilding
// needs the same inputs: when no candidate gives the stored key, the error
// says which key entries differ (another compiler, headers, source ...).
func Rebuild(ctx context.Context, st *store.Store, ref string, candidates []*recipe.Recipe, opts Options) (*Rebuilt, error) {
	id, err := st.Resolve(ref)
	if errors.Is(err, fs.ErrNotExist) {
		id, err = st.ResolveKey(ref)
	}
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", ref, err)
	}
	stored, err := st.Get(id)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", ref, err)
	}
	if len(stored.CacheKey) == 0 {
		return nil, fmt.Errorf("rebuild %.12s: the set records no cache key (added with cache add, not built): nothing to rebuild it from", id)
	}
	out := &Rebuilt{Set: id, KeyID: manifest.KeyID(stored.CacheKey), Kernel: stored.Kernel}
	opts = opts.Resolve() // one lister and one set of archives for both runs below

	same, err := sameDriver(ctx, stored, candidates, opts)
	if err != nil {
		return nil, fmt.Errorf("rebuild %.12s: %w", id, err)
	}
	if len(same) == 0 {
		return nil, fmt.Errorf("rebuild %.12s: no recipe builds %s %s (%s); give the recipe it was built from", id, stored.Driver, stored.Version, stored.Flavor)
	}

	tmp, err := os.MkdirTemp(opts.TempDir, "kpreload-rebuild-")
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	defer os.RemoveAll(tmp)
	opts.Remote, opts.PullOnly, opts.RetryFailed, opts.Shard = nil, false, false, Shard{}
	opts.TempDir = tmp

	// Which recipe gives the stored key: computed without compiling.
	var misses []string
	var match *recipe.Recipe
	for i, r := range same {
		o := opts
		o.Recipes, o.Kernels, o.RecipeKernels = []*recipe.Recipe{r}, nil, map[*recipe.Recipe][]string{r: {stored.Kernel}}
		o.CacheDir, o.FetchOnly = filepath.Join(tmp, fmt.Sprintf("keys-%d", i)), true
		res, err := Run(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("rebuild %.12s: %w", id, err)
		}
		if maps.Equal(res[0].Key, stored.CacheKey) {
			match = r
			break
		}
		misses = append(misses, fmt.Sprintf("%s: %s", r.File, keyDiff(stored.CacheKey, res[0].Key)))
	}
	if match == nil {
		return nil, fmt.Errorf("rebuild %.12s: no recipe gives the stored key here, so this host cannot rebuild it:\n  %s", id, strings.Join(misses, "\n  "))
	}
	out.Recipe = match.File

	o := opts
	o.Recipes, o.Kernels, o.RecipeKernels = []*recipe.Recipe{match}, nil, map[*recipe.Recipe][]string{match: {stored.Kernel}}
	o.CacheDir, o.FetchOnly = filepath.Join(tmp, "cache"), false
	res, err := Run(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("rebuild %.12s: %w", id, err)
	}
	out.RebuiltSet = res[0].SetID
	fresh, err := store.Open(o.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	rebuilt, err := fresh.Get(res[0].SetID)
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	byFile := map[string]manifest.Module{}
	for _, m := range rebuilt.Modules {
		byFile[m.File] = m
	}
	out.Identical = len(rebuilt.Modules) == len(stored.Modules)
	for _, m := range stored.Modules {
		c := ModuleComparison{File: m.File, StoredSHA256: m.SHA256, StoredSize: m.Size}
		if r, ok := byFile[m.File]; ok {
			c.RebuiltSHA256, c.RebuiltSize = r.SHA256, r.Size
			c.Identical = r.SHA256 == m.SHA256 && r.Size == m.Size
		}
		out.Identical = out.Identical && c.Identical
		out.Modules = append(out.Modules, c)
	}
	if !out.Identical {
		return out, fmt.Errorf("rebuild %.12s: %w", id, ErrNotReproduced)
	}
	return out, nil
}

// keyDiff names the entries in which key b differs from key a.
func keyDiff(a, b map[string]string) string {
	var diffs []string
	names := map[string]bool{}
	for k := range a {
		names[k] = true
	}
	for k := range b {
		names[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(names)) {
		if a[k] != b[k] {
			diffs = append(diffs, fmt.Sprintf("%s is %q here, %q in the set", k, b[k], a[k]))
		}
	}
	return strings.Join(diffs, "; ")
}

// sameDriver returns the candidates that build stored's driver, version and
// flavour: recipes that pin it, and recipes that select their version by
// branch pinned to the source package version stored's key names (the
// version the cell was built from, which need not be the newest any more).
// opts is resolved (Options.Resolve).
func sameDriver(ctx context.Context, stored *manifest.Manifest, candidates []*recipe.Recipe, opts Options) ([]*recipe.Recipe, error) {
	var same []*recipe.Recipe
	for _, r := range candidates {
		if r.Driver.Name != stored.Driver || string(r.Flavor) != stored.Flavor {
			continue
		}
		if !r.Selects() {
			if r.Driver.Version == stored.Version {
				same = append(same, r)
			}
			continue
		}
		pkg, version, ok := recipe.SplitPackage(stored.CacheKey["source_package"])
		if !ok || pkg != r.Source.Package || !recipe.InBranch(stored.Version, r.Source.Select.Branch) {
			continue
		}
		pinned, _, err := r.PinDriver(ctx, opts.Archives, version)
		if err != nil {
			return nil, err
		}
		same = append(same, pinned)
	}
	return same, nil
}
