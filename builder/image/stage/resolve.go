package stage

import (
	"context"
	"fmt"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/progress"
)

// PinRecipes returns recipes with each one that selects its driver version
// (source.select: "newest 550 of trixie, trixie-backports") pinned to what
// arcs carry today, once, before anything reads them: the cells, each
// version's userspace and the manifest then all name that version. Recipes
// that pin are returned as they are.
func PinRecipes(ctx context.Context, recipes []*recipe.Recipe, arcs recipe.PackageArchives, report func(string)) ([]*recipe.Recipe, error) {
	out := make([]*recipe.Recipe, len(recipes))
	for i, r := range recipes {
		if !r.Selects() {
			out[i] = r
			continue
		}
		pinned, pick, err := r.ResolveDriver(ctx, arcs)
		if err != nil {
			return nil, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		progress.Say(report, "recipe %s: %s is %s %s (%s)", r.Name, pick.Selector, pinned.Driver.Name, pick.Version, pick.Suite)
		out[i] = pinned
	}
	return out, nil
}
