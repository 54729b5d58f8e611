// The matrix a run asks for: recipes × kernels, resolved into cells.

package matrix

import (
	"context"
	"fmt"
	"slices"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/recipe"
)

// Cells returns the matrix of opts: each recipe × its kernels (its
// opts.RecipeKernels entry, else opts.Kernels, else its matrix), in recipe
// order then kernel order, each cell once.
func Cells(opts Options) ([]Cell, error) {
	cells, _, err := cellsAndSuites(context.Background(), opts.Resolve())
	return cells, err
}

// cellsAndSuites is Cells that also says which Debian suite carries each
// kernel: the one its recipe's matrix found it in, else the suite its
// release names (archive.KernelSuite). A recipe that selects its driver
// version is resolved first: its cells carry the pinned copy. opts is
// resolved (Options.Resolve).
func cellsAndSuites(ctx context.Context, opts Options) ([]Cell, map[string]string, error) {
	var cells []Cell
	seen := map[Cell]bool{}
	suites := map[string]string{}
	for _, r := range opts.Recipes {
		pinned, _, err := r.ResolveDriver(ctx, opts.Archives)
		if err != nil {
			return nil, nil, fmt.Errorf("driver version: %w", err)
		}
		kernels, only := opts.RecipeKernels[r]
		if !only {
			kernels = opts.Kernels
		}
		if len(kernels) == 0 && !only {
			found, err := r.ResolveKernelSuites(opts.Lister)
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
