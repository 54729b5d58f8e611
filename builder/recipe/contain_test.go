package recipe

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// makeTree creates files under root: each key is a path relative to root,
// each value the file's contents, or "->target" for a symbolic link to target.
func makeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// containCase is a case of TestContainment.
type containCase struct {
	name  string
	files map[string]string // under the test's root; the recipe is recipes/r.yaml
	via   string            // the recipe file's path relative to root, "" for recipes/r.yaml
	text  string            // patchRecipe or sourceRecipe
	arg   string            // the patch list or source.dir; {recipes} is the recipe directory
	field string            // "" when the recipe loads
	// want is in the field's message; {root}, {recipes} and {outside}
	// stand for root, root/recipes and root/outside, links followed.
	want string
	// patches, for a recipe that loads, is what PatchFiles gives, relative to {recipes}.
	patches []string
}

// TestContainment checks that patches and source.dir must resolve inside the
// recipe's directory once every link is followed, and that links that stay
// inside it (as recipes/testdriver-2/ has) are fine.
func TestContainment(t *testing.T) {
	const (
		conf  = "PACKAGE_NAME=\"td\"\nPACKAGE_VERSION=\"1.0.0\"\nBUILT_MODULE_NAME[0]=\"td\"\n"
		patch = "Fixes the build on 6.12: why and how.\n--- a/f.c\n+++ b/f.c\n"
		// Recipes with a package source and patches, or with source.dir.
		patchRecipe  = validHead + "patches: [%s]\nkernels: {releases: [6.1.0-56-cloud-amd64]}\n"
		sourceRecipe = "name: x\ndriver: {name: td, version: 1.0.0}\nflavor: open\nsource:\n  dir: %s\nmodules: [td]\nkernels: {releases: [6.1.0-56-cloud-amd64]}\n"
	)
	tests := []containCase{
		// Refused.
		{name: "patch symlink to /etc/passwd", files: map[string]string{"recipes/p/symlink.patch": "->/etc/passwd"},
			text: patchRecipe, arg: "p/symlink.patch",
			field: "patches[0]", want: `"p/symlink.patch" leads to /etc/passwd, outside the recipe's directory {recipes}`},
		{name: "patch ../x.patch", files: map[string]string{"x.patch": patch},
			text: patchRecipe, arg: "../x.patch",
			field: "patches[0]", want: `"../x.patch" leads to {root}/x.patch, outside the recipe's directory {recipes}`},
		{name: "absolute patch path", text: patchRecipe, arg: "/etc/passwd",
			field: "patches[0]", want: `"/etc/passwd" is absolute`},
		{name: "absolute patch path inside the directory", files: map[string]string{"recipes/p/fix.patch": patch},
			text: patchRecipe, arg: "{recipes}/p/fix.patch",
			field: "patches[0]", want: `/p/fix.patch" is absolute`},
		{name: "unclean patch path", files: map[string]string{"recipes/p/fix.patch": patch},
			text: patchRecipe, arg: "p/./fix.patch",
			field: "patches[0]", want: `"p/./fix.patch": give a clean path relative to the recipe file ("p/fix.patch")`},
		{name: "patch in a linked directory leading out", files: map[string]string{"recipes/p": "->../outside", "outside/fix.patch": patch},
			text: patchRecipe, arg: "p/fix.patch",
			field: "patches[0]", want: `"p/fix.patch" leads to {outside}/fix.patch, outside the recipe's directory {recipes}`},
		{name: "patch link chain leading out", files: map[string]string{"recipes/p/a.patch": "->b.patch", "recipes/p/b.patch": "->/etc/passwd"},
			text: patchRecipe, arg: "p/a.patch",
			field: "patches[0]", want: `"p/a.patch" leads to /etc/passwd, outside`},
		{name: "second patch leads out", files: map[string]string{"recipes/p/fix.patch": patch, "recipes/p/b.patch": "->../../outside/fix.patch", "outside/fix.patch": patch},
			text: patchRecipe, arg: "p/fix.patch, p/b.patch",
			field: "patches[1]", want: `"p/b.patch" leads to {outside}/fix.patch, outside`},
		{name: "dangling patch link", files: map[string]string{"recipes/p/a.patch": "->nowhere.patch"},
			text: patchRecipe, arg: "p/a.patch",
			field: "patches[0]", want: `"p/a.patch": lstat {recipes}/p/nowhere.patch: no such file or directory`},
		{name: "patch is a directory", files: map[string]string{"recipes/p/fix.patch": patch},
			text: patchRecipe, arg: "p",
			field: "patches[0]", want: `"p" leads to {recipes}/p, which is not a regular file`},
		{name: "source.dir ../outside-src", files: map[string]string{"outside-src/dkms.conf": conf},
			text: sourceRecipe, arg: "../outside-src",
			field: "source.dir", want: `"../outside-src" leads to {root}/outside-src, outside the recipe's directory {recipes}`},
		{name: "source.dir a symlink leading out", files: map[string]string{"recipes/src": "->../outside/src", "outside/src/dkms.conf": conf},
			text: sourceRecipe, arg: "src",
			field: "source.dir", want: `"src" leads to {outside}/src, outside the recipe's directory {recipes}`},
		{name: "source.dir inside a linked directory leading out", files: map[string]string{"recipes/d": "->../outside", "outside/src/dkms.conf": conf},
			text: sourceRecipe, arg: "d/src",
			field: "source.dir", want: `"d/src" leads to {outside}/src, outside`},
		{name: "source dkms.conf links out", files: map[string]string{"recipes/src/dkms.conf": "->../../outside/dkms.conf", "outside/dkms.conf": conf},
			text: sourceRecipe, arg: "src",
			field: "source.dir", want: `src/dkms.conf leads to {outside}/dkms.conf, outside the recipe's directory {recipes}`},
		{name: "source file links to /etc/passwd", files: map[string]string{"recipes/src/dkms.conf": conf, "recipes/src/td.c": "->/etc/passwd"},
			text: sourceRecipe, arg: "src",
			field: "source.dir", want: `src/td.c leads to /etc/passwd, outside`},
		{name: "source subdirectory links out", files: map[string]string{"recipes/src/dkms.conf": conf, "recipes/src/sub": "->/etc"},
			text: sourceRecipe, arg: "src",
			field: "source.dir", want: `src/sub leads to /etc, outside`},
		{name: "dangling link in the source", files: map[string]string{"recipes/src/dkms.conf": conf, "recipes/src/td.c": "->gone.c"},
			text: sourceRecipe, arg: "src",
			field: "source.dir", want: `src/td.c is a link that does not resolve`},
		{name: "source.dir is a file", files: map[string]string{"recipes/src": conf},
			text: sourceRecipe, arg: "src",
			field: "source.dir", want: `"src" leads to {recipes}/src, which is not a directory`},
		{name: "source.dir missing", text: sourceRecipe, arg: "nowhere",
			field: "source.dir", want: `"nowhere": lstat {recipes}/nowhere: no such file or directory`},

		// Loaded: links that stay inside the recipe's directory.
		{name: "patch", files: map[string]string{"recipes/p/fix.patch": patch},
			text: patchRecipe, arg: "p/fix.patch", patches: []string{"p/fix.patch"}},
		{name: "patch link inside the directory", files: map[string]string{"recipes/p/link.patch": "->../patches/real.patch", "recipes/patches/real.patch": patch},
			text: patchRecipe, arg: "p/link.patch, patches/real.patch", patches: []string{"patches/real.patch", "patches/real.patch"}},
		{name: "patch link out and back in", files: map[string]string{"recipes/p/a.patch": "->../../recipes/patches/real.patch", "recipes/patches/real.patch": patch},
			text: patchRecipe, arg: "p/a.patch", patches: []string{"patches/real.patch"}},
		{name: "recipe directory reached through a link", files: map[string]string{"linked": "->recipes", "recipes/p/fix.patch": patch, "recipes/p/link.patch": "->fix.patch"},
			via: "linked/r.yaml", text: patchRecipe, arg: "p/link.patch", patches: []string{"p/fix.patch"}},
		{name: "source files linked to a sibling (testdriver-2)", files: map[string]string{"recipes/src/dkms.conf": conf, "recipes/src/td.c": "->../common/td.c", "recipes/src/Makefile": "->../common/Makefile", "recipes/common/td.c": "int x;\n", "recipes/common/Makefile": "obj-m := td.o\n"},
			text: sourceRecipe, arg: "src"},
		{name: "source.dir a link inside", files: map[string]string{"recipes/src-link": "->src", "recipes/src/dkms.conf": conf},
			text: sourceRecipe, arg: "src-link"},
		{name: "source subdirectory linked inside", files: map[string]string{"recipes/src/dkms.conf": conf, "recipes/src/sub": "->../common", "recipes/common/x.h": "\n"},
			text: sourceRecipe, arg: "src"},
	}
	for _, tc := range tests {
		// The recipe named by an absolute path, and relative to the working
		// directory (as a relative --recipes names it): the same answers.
		for _, spelled := range []string{"absolute", "relative"} {
			t.Run(tc.name+" "+spelled, func(t *testing.T) {
				tc.run(t, spelled)
			})
		}
	}
}

// run runs the case with the recipe file named as spelled says: "absolute",
// or "relative" to the working directory.
func (tc containCase) run(t *testing.T, spelled string) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "recipes"), 0o755); err != nil {
		t.Fatal(err)
	}
	makeTree(t, root, tc.files)
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	expand := strings.NewReplacer("{root}", real, "{recipes}", filepath.Join(real, "recipes"), "{outside}", filepath.Join(real, "outside")).Replace
	named := root
	if spelled == "relative" {
		t.Chdir(root)
		named = ""
	}
	file := filepath.Join(named, "recipes", "r.yaml")
	if tc.via != "" {
		file = filepath.Join(named, tc.via)
	}
	if err := os.WriteFile(filepath.Join(root, "recipes", "r.yaml"), []byte(strings.Replace(tc.text, "%s", expand(tc.arg), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(file)
	if tc.field == "" {
		if err != nil {
			t.Fatalf("Load(%s) = %v, want no error", t.Name(), err)
		}
		got, err := r.PatchFiles()
		var want []string
		for _, p := range tc.patches {
			want = append(want, expand(filepath.Join("{recipes}", p)))
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("PatchFiles() = %q, %v; want %q", got, err, want)
		}
		return
	}
	if err == nil {
		t.Fatalf("Load(%s) = nil error, want %s refused", t.Name(), tc.field)
	}
	want := expand(tc.want)
	var found *Error
	for _, e := range flatten(err) {
		var re *Error
		if errors.As(e, &re) && re.Field == tc.field && strings.Contains(re.Msg, want) {
			found = re
		}
	}
	if found == nil || found.File != file || found.Line <= 0 {
		t.Errorf("Load(%s) error =\n%v\nwant an *Error for %s at a line of %s containing %q", t.Name(), err, tc.field, file, want)
	}
	if r != nil {
		t.Errorf("Load(%s) = %+v with an error, want no recipe", t.Name(), r)
	}
}

// flatten returns the errors joined in err, or err alone.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestPatchFilesRefuses checks that PatchFiles itself, the paths the matrix
// reads patches through, refuses a patch leading out of a recipe that was
// loaded when the link still led inside.
func TestPatchFilesRefuses(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, map[string]string{"p/real.patch": "Fixes x.\n--- a/f\n+++ b/f\n", "p/fix.patch": "->real.patch"})
	file := filepath.Join(dir, "r.yaml")
	if err := os.WriteFile(file, []byte(validHead+"patches: [p/fix.patch]\nkernels: {releases: [6.1.0-56-cloud-amd64]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "p", "fix.patch")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "p", "fix.patch")); err != nil {
		t.Fatal(err)
	}
	got, err := r.PatchFiles()
	want := `patches[0]: "p/fix.patch" leads to /etc/passwd, outside the recipe's directory`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("PatchFiles() = %q, %v; want an error containing %q", got, err, want)
	}
}
