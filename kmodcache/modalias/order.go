package modalias

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kpreload/kpreload/kmodcache/modname"
)

// LoadOrder returns the modules to insert, in order, so that the named modules
// load with everything they need: for each name what `modprobe --show-depends`
// lists for a module found by that name, concatenated and deduplicated (a module
// stays where it first appears). Like modprobe it follows kmod's probe list: the
// dependencies from modules.dep in reverse file order, each between its softdep
// "pre:" and "post:" modules, then the module itself between its own. Soft
// dependencies are resolved like modprobe arguments (so "crypto-md5" finds md5).
// Built-in modules stay in the list, marked Builtin, with no Path: a loader skips
// them. A name that is neither in modules.dep nor built in is an error that
// suggests close names.
func (t *Tree) LoadOrder(names ...string) ([]Module, error) {
	refs := make([]modRef, 0, len(names))
	for _, n := range names {
		name := modname.FromPath(n)
		if _, ok := t.Module(name); !ok {
			return nil, t.unknownModule(n)
		}
		refs = append(refs, modRef{name: name})
	}
	return t.probeOrder(refs), nil
}

// LoadOrderFor returns what `modprobe --show-depends` lists for each of the
// lookups (modaliases or names) in turn, deduplicated: the modules Resolve finds,
// each with its dependencies and soft dependencies, in insertion order. A lookup
// that resolves to nothing adds nothing.
func (t *Tree) LoadOrderFor(modaliases ...string) []Module {
	var refs []modRef
	for _, a := range modaliases {
		refs = append(refs, t.lookup(a)...)
	}
	return t.probeOrder(refs)
}

// probeOrder concatenates the probe lists of refs, keeping first occurrences.
func (t *Tree) probeOrder(refs []modRef) []Module {
	var out []Module
	seen := map[string]bool{}
	for _, r := range refs {
		p := prober{t: t, visited: map[string]bool{}}
		p.probe(r)
		for _, name := range p.list {
			if seen[name] {
				continue
			}
			seen[name] = true
			if m, ok := t.Module(name); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// prober builds kmod's probe list for one module (__kmod_module_get_probe_list).
// libkmod marks the module objects it visits; one found through an alias is an
// object apart from the same module found by name, so visited is keyed the same
// way.
type prober struct {
	t       *Tree
	visited map[string]bool
	list    []string
}

// probe adds r's dependencies, soft dependencies and r itself.
func (p *prober) probe(r modRef) {
	if p.visited[r.key()] {
		return
	}
	p.visited[r.key()] = true
	// libkmod prepends each modules.dep entry as it parses the line, so the
	// dependencies come out in reverse file order.
	if m := p.t.mods[r.name]; m != nil {
		for i := len(m.deps) - 1; i >= 0; i-- {
			p.withSoftdeps(m.deps[i])
		}
	}
	p.withSoftdeps(r.name)
}

// withSoftdeps adds name between its "pre:" and "post:" soft dependencies
// (__kmod_module_fill_softdep).
func (p *prober) withSoftdeps(name string) {
	pre, post := p.t.Softdeps(name)
	for _, d := range pre {
		for _, r := range p.t.lookup(d) {
			p.probe(r)
		}
	}
	p.list = append(p.list, name)
	for _, d := range post {
		for _, r := range p.t.lookup(d) {
			p.probe(r)
		}
	}
}

// unknownModule explains that name is not in the tree and suggests close names.
func (t *Tree) unknownModule(name string) error {
	want := modname.FromPath(name)
	type cand struct {
		name string
		dist int
	}
	var cands []cand
	for _, n := range t.Names() {
		d := editDistance(want, n)
		if d <= max(2, len(want)/3) || (len(want) >= 3 && strings.Contains(n, want)) {
			cands = append(cands, cand{n, d})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].dist < cands[j].dist })
	msg := fmt.Sprintf("module %q is neither in %s nor built in", name, fileDep)
	if len(cands) > 0 {
		var s []string
		for i := 0; i < len(cands) && i < 5; i++ {
			s = append(s, cands[i].name)
		}
		msg += "; did you mean " + strings.Join(s, ", ") + "?"
	}
	return fmt.Errorf("%s (modules directory %s)", msg, t.dir)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
