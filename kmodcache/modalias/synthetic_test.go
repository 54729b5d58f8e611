package modalias

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// synModule describes a module of a synthetic tree: a small ELF object that the
// real depmod indexes like any .ko (its .modinfo gives aliases and softdeps, its
// exported and undefined symbols give modules.dep).
type synModule struct {
	file    string   // path under lib/modules/KVER, e.g. "kernel/a/foo-bar.ko"
	exports []string // functions exported through __ksymtab_strings
	uses    []string // functions of other modules it calls
	modinfo []string // "alias=...", "softdep=pre: ..."
}

// synTree is a synthetic module tree built with gcc and the real depmod.
type synTree struct {
	root, kver string
}

// cString quotes s as a C string literal; NULs become "\000" so that a digit
// after them is not taken into the escape.
func cString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\x00", `\000`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// buildSynTree compiles the modules, writes modules.order, modules.builtin and
// modules.builtin.modinfo, runs depmod, then appends extraSoftdep to the
// modules.softdep depmod wrote (modprobe reads it as configuration).
func buildSynTree(t *testing.T, mods []synModule, order []string, builtin []string, builtinModinfo []string, extraSoftdep string) synTree {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed to build synthetic modules: install it with scripts/deps.sh: %v", err)
	}
	depmod, err := exec.LookPath("depmod")
	if err != nil {
		for _, p := range []string{"/usr/sbin/depmod", "/sbin/depmod"} {
			if _, e := os.Stat(p); e == nil {
				depmod, err = p, nil
			}
		}
	}
	if err != nil {
		t.Fatalf("depmod is needed: install kmod with scripts/deps.sh: %v", err)
	}
	st := synTree{root: t.TempDir(), kver: "0.0.0-synthetic"}
	dir := filepath.Join(st.root, "lib/modules", st.kver)
	src := t.TempDir()
	for i, m := range mods {
		var c strings.Builder
		for _, e := range m.exports {
			fmt.Fprintf(&c, "int %s(void) { return 0; }\n", e)
		}
		if len(m.exports) > 0 {
			fmt.Fprintf(&c, "static const char ksym[] __attribute__((section(\"__ksymtab_strings\"), used, aligned(1))) = %s;\n",
				cString(strings.Join(m.exports, "\x00")))
		}
		for _, u := range m.uses {
			fmt.Fprintf(&c, "extern int %s(void);\n", u)
		}
		c.WriteString("int use_all(void) { return 0")
		for _, u := range m.uses {
			fmt.Fprintf(&c, " + %s()", u)
		}
		c.WriteString("; }\n")
		info := append([]string{"license=GPL"}, m.modinfo...)
		fmt.Fprintf(&c, "static const char modinfo[] __attribute__((section(\".modinfo\"), used, aligned(1))) = %s;\n",
			cString(strings.Join(info, "\x00")))
		cfile := filepath.Join(src, fmt.Sprintf("m%d.c", i))
		if err := os.WriteFile(cfile, []byte(c.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, m.file)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		if b, err := exec.Command(cc, "-c", "-O2", "-fno-common", "-o", out, cfile).CombinedOutput(); err != nil {
			t.Fatalf("compiling synthetic module %s: %v\n%s\n%s", m.file, err, b, c.String())
		}
	}
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("modules.order", strings.Join(order, "\n")+"\n")
	write("modules.builtin", strings.Join(builtin, "\n")+"\n")
	write("modules.builtin.modinfo", strings.Join(builtinModinfo, "\x00")+"\x00")
	if b, err := exec.Command(depmod, "-b", st.root, st.kver).CombinedOutput(); err != nil {
		t.Fatalf("depmod: %v\n%s", err, b)
	}
	if extraSoftdep != "" {
		f, err := os.OpenFile(filepath.Join(dir, "modules.softdep"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(extraSoftdep); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// TestSyntheticTreeMatchesModprobe builds a module tree with the corner cases the
// real kernels do not have (ties between modules and between built-in aliases,
// several matching patterns per module, keys holding wildcards, softdep chains
// and cycles, dashes) and compares Resolve and LoadOrder with the real modprobe.
func TestSyntheticTreeMatchesModprobe(t *testing.T) {
	mods := []synModule{
		{file: "kernel/a/alpha.ko", modinfo: []string{"alias=foo", "alias=f*", "alias=dev:v*p0001*", "alias=x[ab]*", "alias=x*"}},
		{file: "kernel/a/beta-two.ko", modinfo: []string{"alias=foo", "alias=fo?", "alias=dev:v0001p*", "alias=x[b]*", "alias=my-dash-*", "alias=q[a-c]z"}},
		{file: "kernel/b/gamma.ko", exports: []string{"gamma_fn"}, modinfo: []string{"alias=foo*", "alias=dev:v*p*", "alias=x?", "alias=pre-me", "alias=x*]"}},
		{file: "kernel/b/delta.ko", exports: []string{"delta_fn"}, uses: []string{"gamma_fn"}, modinfo: []string{"alias=dev:v0001p0001", "softdep=pre: epsilon post: zeta"}},
		{file: "kernel/c/epsilon.ko", exports: []string{"eps_fn"}, modinfo: []string{"alias=e*", "softdep=pre: delta"}},
		{file: "kernel/c/zeta.ko", uses: []string{"delta_fn", "eps_fn"}, modinfo: []string{"alias=zeta-alias", "alias=multi", "softdep=pre: multi post: builtin-alias"}},
		{file: "kernel/c/eta.ko", uses: []string{"gamma_fn"}, modinfo: []string{"alias=multi", "alias=dev:v0002*", "softdep=pre: pre-me zeta"}},
		{file: "kernel/d/theta.ko", uses: []string{"delta_fn"}, modinfo: []string{"softdep=pre: nosuchthing post: eta"}},
		{file: "kernel/d/iota.ko", modinfo: []string{"softdep=junk pre: alpha"}},
	}
	// modules.order puts them out of name order, so priorities are tested.
	order := []string{"kernel/c/zeta.ko", "kernel/b/gamma.ko", "kernel/a/beta-two.ko", "kernel/c/eta.ko",
		"kernel/a/alpha.ko", "kernel/b/delta.ko", "kernel/c/epsilon.ko", "kernel/d/theta.ko", "kernel/d/iota.ko"}
	builtin := []string{"kernel/lib/bi-one.ko", "kernel/lib/bi_two.ko", "kernel/lib/bithree.ko", "kernel/lib/shadowed.ko"}
	builtinModinfo := []string{
		"bi_one.alias=builtin-alias", "bi_two.alias=builtin-alias", "bithree.alias=builtin-*",
		"bi_one.alias=chr-*", "bi_two.alias=chr-4-*", "bithree.alias=chr-?-1", "bi_one.alias=chr-[0-9]-1",
		"bi_two.alias=shadowed", "bi_one.license=GPL", "notamodule.parm=x:int",
	}
	extraSoftdep := strings.Join([]string{
		"# added by the test",
		"softdep iota pre: gamma",       // shadowed by the module's own "softdep iota junk pre: alpha"
		"softdep g?mma pre: bi-one eta", // a pattern, and a built-in module
		"softdep alpha post: beta-two",  // post: only
		"softdep bi_two pre: alpha",     // softdep of a built-in module
	}, "\n") + "\n"
	st := buildSynTree(t, mods, order, builtin, builtinModinfo, extraSoftdep)
	k := kernelTree{root: st.root, kver: st.kver}
	tree, err := LoadTree(k.dir())
	if err != nil {
		t.Fatalf("LoadTree: %v", err)
	}
	lookups := []string{
		"foo", "fo", "f", "fox", "foo-bar", "x", "xa", "xb", "xc", "x]", "x[a]", "x[b]z",
		"dev:v0001p0001", "dev:v0001p0002", "dev:v0002p0001", "dev:v0003p0003",
		"my-dash-thing", "my_dash_", "q-z", "qbz", "qdz",
		"builtin-alias", "builtin-x", "chr-4-1", "chr-5-1", "chr-4-2", "chr-a-1", "shadowed",
		"multi", "zeta-alias", "pre-me", "alpha", "beta-two", "beta_two", "bi-one", "bithree",
		"symbol:gamma_fn", "symbol:eps_fn", "symbol:nope",
		// Keys holding wildcards: kmod may collect a pattern more than once.
		"f*", "x*", "x[ab]*", "dev:v*p*", "dev:v*p0001*", "fo?", "*", "?", "chr-*", "chr-?-1", "builtin-*",
		"q[a-c]z", "nothing-at-all",
	}
	named, found := checkResolveAgainstModprobe(t, k, tree, lookups)
	names := uniqueSorted(append(append(named, found...), tree.Names()...))
	checkLoadOrderAgainstModprobe(t, k, tree, names)

	// LoadOrder of several names at once: modprobe's answers concatenated.
	many := []string{"theta", "zeta", "iota", "bi_two"}
	var want []Module
	for _, n := range many {
		m, err := modprobeShowDepends(st.root, st.kver, n)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, m...)
	}
	want = dedupe(want)
	if got, err := tree.LoadOrder(many...); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("LoadOrder(%q) = %v, %v; want %v", many, got, err, want)
	}
}
