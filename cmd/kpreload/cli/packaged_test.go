package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cells"
	"github.com/kpreload/kpreload/internal/layout"
)

// TestRecipesDefault: every --recipes says where its default comes from;
// from a checkout's root the default is ./recipes, and from a directory
// without one the packaged copy or, where that is missing too, an error
// naming both.
func TestRecipesDefault(t *testing.T) {
	// Every --recipes of the command tree leaves its default to
	// cells.ResolveRecipesDir and says so.
	var found []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if f := c.Flags().Lookup("recipes"); f != nil {
			found = append(found, c.CommandPath())
			if f.DefValue != "" || !strings.HasSuffix(f.Usage, cells.RecipesDefaultHelp) {
				t.Errorf("%s --recipes: default %q, help %q; want no default of its own and the help ending %q (cells.ResolveRecipesDir decides)", c.CommandPath(), f.DefValue, f.Usage, cells.RecipesDefaultHelp)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRoot())
	if len(found) < 4 {
		t.Errorf("--recipes found on %q; want build, follow, image build and cache verify at least", found)
	}
	for _, args := range [][]string{{"build"}, {"follow"}, {"image", "build"}, {"cache", "verify"}} {
		_, help, _ := runCLI(append(args, "--help")...)
		if want := "(default: ./recipes when it is a directory, else " + layout.Recipes + ")"; !strings.Contains(strings.Join(strings.Fields(help), " "), want) {
			t.Errorf("%s --help lacks %q", strings.Join(args, " "), want)
		}
	}
	t.Chdir("../../..")
	code, _, errOut := runCLI("build", "--cache", t.TempDir(), "no-such-recipe")
	if code == 0 || !strings.Contains(errOut, "no recipe of that name in recipes (have: ") {
		t.Errorf("build no-such-recipe at the checkout's root: exit %d, %q; want it looked in recipes", code, errOut)
	}
	t.Chdir(t.TempDir())
	code, _, errOut = runCLI("build", "--cache", t.TempDir(), "no-such-recipe")
	want := "neither ./recipes (a kpreload checkout) nor " + layout.Recipes
	if fi, err := os.Stat(layout.Recipes); err == nil && fi.IsDir() {
		want = "no recipe of that name in " + layout.Recipes // the package is installed here
	}
	if code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("build no-such-recipe without ./recipes: exit %d, %q; want %q", code, errOut, want)
	}
}
