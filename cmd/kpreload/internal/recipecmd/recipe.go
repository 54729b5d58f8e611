// Package recipecmd is kpreload recipe: what a driver recipe supports (its
// supported-gpus list).
package recipecmd

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cells"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
)

// New builds kpreload recipe and recipe supported-gpus.
func New() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "recipe",
		Short:   "What the driver recipes name, read by the one recipe loader builds use",
		Example: `  kpreload recipe supported-gpus nvidia-550 --recipes recipes`,
	}
	cmd.AddCommand(newRecipeSupportedGPUsCmd())
	return cmd
}

func newRecipeSupportedGPUsCmd() *cobra.Command {
	var (
		recipesDir, cache string
		asJSON            bool
	)
	cmd := &cobra.Command{
		Use:   "supported-gpus [RECIPE...] [--recipes DIR] [--cache DIR] [--json]",
		Short: "Fetch NVIDIA's supported-gpus.json each recipe names, as a build would",
		Long: `Supported-gpus fetches the supported-gpus.json that NVIDIA ships in the
Debian package each recipe's supported-gpus: block names, and prints one line
per package: PACKAGE=VERSION PATH. The recipe is read and its driver version
resolved as kpreload build reads and resolves it: a recipe with source.select
takes the version the archive has now, and its supported-gpus package the
newest version of the same upstream release.

The package is downloaded with apt-get download into DIR/debs and unpacked
with dpkg -x (nothing is installed); the list, uncompressed and checked to be
NVIDIA's format, goes to DIR/supported-gpus/PACKAGE_VERSION/supported-gpus.json,
renamed into place whole. A list already there is kept. DIR is --cache, else
$KPRELOAD_CACHE, else /var/cache/kpreload.

With no RECIPE it reads every recipe in --recipes; recipes that name no list
(the test drivers) are left out. RECIPE is a recipe's name or file.
scripts/supported-gpus.sh runs this command.

Examples:
  kpreload recipe supported-gpus nvidia-550 --recipes recipes
  kpreload recipe supported-gpus nvidia-tesla-470 --recipes recipes --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(clirun.Context(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var recipes []*recipe.Recipe
			recipesDir, err := cells.ResolveRecipesDir(recipesDir)
			if err != nil {
				return fmt.Errorf("recipe supported-gpus: %w", err)
			}
			if len(args) == 0 {
				if recipes, err = recipe.LoadDir(recipesDir); err != nil {
					return fmt.Errorf("recipe supported-gpus: %w", err)
				}
			} else if recipes, err = cells.LoadRecipes(args, recipesDir); err != nil {
				return fmt.Errorf("recipe supported-gpus: %w", err)
			}
			lists, err := matrix.FetchSupportedGPUs(ctx, recipes, matrix.Options{DownloadDir: cache})
			if err != nil {
				return err
			}
			if len(lists) == 0 {
				return fmt.Errorf("recipe supported-gpus: none of the %d recipes names a supported-gpus list", len(recipes))
			}
			if asJSON {
				return cmdout.PrintJSON(cmd.OutOrStdout(), lists)
			}
			for _, l := range lists {
				fmt.Fprintf(cmd.OutOrStdout(), "%s=%s %s\n", l.Package, l.Version, l.Path)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&recipesDir, "recipes", "", "directory of recipes: RECIPE names, and every recipe when none is named"+cells.RecipesDefaultHelp)
	f.StringVar(&cache, "cache", cmdenv.DownloadDefaultDir(), "download cache: debs/, apt/, supported-gpus/ ($KPRELOAD_CACHE)")
	f.BoolVar(&asJSON, "json", false, "print the lists as JSON (recipes, package, version, path, sha256, fetched)")
	return cmd
}
