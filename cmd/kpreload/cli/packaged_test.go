package cli

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cells"
	"github.com/kpreload/kpreload/internal/layout"
)

// treeOf lists root's paths with their sizes: what a command left there.
func treeOf(t *testing.T, root string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		got[p] = fi.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestPackagedHooksInert: on a root kpreload install never made boot
// kpreload (a host where only the package is installed), the hooks the
// package ships (postinst, postrm, GRUB's script) exit 0, print nothing and
// leave the root as it was; once the root is installed they act.
func TestPackagedHooksInert(t *testing.T) {
	const k = "6.1.0-56-cloud-amd64"
	root := t.TempDir()
	for p, s := range map[string]string{
		"boot/vmlinuz-" + k: "k", "lib/modules/" + k + "/modules.dep": "", "boot/grub/grub.cfg": "# Debian's\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hooks := [][]string{
		{"kernel-hook", "postinst", k, "/boot/vmlinuz-" + k, "--root", root},
		{"kernel-hook", "postrm", k, "/boot/vmlinuz-" + k, "--root", root},
		{"kernel-hook", "grub-entries", "--root", root},
	}
	before := treeOf(t, root)
	for _, args := range hooks {
		code, out, errOut := runCLI(args...)
		if code != 0 || out != "" || errOut != "" {
			t.Errorf("%q before kpreload install: exit %d, stdout %q, stderr %q; want 0 and silence", args, code, out, errOut)
		}
	}
	after := treeOf(t, root)
	if len(after) != len(before) {
		t.Errorf("the hooks changed the root before kpreload install:\nbefore %v\nafter  %v", before, after)
	}
	// A bad release is still refused before anything else.
	if code, _, errOut := runCLI("kernel-hook", "postinst", "../x", "--root", root); code == 0 || !strings.Contains(errOut, "starts with '.'") {
		t.Errorf("postinst ../x: exit %d, %q; want the release refused", code, errOut)
	}
	// Installed: the postinst hook acts (and here fails: the root has no
	// /init for the initramfs), grub-entries prints the entry.
	if err := os.MkdirAll(filepath.Join(root, install.InitramfsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(hooks[0]...); code == 0 && out == "" && errOut == "" {
		t.Errorf("postinst on an installed root did nothing: exit 0, no output")
	}
	if err := os.WriteFile(filepath.Join(root, install.InitramfsPath(k)), []byte("i"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(hooks[2]...); code != 0 || !strings.Contains(out, "menuentry '") {
		t.Errorf("grub-entries on an installed root: exit %d\nstdout %s\nstderr %s\nwant 0 and kpreload's entry", code, out, errOut)
	}
}

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
