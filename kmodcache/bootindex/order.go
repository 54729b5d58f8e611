package bootindex

import (
	"slices"

	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/kmodcache/modorder"
)

// LoadOrder returns the set's module names (normalised) with every module
// after the set's modules it depends on, in modorder's one order: modules by
// name, each preceded by what it needs. A dependency cycle does not stop it.
func (s *Set) LoadOrder() []string {
	deps := map[string][]string{}
	var names []string
	for _, m := range s.Modules {
		n := modname.Normalize(m.Name)
		names = append(names, n)
		for _, d := range m.Depends {
			deps[n] = append(deps[n], modname.Normalize(d))
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	return modorder.Walk(names, func(n string) []string {
		var in []string
		for _, d := range deps[n] {
			if _, ok := slices.BinarySearch(names, d); ok {
				in = append(in, d)
			}
		}
		slices.Sort(in)
		return in
	}, nil)
}

// UnloadOrder returns the set's module names with every module before the
// set's modules it depends on: LoadOrder reversed.
func (s *Set) UnloadOrder() []string { return modorder.Reverse(s.LoadOrder()) }
