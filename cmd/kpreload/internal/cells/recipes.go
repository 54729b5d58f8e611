package cells

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/builder/recipe"
)

// LoadCells loads the recipes the arguments name (see LoadRecipes), each
// optionally followed by ":KVER" to ask for that kernel only. A recipe named
// more than once is loaded once; its kernels are the union of its ":KVER"
// arguments, or its whole matrix when it is also named without one.
func LoadCells(args []string, dir string) ([]*recipe.Recipe, map[*recipe.Recipe][]string, error) {
	var (
		out     []*recipe.Recipe
		kernels = map[*recipe.Recipe][]string{}
		whole   = map[*recipe.Recipe]bool{}
		byName  = map[string]*recipe.Recipe{}
	)
	for _, arg := range args {
		ref, kver := arg, ""
		if !fileExists(arg) {
			if i := strings.LastIndexByte(arg, ':'); i >= 0 {
				ref, kver = arg[:i], arg[i+1:]
				if ref == "" || kver == "" {
					return nil, nil, fmt.Errorf("argument %q: want RECIPE or RECIPE:KVER", arg)
				}
			}
		}
		rs, err := LoadRecipes([]string{ref}, dir)
		if err != nil {
			return nil, nil, err
		}
		r := rs[0]
		if prev, ok := byName[r.Name]; ok {
			if !sameFile(prev.File, r.File) {
				return nil, nil, fmt.Errorf("recipe %s: both %s and %s are named %q", arg, prev.File, r.File, r.Name)
			}
			r = prev
		} else {
			byName[r.Name] = r
			out = append(out, r)
		}
		if kver == "" {
			whole[r] = true
		} else if !slices.Contains(kernels[r], kver) {
			kernels[r] = append(kernels[r], kver)
		}
	}
	for r := range whole {
		delete(kernels, r)
	}
	return out, kernels, nil
}

// LoadRecipes loads each argument: a recipe file, or the name of a recipe
// in dir (dir/NAME.yaml, else the recipe whose name: is NAME); an empty dir
// is --recipes' default (ResolveRecipesDir), looked for only when a name is.
func LoadRecipes(args []string, dir string) ([]*recipe.Recipe, error) {
	var out []*recipe.Recipe
	var all []*recipe.Recipe
	for _, arg := range args {
		if st, err := os.Stat(arg); err == nil && !st.IsDir() {
			r, err := recipe.Load(arg)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
			continue
		}
		if strings.ContainsRune(arg, filepath.Separator) || strings.HasSuffix(arg, ".yaml") {
			return nil, fmt.Errorf("recipe %s: no such file", arg)
		}
		if dir == "" {
			d, err := ResolveRecipesDir(dir)
			if err != nil {
				return nil, fmt.Errorf("recipe %s: not a file, so looked for it by name: %w", arg, err)
			}
			dir = d
		}
		if file := filepath.Join(dir, arg+".yaml"); fileExists(file) {
			r, err := recipe.Load(file)
			if err != nil {
				return nil, err
			}
			if r.Name == arg {
				out = append(out, r)
				continue
			}
		}
		if all == nil {
			var err error
			if all, err = recipe.LoadDir(dir); err != nil {
				return nil, fmt.Errorf("recipe %s: not a file, so looked in %s: %w", arg, dir, err)
			}
		}
		i := slices.IndexFunc(all, func(r *recipe.Recipe) bool { return r.Name == arg })
		if i < 0 {
			var names []string
			for _, r := range all {
				names = append(names, r.Name)
			}
			return nil, fmt.Errorf("recipe %s: no such file and no recipe of that name in %s (have: %s)", arg, dir, strings.Join(names, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// sameFile reports whether two paths name the same file.
func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return os.SameFile(sa, sb)
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
