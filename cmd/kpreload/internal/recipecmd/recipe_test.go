package recipecmd

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestRecipeHelpExamples runs every example of `kpreload recipe
// supported-gpus --help` exactly as written, from the checkout (where
// recipes/ is): each fetches (or finds) the real list of the recipe's
// driver package and names it.
func TestRecipeHelpExamples(t *testing.T) {
	examples := cli.HelpExamples(t, "recipe", "supported-gpus")
	testenv.SkipShort(t, "downloads NVIDIA's driver packages from Debian")
	t.Chdir(testenv.RepoRoot(t))
	for _, args := range examples {
		code, out, errOut := runCLI(args...)
		if code != 0 {
			t.Fatalf("kpreload %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		switch {
		case strings.Contains(strings.Join(args, " "), "--json"):
			var lists []struct {
				Recipes []string
				Package string
				Path    string
			}
			if err := json.Unmarshal([]byte(out), &lists); err != nil || len(lists) != 1 || lists[0].Package != "nvidia-tesla-470-driver" {
				t.Errorf("kpreload %s printed %s (%v), want the one list of nvidia-tesla-470-driver", strings.Join(args, " "), out, err)
			}
		default:
			if !strings.HasPrefix(out, "nvidia-driver=550.") || !strings.Contains(out, "/supported-gpus/nvidia-driver_550.") {
				t.Errorf("kpreload %s printed %q, want nvidia-driver=550.… and its path", strings.Join(args, " "), out)
			}
		}
	}
	if len(examples) != 2 {
		t.Errorf("%d examples, want 2", len(examples))
	}
}

// TestRecipeSupportedGPUsErrors: a recipe that is not there, and recipes
// that name no list, are errors that say so.
func TestRecipeSupportedGPUsErrors(t *testing.T) {
	root := testenv.RepoRoot(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"recipe", "supported-gpus", "no-such-recipe", "--recipes", root + "/recipes"}, "no such file and no recipe of that name"},
		{[]string{"recipe", "supported-gpus", "testdriver", "--recipes", root + "/recipes", "--cache", t.TempDir()}, "none of the 1 recipes names a supported-gpus list"},
	} {
		code, _, errOut := runCLI(tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("kpreload %s: exit %d, stderr %q; want an error with %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
}
