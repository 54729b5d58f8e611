package modalias

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/modname"
)

// Module is one kernel module of a tree.
type Module struct {
	// Name is the module name, normalised the kmod way ('-' becomes '_').
	Name string `json:"name"`
	// Path is the module file relative to the modules directory, as in modules.dep;
	// empty for a built-in module.
	Path string `json:"path,omitempty"`
	// Builtin is true for a module compiled into the kernel image.
	Builtin bool `json:"builtin,omitempty"`
}

// Tree is one kernel's module tree: the text indexes depmod writes in
// /lib/modules/<kver>. It is safe for concurrent use once loaded.
type Tree struct {
	dir string

	mods     map[string]*modEntry // loadable modules by name
	order    []*modEntry          // in modules.dep order (depmod's module index)
	builtin  map[string]bool      // names listed in modules.builtin
	inKernel map[string]bool      // modules.builtin plus modules with built-in aliases

	aliases        []aliasEntry // modules.alias
	builtinAliases []aliasEntry // alias= entries of modules.builtin.modinfo
	softdeps       []softdep    // modules.softdep, in file order

	symbolsOnce sync.Once
	symbols     []aliasEntry // modules.symbols, read on the first symbol: lookup
	symbolsErr  error
}

// modEntry is a loadable module from modules.dep.
type modEntry struct {
	name   string
	path   string
	deps   []string // dependency names in modules.dep order
	idx    int      // position in modules.dep: depmod's priority for its aliases
	listed bool     // has a line of its own (not only named as a dependency)
}

// aliasEntry is one pattern of an alias index.
type aliasEntry struct {
	pattern string // normalised with normalizeAlias, as depmod indexes it
	lit     int    // length of the pattern's literal prefix (index of its first wildcard)
	module  string
	prio    int // depmod's priority: the module's index (0 for built-in aliases)
	seq     int // order of insertion into depmod's index
}

// softdep is one "softdep" line: pre and post modules for modules matching name.
type softdep struct {
	name      string // fnmatch pattern, normalised
	pre, post []string
}

// Index file names inside a modules directory.
const (
	fileDep            = "modules.dep"
	fileAlias          = "modules.alias"
	fileSoftdep        = "modules.softdep"
	fileBuiltin        = "modules.builtin"
	fileBuiltinModinfo = "modules.builtin.modinfo"
	fileSymbols        = "modules.symbols"
)

// MaxIndexFile bounds each of a module tree's index files as LoadTree reads
// it (a regular file only: a FIFO or a device in its place is refused at
// once). Debian's largest, modules.alias, is about 1.5 MiB.
const MaxIndexFile = 64 << 20

// LoadTree reads the module tree of one kernel from modulesDir (usually
// /lib/modules/<kver>): modules.dep (required), and where present modules.alias,
// modules.softdep, modules.builtin and modules.builtin.modinfo (the source of the
// built-in aliases kmod reads from modules.builtin.alias.bin). Malformed lines are
// errors naming the file and line.
func LoadTree(modulesDir string) (*Tree, error) {
	t := &Tree{
		dir:      modulesDir,
		mods:     map[string]*modEntry{},
		builtin:  map[string]bool{},
		inKernel: map[string]bool{},
	}
	dep, err := inroot.ReadPath(filepath.Join(modulesDir, fileDep), MaxIndexFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s has no %s (run depmod -b <root> <kver>): %w", modulesDir, fileDep, err)
		}
		return nil, fmt.Errorf("reading module tree: %w", err)
	}
	if err := t.parseDep(filepath.Join(modulesDir, fileDep), string(dep)); err != nil {
		return nil, err
	}
	optional := []struct {
		name  string
		parse func(path, data string) error
	}{
		{fileBuiltin, t.parseBuiltin},
		{fileBuiltinModinfo, t.parseBuiltinModinfo},
		{fileAlias, t.parseAlias},
		{fileSoftdep, t.parseSoftdep},
	}
	for _, f := range optional {
		path := filepath.Join(modulesDir, f.name)
		data, err := inroot.ReadPath(path, MaxIndexFile)
		if errors.Is(err, fs.ErrNotExist) {
			continue // kmod treats a missing index as an empty one
		}
		if err != nil {
			return nil, fmt.Errorf("reading module tree: %w", err)
		}
		if err := f.parse(path, string(data)); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Dir returns the modules directory the tree was loaded from.
func (t *Tree) Dir() string { return t.dir }

// lines calls f for each line of data with its 1-based number, without the newline.
func lines(data string, f func(n int, line string) error) error {
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := strings.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = ""
		}
		if err := f(n, line); err != nil {
			return err
		}
	}
	return nil
}

// parseDep reads modules.dep: "path: dep-path dep-path ...".
func (t *Tree) parseDep(path, data string) error {
	return lines(data, func(n int, line string) error {
		if strings.TrimSpace(line) == "" {
			return nil
		}
		head, rest, ok := strings.Cut(line, ":")
		head = strings.TrimSpace(head)
		// A path whose module name is empty ("/:", ".ko:") names no module.
		if !ok || head == "" || strings.ContainsAny(head, " \t") || modname.FromPath(head) == "" {
			return fmt.Errorf("%s:%d: want \"module-path: dependency-paths\", got %q", path, n, line)
		}
		deps := strings.Fields(rest)
		for _, d := range deps {
			if modname.FromPath(d) == "" {
				return fmt.Errorf("%s:%d: dependency %q is not a module path", path, n, d)
			}
		}
		m := t.entry(head)
		if m.listed {
			return fmt.Errorf("%s:%d: module %s listed twice", path, n, m.name)
		}
		m.listed, m.path, m.idx = true, head, len(t.order)
		t.order = append(t.order, m)
		for _, d := range deps {
			m.deps = append(m.deps, t.entry(d).name)
		}
		return nil
	})
}

// entry returns the module for a modules.dep path, creating it when new.
func (t *Tree) entry(path string) *modEntry {
	name := modname.FromPath(path)
	m := t.mods[name]
	if m == nil {
		m = &modEntry{name: name, path: path, idx: -1}
		t.mods[name] = m
	}
	return m
}

// parseBuiltin reads modules.builtin: one module path per line.
func (t *Tree) parseBuiltin(path, data string) error {
	return lines(data, func(n int, line string) error {
		line = strings.TrimSpace(line)
		if line == "" {
			return nil
		}
		name := modname.FromPath(line)
		if name == "" || strings.ContainsAny(line, " \t") {
			return fmt.Errorf("%s:%d: want a module path, got %q", path, n, line)
		}
		t.builtin[name] = true
		t.inKernel[name] = true
		return nil
	})
}

// parseBuiltinModinfo reads modules.builtin.modinfo: NUL-terminated
// "module.key=value" strings; the alias keys are the built-in aliases.
func (t *Tree) parseBuiltinModinfo(path string, data string) error {
	for n := 1; len(data) > 0; n++ {
		rec := data
		if i := strings.IndexByte(data, 0); i >= 0 {
			rec, data = data[:i], data[i+1:]
		} else {
			data = ""
		}
		if rec == "" {
			continue
		}
		mod, kv, ok := strings.Cut(rec, ".")
		key, value, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 || modname.FromPath(mod) == "" || key == "" {
			return fmt.Errorf("%s: entry %d: want \"module.key=value\", got %q", path, n, rec)
		}
		if key != "alias" {
			continue // parameters of built-in code that is no module appear here too
		}
		mod = modname.FromPath(mod)
		t.inKernel[mod] = true
		// depmod skips (with a warning) aliases with unbalanced brackets.
		if pattern, ok := normalizeAlias(value); ok {
			t.builtinAliases = append(t.builtinAliases, aliasEntry{pattern: pattern, lit: literalLen(pattern), module: mod, prio: 0, seq: len(t.builtinAliases)})
		}
	}
	return nil
}

// parseAlias reads modules.alias: "alias PATTERN MODULE".
func (t *Tree) parseAlias(path, data string) error {
	entries, err := t.parseAliasFile(path, data)
	t.aliases = entries
	return err
}

// parseAliasFile reads an alias index in text form (modules.alias, modules.symbols).
// A module's priority is its index in modules.dep, as depmod gives it.
func (t *Tree) parseAliasFile(path, data string) ([]aliasEntry, error) {
	var out []aliasEntry
	extra := map[string]int{} // modules missing from modules.dep, after all others
	err := lines(data, func(n int, line string) error {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			return nil
		}
		if len(f) != 3 || f[0] != "alias" || modname.FromPath(f[2]) == "" {
			return fmt.Errorf("%s:%d: want \"alias PATTERN MODULE\", got %q", path, n, line)
		}
		pattern, ok := normalizeAlias(f[1])
		if !ok {
			return nil // depmod leaves aliases with unbalanced brackets out of the index
		}
		mod := modname.FromPath(f[2])
		prio := -1
		if m := t.mods[mod]; m != nil && m.listed {
			prio = m.idx
		} else if p, ok := extra[mod]; ok {
			prio = p
		} else {
			prio = len(t.order) + len(extra)
			extra[mod] = prio
		}
		out = append(out, aliasEntry{pattern: pattern, lit: literalLen(pattern), module: mod, prio: prio, seq: len(out)})
		return nil
	})
	return out, err
}

// parseSoftdep reads modules.softdep, which kmod parses as a configuration file;
// only comments and "softdep MODULE [pre: ...] [post: ...]" lines may appear.
func (t *Tree) parseSoftdep(path, data string) error {
	return configLines(data, func(n int, line string) error {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			return nil
		}
		if f[0] != "softdep" {
			return fmt.Errorf("%s:%d: want a \"softdep\" line, got %q", path, n, line)
		}
		if len(f) < 3 {
			return fmt.Errorf("%s:%d: softdep needs a module and its dependencies, got %q", path, n, line)
		}
		name, ok := normalizeAlias(f[1])
		if !ok {
			return fmt.Errorf("%s:%d: unbalanced brackets in module name %q", path, n, f[1])
		}
		sd := softdep{name: name}
		var mode *[]string // words before any "pre:" or "post:" are ignored, as kmod does
		for _, w := range f[2:] {
			switch w {
			case "pre:":
				mode = &sd.pre
			case "post:":
				mode = &sd.post
			default:
				if mode != nil {
					*mode = append(*mode, w)
				}
			}
		}
		t.softdeps = append(t.softdeps, sd)
		return nil
	})
}

// configLines splits a kmod configuration file into logical lines: a backslash
// joins a line with the next and otherwise keeps only the byte it precedes.
func configLines(data string, f func(n int, line string) error) error {
	var b strings.Builder
	n, start := 1, 1
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '\\' && i+1 < len(data):
			i++
			if data[i] == '\n' {
				n++
				continue
			}
			b.WriteByte(data[i])
		case c == '\n':
			if err := f(start, b.String()); err != nil {
				return err
			}
			b.Reset()
			n++
			start = n
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() > 0 {
		return f(start, b.String())
	}
	return nil
}

// loadSymbols reads modules.symbols once, on the first "symbol:" lookup.
func (t *Tree) loadSymbols() []aliasEntry {
	t.symbolsOnce.Do(func() {
		path := filepath.Join(t.dir, fileSymbols)
		data, err := inroot.ReadPath(path, MaxIndexFile)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				t.symbolsErr = fmt.Errorf("reading module tree: %w", err)
			}
			return
		}
		t.symbols, t.symbolsErr = t.parseAliasFile(path, string(data))
	})
	return t.symbols
}

// Module returns the module called name (normalised first): a loadable module with
// its path, or a built-in one.
func (t *Tree) Module(name string) (Module, bool) {
	name = modname.FromPath(name)
	if m := t.mods[name]; m != nil {
		return Module{Name: m.name, Path: m.path}, true
	}
	if t.inKernel[name] {
		return Module{Name: name, Builtin: true}, true
	}
	return Module{}, false
}

// Builtin reports whether the module called name is compiled into the kernel.
func (t *Tree) Builtin(name string) bool {
	name = modname.FromPath(name)
	return t.mods[name] == nil && t.inKernel[name]
}

// Names returns the names of every module of the tree, sorted: the loadable ones
// of modules.dep and the built-in ones of modules.builtin (the names modprobe
// knows; built-in code that only has aliases, like debugfs, is left out).
func (t *Tree) Names() []string {
	names := make([]string, 0, len(t.mods)+len(t.builtin))
	for n := range t.mods {
		names = append(names, n)
	}
	for n := range t.builtin {
		if t.mods[n] == nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Deps returns the dependencies modules.dep lists for the module called name, in
// the file's order. depmod lists every dependency, direct or not, so this is the
// whole closure; insert them in reverse order (LoadOrder does).
func (t *Tree) Deps(name string) []string {
	if m := t.mods[modname.FromPath(name)]; m != nil {
		return append([]string(nil), m.deps...)
	}
	return nil
}

// Softdeps returns the soft dependencies modprobe applies to the module called
// name: those of the first softdep line whose pattern matches it, unresolved.
func (t *Tree) Softdeps(name string) (pre, post []string) {
	name = modname.FromPath(name)
	for _, sd := range t.softdeps {
		if Match(sd.name, name) {
			return append([]string(nil), sd.pre...), append([]string(nil), sd.post...)
		}
	}
	return nil, nil
}
