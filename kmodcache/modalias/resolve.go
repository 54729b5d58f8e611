package modalias

import (
	"sort"
	"strings"
)

// pathMax is PATH_MAX: kmod copies an alias into a buffer of this size.
const pathMax = 4096

// NormalizeAlias is kmod's alias_normalize, for callers that match aliases
// themselves: see normalizeAlias.
func NormalizeAlias(s string) (string, bool) { return normalizeAlias(s) }

// normalizeAlias is kmod's alias_normalize: every '-' outside a bracket expression
// becomes '_'. An unbalanced bracket makes the alias invalid. Like kmod it keeps at
// most PATH_MAX-1 bytes.
func normalizeAlias(s string) (string, bool) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	if !strings.ContainsAny(s, "-[]") {
		if len(s) > pathMax-1 {
			s = s[:pathMax-1]
		}
		return s, true
	}
	b := []byte(s)
	i := 0
	for ; i < pathMax-1 && i < len(b); i++ {
		switch b[i] {
		case '-':
			b[i] = '_'
		case ']':
			return "", false
		case '[':
			for i < len(b) && b[i] != ']' {
				i++
			}
			if i == len(b) {
				return "", false
			}
		}
	}
	return string(b[:i]), true
}

// isWild reports whether c starts a wildcard in kmod's index search.
func isWild(c byte) bool { return c == '*' || c == '?' || c == '[' }

// literalLen returns the index of the first wildcard of pattern, or its length.
func literalLen(pattern string) int {
	if w := strings.IndexAny(pattern, "*?["); w >= 0 {
		return w
	}
	return len(pattern)
}

// Resolve returns the module names `modprobe -R modalias` prints for this tree, in
// the same order and with the same repetitions (a module whose several aliases
// match is named once per alias). It follows kmod_module_new_from_lookup: the first
// of these lookups that finds anything wins:
//
//  1. a module of that name in modules.dep;
//  2. for "symbol:NAME", modules.symbols (read on first use; if it cannot be
//     read or parsed, this stage finds nothing);
//  3. modules.alias, every matching pattern;
//  4. a built-in module of that name (modules.builtin);
//  5. the aliases of built-in modules (modules.builtin.modinfo), every matching
//     pattern.
//
// Aliases from modprobe.d configuration directories are not consulted: they belong
// to the running system, not to the module tree. An invalid alias (unbalanced
// brackets) resolves to nothing, as with modprobe.
func (t *Tree) Resolve(modalias string) []string {
	refs := t.lookup(modalias)
	if len(refs) == 0 {
		return nil
	}
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = r.name
	}
	return names
}

// modRef is a module as libkmod holds it: a module found by its name, or one found
// through an alias, which libkmod keeps as a separate object (keyed "name\alias")
// with state of its own, such as whether a probe list has visited it.
type modRef struct {
	name  string
	alias string // the normalised lookup key; empty for a module found by name
}

// key identifies the libkmod object.
func (r modRef) key() string {
	if r.alias == "" {
		return r.name
	}
	return r.name + "\\" + r.alias
}

// lookup is kmod_module_new_from_lookup: see Resolve.
func (t *Tree) lookup(modalias string) []modRef {
	key, ok := normalizeAlias(modalias)
	if !ok || key == "" {
		return nil
	}
	if !strings.Contains(key, ":") {
		if m := t.mods[key]; m != nil && m.listed {
			return []modRef{{name: key}}
		}
	}
	if strings.HasPrefix(key, "symbol:") {
		if got := searchWild(t.loadSymbols(), key); len(got) > 0 {
			return got
		}
	}
	if got := searchWild(t.aliases, key); len(got) > 0 {
		return got
	}
	if t.builtin[key] {
		return []modRef{{name: key}}
	}
	return searchWild(t.builtinAliases, key)
}

// visit is one time kmod's trie walk collects the values of a pattern's node.
type visit struct {
	e    *aliasEntry
	pos  int // where the walk leaves the key's own path: the wildcard's index
	rank int // what it takes there: '*' 0, '?' 1, '[' 2, the key's end 3
}

// searchWild reproduces libkmod's index_searchwild over the entries of one index:
// which patterns match key, and the order in which their modules come out.
//
// kmod walks a radix trie of the patterns along key. At every node it first visits
// the subtrees under '*', '?' and '[' (in that order; inside them children go in
// byte order and a node's own values come after its children's), then the node's
// own values if key ends there, then the child for the key's next byte. A pattern
// is collected where its first wildcard leaves the key's path, if fnmatch matches
// the rest. Each collected value is inserted in front of those of equal priority,
// so the result is sorted by priority and, within a priority, in reverse order of
// the walk.
func searchWild(entries []aliasEntry, key string) []modRef {
	var visits []visit
	keyWild := strings.ContainsAny(key, "*?[")
	for i := range entries {
		e := &entries[i]
		p := e.pattern
		if len(p) == 0 || p[0] != key[0] && !isWild(p[0]) {
			continue // the common case, decided on the first byte
		}
		if !keyWild {
			w := e.lit
			if w == len(p) {
				if p == key {
					visits = append(visits, visit{e, len(key), 3})
				}
				continue
			}
			if len(key) >= w && p[:w] == key[:w] && match(p[w:], key[w:]) {
				visits = append(visits, visit{e, w, wildRank(p[w])})
			}
			continue
		}
		visits = appendWildKeyVisits(visits, entries, e, key)
	}
	if len(visits) == 0 {
		return nil
	}
	// Order of the walk: where it leaves the key's path, which wildcard, then the
	// order inside that subtree; values of one node in their stored order
	// (priority, then the reverse of depmod's insertion order).
	sort.SliceStable(visits, func(i, j int) bool {
		a, b := visits[i], visits[j]
		if a.pos != b.pos {
			return a.pos < b.pos
		}
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		if a.e.pattern != b.e.pattern {
			return subtreeLess(a.e.pattern[a.pos:], b.e.pattern[b.pos:])
		}
		if a.e.prio != b.e.prio {
			return a.e.prio < b.e.prio
		}
		return a.e.seq > b.e.seq
	})
	// Insertion in front of equal priorities: sort by priority, later visits first.
	idx := make([]int, len(visits))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool {
		a, b := visits[idx[i]], visits[idx[j]]
		if a.e.prio != b.e.prio {
			return a.e.prio < b.e.prio
		}
		return idx[i] > idx[j]
	})
	out := make([]modRef, len(idx))
	for i, k := range idx {
		out[i] = modRef{name: visits[k].e.module, alias: key}
	}
	return out
}

// wildRank orders the wildcard children of a trie node as kmod visits them.
func wildRank(c byte) int {
	switch c {
	case '*':
		return 0
	case '?':
		return 1
	}
	return 2
}

// subtreeLess orders two patterns inside one wildcard subtree as kmod's walk
// visits them: children in byte order, a node's own values after its children's,
// so a pattern comes after every longer pattern it is a prefix of.
func subtreeLess(a, b string) bool {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) > len(b)
}

// appendWildKeyVisits handles a key that itself holds wildcard bytes (no device
// modalias does). Where the key has the very wildcard byte the pattern has, kmod
// both branches into the wildcard subtree and follows the byte literally, provided
// the trie has a node there; so one pattern can be collected several times.
func appendWildKeyVisits(visits []visit, entries []aliasEntry, e *aliasEntry, key string) []visit {
	p := e.pattern
	from := 0
	for {
		w := strings.IndexAny(p[from:], "*?[")
		if w < 0 {
			if p == key {
				visits = append(visits, visit{e, len(key), 3})
			}
			return visits
		}
		w += from
		if len(key) < w || p[from:w] != key[from:w] {
			return visits
		}
		if match(p[w:], key[w:]) {
			visits = append(visits, visit{e, w, wildRank(p[w])})
		}
		// The walk continues past this wildcard only along an edge of the trie:
		// p[:w] must be a node (the root, a pattern, or a branching point).
		if w >= len(key) || key[w] != p[w] || !trieNode(entries, p[:w]) {
			return visits
		}
		from = w + 1
	}
}

// trieNode reports whether prefix is a node of the radix trie depmod builds from
// the patterns of entries: the root, a whole pattern, or a point where patterns
// branch.
func trieNode(entries []aliasEntry, prefix string) bool {
	if prefix == "" {
		return true
	}
	var next byte
	seen := false
	for i := range entries {
		p := entries[i].pattern
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		if len(p) == len(prefix) {
			return true
		}
		if seen && p[len(prefix)] != next {
			return true
		}
		next, seen = p[len(prefix)], true
	}
	return false
}
