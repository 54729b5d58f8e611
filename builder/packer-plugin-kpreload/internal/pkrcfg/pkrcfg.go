// Package pkrcfg holds the configuration the kpreload Packer builder and
// provisioner share: the Shared fields both embed, loading the recipes a
// template names, checking kernels against the recipes' matrices, finding
// kpreload's binaries, sizes and directory permissions.
package pkrcfg

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/internal/layout"
)

// Lister resolves recipes' kernel selectors when a kernel is not named in a
// recipe's explicit releases; nil (the default) is the archive's package
// lists (recipe.AptKernelsIn the download directory); tests replace it.
var Lister recipe.KernelLister

// Executable returns the running program's path; tests replace it.
var Executable = os.Executable

// LoadRecipes loads the recipes a template lists: paths (anything with a
// slash or a .yaml suffix) directly, names from dir. Errors name the list
// entry ("recipes[1]") and, for an unknown name, what dir holds.
func LoadRecipes(dir string, refs []string) ([]*recipe.Recipe, []error) {
	var (
		out    []*recipe.Recipe
		errs   []error
		byName map[string]*recipe.Recipe
		broken map[string]error
		seen   = map[string]bool{}
	)
	for i, ref := range refs {
		field := fmt.Sprintf("recipes[%d]", i)
		var r *recipe.Recipe
		if isPath(ref) {
			var err error
			if r, err = recipe.Load(ref); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", field, err))
				continue
			}
		} else {
			if byName == nil {
				var err error
				byName, broken, err = scanRecipes(dir)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", field, err))
					byName = map[string]*recipe.Recipe{}
					continue
				}
			}
			var ok bool
			if r, ok = byName[ref]; !ok {
				if err, bad := broken[ref]; bad {
					errs = append(errs, fmt.Errorf("%s: recipe %q in %s does not load: %w", field, ref, dir, err))
				} else {
					errs = append(errs, fmt.Errorf("%s: unknown recipe %q; %s holds: %s", field, ref, dir, listNames(byName)))
				}
				continue
			}
		}
		if seen[r.Name] {
			errs = append(errs, fmt.Errorf("%s: recipe %s is listed twice", field, r.Name))
			continue
		}
		seen[r.Name] = true
		out = append(out, r)
	}
	return out, errs
}

// isPath reports whether a recipes entry names a file rather than a recipe.
func isPath(ref string) bool {
	return strings.ContainsRune(ref, os.PathSeparator) || strings.HasSuffix(ref, ".yaml") || strings.HasSuffix(ref, ".yml")
}

// scanRecipes loads every *.yaml recipe in dir, by recipe name. Recipes that
// fail to load are returned in broken, keyed by file base name, so that only
// the recipes a template asks for can fail its build.
func scanRecipes(dir string) (byName map[string]*recipe.Recipe, broken map[string]error, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, nil, fmt.Errorf("list recipes in %s: %w", dir, err)
	}
	if len(files) == 0 {
		if _, serr := os.Stat(dir); serr != nil {
			return nil, nil, fmt.Errorf("recipes_dir: %w", serr)
		}
		return nil, nil, fmt.Errorf("recipes_dir %s holds no recipes (*.yaml)", dir)
	}
	byName = map[string]*recipe.Recipe{}
	broken = map[string]error{}
	for _, f := range files {
		r, err := recipe.Load(f)
		if err != nil {
			broken[strings.TrimSuffix(filepath.Base(f), ".yaml")] = err
			continue
		}
		byName[r.Name] = r
	}
	return byName, broken, nil
}

// listNames lists recipe names, sorted.
func listNames(m map[string]*recipe.Recipe) string {
	if len(m) == 0 {
		return "(no loadable recipe)"
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// CheckKernels checks that every kernel is in every recipe's matrix. Explicit
// releases are checked directly; selectors are resolved against the archive
// (Lister, else the archive's private apt configurations under
// downloadDir) only when needed. Errors name the list entry
// ("kernels[0]").
func CheckKernels(kernels []string, recipes []*recipe.Recipe, downloadDir string) []error {
	lister := Lister
	if lister == nil {
		lister = recipe.AptKernelsIn(downloadDir)
	}
	var errs []error
	for _, r := range recipes {
		var resolved []string
		var resolveErr error
		resolvedOnce := false
		for i, k := range kernels {
			if slices.Contains(r.Kernels.Releases, k) {
				continue
			}
			if len(r.Kernels.Select) > 0 && !resolvedOnce {
				resolved, resolveErr = recipe.Matrix{Select: r.Kernels.Select}.Resolve(lister)
				resolvedOnce = true
			}
			if slices.Contains(resolved, k) {
				continue
			}
			where := ""
			if r.File != "" {
				where = " (" + r.File + ")"
			}
			msg := fmt.Sprintf("kernels[%d]: kernel %s is not in recipe %s's kernel matrix%s: %s",
				i, k, r.Name, where, describeMatrix(r.Kernels, resolved))
			if resolveErr != nil {
				msg += fmt.Sprintf(" (its selectors could not be resolved: %v)", resolveErr)
			}
			errs = append(errs, errors.New(msg))
		}
	}
	return errs
}

// describeMatrix says what a matrix holds: its explicit releases and, for its
// selectors, what they resolved to (if they were resolved).
func describeMatrix(m recipe.Matrix, resolved []string) string {
	var parts []string
	if len(m.Releases) > 0 {
		parts = append(parts, "releases "+strings.Join(m.Releases, ", "))
	}
	for _, s := range m.Select {
		parts = append(parts, s.String())
	}
	if len(m.Select) > 0 && len(resolved) > 0 {
		parts = append(parts, "selected today: "+strings.Join(resolved, ", "))
	}
	if len(parts) == 0 {
		return "empty"
	}
	return strings.Join(parts, "; ")
}

// Creatable checks that path can be created or written to: it, or its
// nearest existing ancestor, must be a writable directory.
func Creatable(path string) error {
	p, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	for {
		st, err := os.Stat(p)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("%s is in the way of %s: not a directory", p, path)
			}
			if err := unix.Access(p, unix.W_OK|unix.X_OK); err != nil {
				return fmt.Errorf("cannot create %s: %s is not writable: %w", path, p, err)
			}
			return nil
		}
		parent := filepath.Dir(p)
		if parent == p {
			return fmt.Errorf("cannot create %s: %w", path, err)
		}
		p = parent
	}
}

// ParseSize reads a size in MiB: "4096", "4096M", "4G", "1T"; "" is 0.
func ParseSize(field, s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	mult := 1
	num := strings.TrimSpace(s)
	switch {
	case strings.HasSuffix(num, "T"):
		mult, num = 1024*1024, strings.TrimSuffix(num, "T")
	case strings.HasSuffix(num, "G"):
		mult, num = 1024, strings.TrimSuffix(num, "G")
	case strings.HasSuffix(num, "M"):
		num = strings.TrimSuffix(num, "M")
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s %q: want a positive number of MiB, or a number with an M, G or T suffix, such as 4G", field, s)
	}
	return n * mult, nil
}

// DefaultBinary finds a kpreload program next to the running plugin, else
// under bin/ in the working directory (where `make build` puts it), else
// where the kpreload package installs it (internal/layout: /usr/bin/kpreload,
// /usr/lib/kpreload/NAME; a plugin `packer plugins install` copied sits
// beside neither); it returns bin/NAME when none exists, so the error names
// where it looked.
func DefaultBinary(name string) string {
	if exe, err := Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	local := filepath.Join("bin", name)
	if _, err := os.Stat(local); err == nil {
		return local
	}
	installed := filepath.Join(layout.LibDir, name)
	if name == filepath.Base(layout.Kpreload) {
		installed = layout.Kpreload
	}
	if _, err := os.Stat(installed); err == nil {
		return installed
	}
	return local
}

// Unjoin splits an errors.Join error into its parts.
func Unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// CheckInstance reads an instance YAML file strictly (gpu/instance), so that a
// template naming a bad one fails before the build with the file, line and field.
func CheckInstance(path string) error {
	if path == "" {
		return nil
	}
	if _, err := instance.ReadFile(path); err != nil {
		return fmt.Errorf("instance_file: %w", err)
	}
	return nil
}
