// Package modname holds the kernel's rule for module names: '-' and '_' are
// the same character, and the kernel (and kmod) spell a name with '_'.
package modname

import "strings"

// Normalize returns a module name in the form the kernel compares: every '-'
// replaced by '_'.
func Normalize(name string) string { return strings.ReplaceAll(name, "-", "_") }

// Same reports whether two module names name the same module.
func Same(a, b string) bool { return Normalize(a) == Normalize(b) }

// FromPath returns the module name of a module file the way kmod derives it:
// the base name of the path up to its first '.', normalized.
func FromPath(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		path = path[i+1:]
	}
	if i := strings.IndexByte(path, '.'); i >= 0 {
		path = path[:i]
	}
	return Normalize(path)
}
