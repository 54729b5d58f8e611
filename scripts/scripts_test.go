// Package scripts_test checks the shell scripts under scripts/ against the
// recipes they read: one recipe grammar (the Go loader's), every shipped
// recipe fed to every script that reads recipes.
package scripts_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/gpu/supported"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// textTools are programs that would read a recipe's YAML as text: a script
// that hands them a recipe keeps a second recipe grammar.
var textTools = []string{"awk", "gawk", "mawk", "sed", "grep", "egrep", "yq", "python", "python3", "perl", "cut", "head", "tail"}

// recipeReads returns "LINE: COMMAND" for every command of script that runs
// a text tool with a recipe (an argument or a redirection naming a .yaml file
// or a recipe variable).
func recipeReads(t *testing.T, name string, src []byte) []string {
	t.Helper()
	f, err := syntax.NewParser(syntax.KeepComments(false)).Parse(strings.NewReader(string(src)), name)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	var out []string
	printer := syntax.NewPrinter()
	words := func(w *syntax.Word) string {
		var b strings.Builder
		printer.Print(&b, w)
		return b.String()
	}
	mentionsRecipe := func(s string) bool {
		s = strings.ToLower(s)
		return strings.Contains(s, ".yaml") || strings.Contains(s, "recipe")
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		st, ok := n.(*syntax.Stmt)
		if !ok {
			return true
		}
		call, ok := st.Cmd.(*syntax.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		tool := filepath.Base(words(call.Args[0]))
		if !slices.Contains(textTools, tool) {
			return true
		}
		var hit []string
		for _, a := range call.Args[1:] {
			if w := words(a); mentionsRecipe(w) && !strings.HasPrefix(w, "'") {
				hit = append(hit, w)
			}
		}
		for _, r := range st.Redirs {
			if r.Op == syntax.RdrIn && r.Word != nil && mentionsRecipe(words(r.Word)) {
				hit = append(hit, "<"+words(r.Word))
			}
		}
		if len(hit) > 0 {
			out = append(out, st.Pos().String()+": "+tool+" "+strings.Join(hit, " "))
		}
		return true
	})
	return out
}

// TestNoScriptParsesRecipes: no script reads a recipe with awk, sed, grep
// and the like; they ask kpreload (the Go recipe loader) instead, so a
// recipe the loader accepts never breaks a script.
func TestNoScriptParsesRecipes(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(t), "scripts", "*.sh"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts found (%v)", err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recipeReads(t, filepath.Base(f), src) {
			t.Errorf("%s: reads a recipe as text (%s): ask kpreload instead (kpreload recipe …, kpreload build RECIPE:KVER)", filepath.Base(f), r)
		}
	}
}

// TestRecipeReadsDetected: the check above catches the shapes scripts used
// (got, want).
func TestRecipeReadsDetected(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int
	}{
		{`awk '/^suite:/ { print }' "$recipe"`, 1},
		{`awk -v ks="$ks" '/^kernels:/ { print }' "$top/recipes/$name.yaml" >"$out"`, 1},
		{`sed -n 1p < recipes/nvidia-550.yaml`, 1},
		{`grep -c chips "$work/supported-gpus.json"`, 0},
		{`kpreload build "$recipe:$kver" --recipes "$top/recipes"`, 0},
		{`awk '{ print "recipe" }' "$file"`, 0},
	} {
		if got := len(recipeReads(t, "t.sh", []byte(tc.src))); got != tc.want {
			t.Errorf("%s: %d recipe reads found, want %d", tc.src, got, tc.want)
		}
	}
}

// TestSupportedGPUsEveryRecipe runs scripts/supported-gpus.sh on every
// shipped recipe file, as a user would, and checks that every recipe naming
// a supported-gpus list got a real NVIDIA list (driver versions resolved as
// a build resolves them, source.select recipes included) and that the
// others are left out.
func TestSupportedGPUsEveryRecipe(t *testing.T) {
	testenv.SkipShort(t, "downloads NVIDIA's driver packages from Debian")
	root := testenv.RepoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "recipes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recipes (%v)", err)
	}
	want := map[string]bool{} // recipes that name a list
	for _, f := range files {
		r, err := recipe.Load(f)
		if err != nil {
			t.Fatalf("shipped recipe %s: %v", f, err)
		}
		if r.SupportedGPUs != nil {
			want[r.Name] = true
		}
	}
	if len(want) < 5 {
		t.Fatalf("%d shipped recipes name a supported-gpus list, want the NVIDIA ones (at least 5)", len(want))
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "supported-gpus.sh"), append([]string{"--json"}, files...)...)
	cmd.Env = append(os.Environ(), "KPRELOAD_CACHE="+testenv.CacheRoot())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/supported-gpus.sh %d recipes: %v\n%s", len(files), err, stderr.String())
	}
	var lists []struct {
		Recipes          []string
		Package, Version string
		Path             string
	}
	if err := json.Unmarshal(out, &lists); err != nil {
		t.Fatalf("supported-gpus.sh --json: %v\n%s", err, out)
	}
	got := map[string]bool{}
	for _, l := range lists {
		for _, r := range l.Recipes {
			if !want[r] {
				t.Errorf("recipe %s got a list (%s=%s) but names none", r, l.Package, l.Version)
			}
			got[r] = true
		}
		if want := filepath.Join(testenv.CacheRoot(), "supported-gpus", l.Package+"_"+l.Version, "supported-gpus.json"); l.Path != want {
			t.Errorf("%s=%s: path %s, want %s", l.Package, l.Version, l.Path, want)
		}
		sl, err := supported.ReadFile(l.Path)
		if err != nil {
			t.Errorf("%s=%s: %v", l.Package, l.Version, err)
			continue
		}
		if len(sl.Chips) < 1000 {
			t.Errorf("%s=%s lists %d chips, want NVIDIA's list (over 1000)", l.Package, l.Version, len(sl.Chips))
		}
	}
	for r := range want {
		if !got[r] {
			t.Errorf("recipe %s names a supported-gpus list; the script fetched none for it", r)
		}
	}
}
