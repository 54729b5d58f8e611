package modalias

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/modname"
)

// FuzzLoadTree checks the readers of a module tree's text indexes
// (modules.dep, modules.alias, modules.softdep, modules.builtin and
// modules.builtin.modinfo), which come from the kernel module files of a
// root given with --root, an image or a seed disk: no panic; an error comes
// without a tree and names the modules directory; an accepted tree only
// holds modules with a name, normalised the kmod way; every module Names
// lists is found by Module, loadable ones with their modules.dep path;
// LoadOrder of a module succeeds and lists the module and all its
// dependencies once each; a loadable module resolves to itself by name; and
// every literal alias of modules.alias resolves to its module when no module
// of that name comes first.
func FuzzLoadTree(f *testing.F) {
	f.Add(smallTree["modules.dep"], smallTree["modules.alias"], smallTree["modules.softdep"], smallTree["modules.builtin"], smallTree["modules.builtin.modinfo"])
	for _, s := range [][5]string{
		{"", "", "", "", ""},
		{"a.ko:\n", "alias x a\n", "softdep a pre: b post: c\n", "b.ko\n", "c.alias=y\x00"},
		{"a.ko: b.ko\nb.ko: a.ko\n", "alias * a\nalias ?x b\nalias [ab]* a\n", "softdep * pre: a\nsoftdep b post: a\n", "", ""},
		{"kernel/x-y.ko.xz: kernel/z.ko.zst\n", "alias x[-]y z\nalias x]y z\n", "softdep x \\\n pre: z\n", "kernel/q.ko\n", "q.alias=x-y\x00q.param=1\x00"},
		{"a.ko:\na.ko:\n", "", "", "", ""},
		{"a.ko:\n", "alias a\n", "", "", ""},
		{"a.ko:\n", "", "options a x=1\n", "", ""},
		{"a.ko:\n", "", "", "x y\n", ""},
		{"a.ko:\n", "", "", "", "garbage\x00"},
		{"/:\n", "alias x .ko\n", "", "", "/.alias=z\x00"},
		{"a.ko:\n", "alias x .ko\n", "", "", ""},
		{"a.ko:\n", "", "", "", "/.alias=z\x00"},
		{"a.ko:\n", "alias symbol:f a\nalias a:b a\n", "softdep [a pre: b\n", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	dir := f.TempDir()
	files := []string{fileDep, fileAlias, fileSoftdep, fileBuiltin, fileBuiltinModinfo}
	f.Fuzz(func(t *testing.T, dep, alias, softdep, builtin, modinfo string) {
		for i, data := range []string{dep, alias, softdep, builtin, modinfo} {
			if err := os.WriteFile(filepath.Join(dir, files[i]), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		tree, err := LoadTree(dir)
		if err != nil {
			if tree != nil {
				t.Fatalf("LoadTree returned a tree and error %v", err)
			}
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("error %q does not name the modules directory", err)
			}
			return
		}
		checkTree(t, tree)
	})
}

// checkTree checks the invariants of an accepted tree (see FuzzLoadTree).
func checkTree(t *testing.T, tree *Tree) {
	t.Helper()
	names := tree.Names()
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Fatalf("Names() = %q: not sorted and unique", names)
	}
	var all []string // every module name the tree holds, from every index
	for n := range tree.mods {
		all = append(all, n)
	}
	for n := range tree.inKernel {
		all = append(all, n)
	}
	for _, e := range slices.Concat(tree.aliases, tree.builtinAliases) {
		all = append(all, e.module)
	}
	for _, n := range all {
		if n == "" || modname.FromPath(n) != n {
			t.Fatalf("the tree holds a module named %q (want a non-empty name, normalised)", n)
		}
	}
	for _, n := range names {
		m, ok := tree.Module(n)
		if !ok || m.Name != n || (m.Path == "") != m.Builtin || tree.Builtin(n) != m.Builtin {
			t.Fatalf("Module(%q) = %+v, %v; Builtin = %v", n, m, ok, tree.Builtin(n))
		}
	}
	for i, e := range tree.order {
		if m, ok := tree.Module(e.name); !ok || m.Path != e.path || e.idx != i {
			t.Fatalf("modules.dep entry %d %+v: Module = %+v, %v", i, e, m, ok)
		}
		for _, d := range tree.Deps(e.name) {
			if _, ok := tree.Module(d); !ok {
				t.Fatalf("dependency %q of %s is not a module of the tree", d, e.name)
			}
		}
		if i < 16 {
			order, err := tree.LoadOrder(e.name)
			if err != nil {
				t.Fatalf("LoadOrder(%q): %v", e.name, err)
			}
			got := map[string]int{}
			for _, m := range order {
				got[m.Name]++
			}
			for _, n := range append(tree.Deps(e.name), e.name) {
				if got[n] != 1 {
					t.Fatalf("LoadOrder(%q) = %v: %s appears %d times, want once", e.name, order, n, got[n])
				}
			}
		}
		if k, ok := normalizeAlias(e.name); ok && k == e.name && !strings.Contains(e.name, ":") {
			if got := tree.Resolve(e.name); !slices.Equal(got, []string{e.name}) {
				t.Fatalf("Resolve(%q) = %q, want the module itself", e.name, got)
			}
		}
	}
	for i, e := range tree.aliases {
		if i >= 16 {
			break // each Resolve scans every alias: keep an input's checks fast
		}
		got := tree.Resolve(e.pattern) // literal or not: exercises keys with wildcards too
		if e.lit != len(e.pattern) || e.pattern == "" || strings.HasPrefix(e.pattern, "symbol:") {
			continue
		}
		if m := tree.mods[e.pattern]; m != nil && m.listed && !strings.Contains(e.pattern, ":") {
			continue // a module of that name wins over aliases
		}
		if !slices.Contains(got, e.module) {
			t.Fatalf("Resolve(%q) = %q, want it to name %s (modules.alias)", e.pattern, got, e.module)
		}
	}
	_ = tree.LoadOrderFor(names[:min(len(names), 16)]...)
}
