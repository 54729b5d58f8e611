package archive

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// AddTree copies the directory tree at srcDir into the archive under prefix ("" for
// the root): directories, regular files (read when the archive is written) and
// symlinks, with their permission bits; owners and times are not copied. The
// prefix directory itself is added like an implied parent (mode 0755 unless added
// with AddDir). A symlink whose target is absolute or leads outside srcDir, and
// any other kind of file (device, FIFO, socket), is refused with an error naming
// it. On error the archive is left as it was.
func (a *Archive) AddTree(prefix, srcDir string) error {
	if prefix != "" {
		if err := checkName(prefix); err != nil {
			return fmt.Errorf("add tree %s: prefix: %w", srcDir, err)
		}
	}
	fi, err := os.Stat(srcDir)
	if err != nil {
		return fmt.Errorf("add tree: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("add tree: %s is not a directory", srcDir)
	}
	realRoot, err := filepath.EvalSymlinks(srcDir)
	if err != nil {
		return fmt.Errorf("add tree: %w", err)
	}

	saved := maps.Clone(a.nodes)
	if err := a.addTree(prefix, srcDir, realRoot); err != nil {
		a.nodes = saved
		return fmt.Errorf("add tree %s: %w", srcDir, err)
	}
	return nil
}

func (a *Archive) addTree(prefix, srcDir, realRoot string) error {
	if prefix != "" {
		if err := a.addImplicitDir(prefix); err != nil {
			return err
		}
	}
	return filepath.WalkDir(srcDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(srcDir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		name := path.Join(prefix, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode() & permBits
		switch t := info.Mode().Type(); {
		case t == fs.ModeDir:
			return a.AddDir(name, mode)
		case t.IsRegular():
			return a.AddFileFrom(name, mode, p)
		case t == fs.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := checkTreeLink(p, rel, target, realRoot); err != nil {
				return err
			}
			return a.AddSymlink(name, target)
		default:
			return fmt.Errorf("%s: unsupported file type %v (only directories, regular files and symlinks are copied)", p, t)
		}
	})
}

// checkTreeLink refuses a source symlink at p (rel inside the tree) that is
// absolute or leads outside the tree, lexically or, when the target exists, once
// every symlink on the way is followed.
func checkTreeLink(p, rel, target, realRoot string) error {
	if filepath.IsAbs(target) {
		return fmt.Errorf("symlink %s -> %s points outside the tree (absolute target)", p, target)
	}
	if escapes(dirComponents(rel), filepath.ToSlash(target)) {
		return fmt.Errorf("symlink %s -> %s points outside the tree", p, target)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil // dangling: the lexical check above is all there is
	}
	if real != realRoot && !strings.HasPrefix(real, realRoot+string(filepath.Separator)) {
		return fmt.Errorf("symlink %s -> %s points outside the tree (resolves to %s)", p, target, real)
	}
	return nil
}

// addImplicitDir makes sure name exists as a directory, adding it (and its
// parents) as implied if missing.
func (a *Archive) addImplicitDir(name string) error {
	if n, ok := a.nodes[name]; ok {
		if !n.Mode.IsDir() {
			return fmt.Errorf("prefix %q is a %s, not a directory", name, kind(n.Mode))
		}
		return nil
	}
	return a.add(&node{Entry: Entry{Name: name, Mode: implicitDirMode, Implicit: true}})
}
