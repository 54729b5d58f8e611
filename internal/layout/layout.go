// Package layout says where kpreload's programs and data are once installed,
// by its Debian package (make deb) and in the images it builds, and how a
// program finds the ones shipped with it: one answer for the CLI, the
// package builder and the docs.
package layout

import (
	"fmt"
	"os"
	"path/filepath"
)

// Installed paths (absolute).
const (
	// Kpreload is the kpreload CLI.
	Kpreload = "/usr/bin/kpreload"
	// LibDir holds the programs kpreload runs or copies into images but a
	// user does not run: the /init program, the test root's init, the
	// Packer plugin.
	LibDir = "/usr/lib/kpreload"
	// Recipes is the packaged copy of the driver recipes.
	Recipes = "/usr/share/kpreload/recipes"
	// DocDir holds the package's copyright and changelog.
	DocDir = "/usr/share/doc/kpreload"
)

// LocalRecipes is a checkout's recipes directory, relative to the working
// directory.
const LocalRecipes = "recipes"

// Programs shipped with kpreload, by file name: beside bin/kpreload in a
// checkout (make build, make plugin), in LibDir once installed.
const (
	// Init is the static /init of every kpreload initramfs.
	Init = "kpreload-init"
	// RootInit is the /sbin/init of kpreload rootdisk's test roots.
	RootInit = "kpreload-rootinit"
	// Plugin is the Packer plugin.
	Plugin = "packer-plugin-kpreload"
)

// Companion returns the path of program name, shipped with kpreload, for the
// kpreload executable at exe: beside exe when it is there (a checkout's bin/),
// else in LibDir when it is there (the package), else beside exe, the path an
// error then names.
func Companion(exe, name string) string { return companion(exe, LibDir, name) }

func companion(exe, libDir, name string) string {
	beside := filepath.Join(filepath.Dir(exe), name)
	if isFile(beside) {
		return beside
	}
	if p := filepath.Join(libDir, name); isFile(p) {
		return p
	}
	return beside
}

// RecipesDir is the recipes directory a command reads when none is named:
// ./recipes when it is a directory (a checkout), else the packaged copy
// (Recipes). It fails, naming both, when neither is a directory.
func RecipesDir() (string, error) { return recipesDir(LocalRecipes, Recipes) }

func recipesDir(local, packaged string) (string, error) {
	for _, d := range []string{local, packaged} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return d, nil
		}
	}
	if !filepath.IsAbs(local) {
		local = "./" + local
	}
	return "", fmt.Errorf("no recipes directory: neither %s (a kpreload checkout) nor %s (the kpreload package) is one; name one with --recipes", local, packaged)
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
