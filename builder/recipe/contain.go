package recipe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/internal/inroot"
)

// A recipe names files beside it (patches, source.dir): they must stay inside
// the recipe's directory once every symbolic link is followed, so that a
// recipe (or a link in its directory) cannot make the build read, digest or
// apply files from elsewhere on the host. Links that stay inside the
// directory are fine (recipes/testdriver-2/ shares the test driver's files
// through links into recipes/testdriver/).

// resolveInside resolves p, a path relative to the recipe file, following
// every symbolic link, and checks that it lies inside the recipe's directory
// (resolved the same way, by inroot.Below: a recipe named by a relative path
// and one named by an absolute path give the same answers). It returns the
// resolved path or an *Error for field naming p and where it leads.
func (r *Recipe) resolveInside(field, p string) (string, *Error) {
	if p == "" {
		return "", r.errorf(field, "missing; give a path relative to the recipe file, inside its directory")
	}
	at, err := inroot.Below(filepath.Dir(r.File), p)
	if e := r.outside(field, p, err); e != nil {
		return "", e
	}
	return at.Path, nil
}

// outside words the error of inroot.Below for p, the value of field, as an
// *Error (nil for none).
func (r *Recipe) outside(field, p string, err error) *Error {
	var out *inroot.OutsideError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &out) && out.How == inroot.OutAbsolute:
		return r.errorf(field, "%q is absolute; give it relative to the recipe file, inside its directory", p)
	case errors.As(err, &out):
		return r.errorf(field, "%q leads to %s, outside the recipe's directory %s", p, out.Path, out.Base)
	}
	return r.errorf(field, "%q: %v", p, err)
}

// PatchFiles returns the recipe's patch files in order, each resolved (every
// symbolic link followed) and checked to be a regular file inside the
// recipe's directory: the paths to read patches through. It refuses, with
// *Error values naming the field, a patch that is not a clean relative path
// or that leads outside the directory.
func (r *Recipe) PatchFiles() ([]string, error) {
	files := make([]string, len(r.Patches))
	var errs []error
	for i, p := range r.Patches {
		f, err := r.patchFile(i, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		files[i] = f
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return files, nil
}

// patchFile checks and resolves patch i, p (see PatchFiles).
func (r *Recipe) patchFile(i int, p string) (string, *Error) {
	field := fmt.Sprintf("patches[%d]", i)
	if p != "" && !filepath.IsAbs(p) && filepath.Clean(p) != p {
		return "", r.errorf(field, "%q: give a clean path relative to the recipe file (%q), inside its directory", p, filepath.Clean(p))
	}
	f, e := r.resolveInside(field, p)
	if e != nil {
		return "", e
	}
	if fi, err := os.Stat(f); err != nil {
		return "", r.errorf(field, "%q: %v", p, err)
	} else if !fi.Mode().IsRegular() {
		return "", r.errorf(field, "%q leads to %s, which is not a regular file", p, f)
	}
	return f, nil
}

// checkSourceTree resolves source.dir inside the recipe's directory and
// checks every symbolic link in the tree under it: each must lead inside the
// recipe's directory too (dkms reads the tree, links followed). It returns
// the problems found, as *Error values for source.dir.
func (r *Recipe) checkSourceTree() []error {
	const field = "source.dir"
	dir, e := r.resolveInside(field, r.Source.Dir)
	if e != nil {
		return []error{e}
	}
	if fi, err := os.Stat(dir); err != nil {
		return []error{r.errorf(field, "%q: %v", r.Source.Dir, err)}
	} else if !fi.IsDir() {
		return []error{r.errorf(field, "%q leads to %s, which is not a directory", r.Source.Dir, dir)}
	}
	var errs []error
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		name := filepath.Join(r.Source.Dir, rel)
		// The link's path from the recipe's directory: source.dir
		// resolved, then the link's place in the tree.
		_, err = inroot.Below(filepath.Dir(r.File), filepath.Join(r.Source.Dir, rel))
		var out *inroot.OutsideError
		switch {
		case errors.As(err, &out):
			errs = append(errs, r.errorf(field, "%s leads to %s, outside the recipe's directory %s", name, out.Path, out.Base))
		case err != nil:
			errs = append(errs, r.errorf(field, "%s is a link that does not resolve: %v", name, err))
		}
		return nil
	})
	if err != nil {
		errs = append(errs, r.errorf(field, "%v", err))
	}
	return errs
}
