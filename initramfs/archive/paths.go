package archive

import (
	"fmt"
	"strings"
)

// maxPathLen is the longest archive name or symlink target accepted. The kernel's
// initramfs unpacker (init/initramfs.c) skips entries whose name, NUL included, is
// longer than PATH_MAX (4096) and symlinks whose target is longer than PATH_MAX.
const maxPathLen = 4095

// trailerName ends a newc archive; an entry with this name would end it early.
const trailerName = "TRAILER!!!"

// checkName reports whether name is a canonical archive path: relative, slash
// separated, no empty, "." or ".." components, no NUL, not the trailer name.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("archive path is empty")
	case len(name) > maxPathLen:
		return fmt.Errorf("archive path %.40q... is %d bytes, longer than %d", name, len(name), maxPathLen)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("archive path %q contains a NUL byte", name)
	case strings.HasPrefix(name, "/"):
		return fmt.Errorf("archive path %q is absolute, want a path relative to the archive root", name)
	case name == trailerName:
		return fmt.Errorf("archive path %q is reserved for the cpio trailer", name)
	}
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "":
			return fmt.Errorf("archive path %q has an empty component", name)
		case ".":
			return fmt.Errorf("archive path %q has a %q component, want a canonical path", name, c)
		case "..":
			return fmt.Errorf("archive path %q has a %q component", name, c)
		}
	}
	return nil
}

// checkTarget reports whether a symlink at archive path link with the given target
// stays inside the archive root when the target is resolved lexically from the
// link's directory.
func checkTarget(link, target string) error {
	switch {
	case target == "":
		return fmt.Errorf("symlink %q has an empty target", link)
	case len(target) > maxPathLen:
		return fmt.Errorf("symlink %q: target is %d bytes, longer than %d", link, len(target), maxPathLen)
	case strings.IndexByte(target, 0) >= 0:
		return fmt.Errorf("symlink %q: target %q contains a NUL byte", link, target)
	case strings.HasPrefix(target, "/"):
		return fmt.Errorf("symlink %q: target %q is absolute, want a target relative to the link", link, target)
	}
	if escapes(dirComponents(link), target) {
		return fmt.Errorf("symlink %q: target %q escapes the archive root", link, target)
	}
	return nil
}

// dirComponents returns the components of the directory holding name.
func dirComponents(name string) []string {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return nil
	}
	return strings.Split(name[:i], "/")
}

// escapes reports whether walking the relative path target from the directory dir
// (components below the root) climbs above the root, following ".." lexically.
func escapes(dir []string, target string) bool {
	depth := len(dir)
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if depth == 0 {
				return true
			}
			depth--
		default:
			depth++
		}
	}
	return false
}

// maxHops bounds symlink resolution like the kernel's MAXSYMLINKS.
const maxHops = 40

// resolveInside walks target from the directory holding link the way the kernel
// would once the archive is unpacked at "/": symlinks that are entries of the
// archive are followed, other components are taken as they are. It returns an
// error if the walk climbs above the root or loops. lookup returns the symlink
// target of an archive path, and whether that path is a symlink.
func resolveInside(link, target string, lookup func(string) (string, bool)) error {
	stack := dirComponents(link)
	queue := strings.Split(target, "/")
	hops := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return fmt.Errorf("symlink %q: target %q escapes the archive root once symlinks in the archive are followed", link, target)
			}
			stack = stack[:len(stack)-1]
			continue
		}
		stack = append(stack, c)
		next, ok := lookup(strings.Join(stack, "/"))
		if !ok {
			continue
		}
		hops++
		if hops > maxHops {
			return fmt.Errorf("symlink %q: target %q: more than %d levels of symlinks", link, target, maxHops)
		}
		stack = stack[:len(stack)-1]
		if strings.HasPrefix(next, "/") {
			return fmt.Errorf("symlink %q: target %q passes through an absolute symlink", link, target)
		}
		queue = append(strings.Split(next, "/"), queue...)
	}
	return nil
}
