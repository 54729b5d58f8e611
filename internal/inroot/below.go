package inroot

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ErrOutside is wrapped by the error of Below for a name that does not stay
// inside its directory.
var ErrOutside = errors.New("outside the directory")

// How a name leaves its directory, in an *OutsideError.
const (
	// OutAbsolute: the name is an absolute path.
	OutAbsolute = "absolute"
	// OutDotDot: the name itself climbs out with "..".
	OutDotDot = ".."
	// OutLink: a symbolic link on the way leads out.
	OutLink = "link"
)

// OutsideError is the error of Below for a name that leads outside its
// directory; the caller words it for its own field.
type OutsideError struct {
	Name string // the name as given
	Dir  string // the directory as given
	Base string // Dir absolute, every link followed
	// Path is where Name leads: for OutLink, absolute with every link
	// followed; for OutDotDot, Base joined with Name; for OutAbsolute,
	// Name cleaned.
	Path string
	How  string // OutAbsolute, OutDotDot or OutLink
}

func (e *OutsideError) Error() string {
	switch e.How {
	case OutAbsolute:
		return fmt.Sprintf("%s is absolute, not a path inside %s", e.Name, e.Dir)
	case OutDotDot:
		return fmt.Sprintf("%s leaves %s", e.Name, e.Dir)
	}
	return fmt.Sprintf("%s is a link to %s, outside %s", e.Name, e.Path, e.Dir)
}

// Unwrap returns ErrOutside.
func (e *OutsideError) Unwrap() error { return ErrOutside }

// Resolved is where Below found a name: Base is the directory and Path the
// name, both absolute with every symbolic link followed, and Rel is Path
// relative to Base, a local path ("." for Base itself) to read the file
// through confined to Base (ReadFile(Base, Rel, ...)).
type Resolved struct{ Base, Path, Rel string }

// Below resolves name, a path relative to the directory dir on this machine
// (every symbolic link followed as the host follows it, an absolute link
// from "/"), and checks that it stays inside dir. Both sides are resolved the
// same way, made absolute and then every link followed, so a relative dir
// ("recipes", from the working directory) and an absolute one
// ("/src/kpreload/recipes") accept the same names and refuse the same links.
//
// It fails with an *OutsideError (wrapping ErrOutside) for an absolute name,
// a name that climbs out with "..", or one a link leads out of dir, and with
// the *fs.PathError of the resolution when name or dir does not resolve
// (a dangling link: fs.ErrNotExist).
func Below(dir, name string) (Resolved, error) {
	if filepath.IsAbs(name) {
		return Resolved{}, &OutsideError{Name: name, Dir: dir, Path: filepath.Clean(name), How: OutAbsolute}
	}
	base, err := filepath.Abs(dir)
	if err == nil {
		base, err = filepath.EvalSymlinks(base)
	}
	if err != nil {
		return Resolved{}, err
	}
	if name == "" {
		name = "."
	}
	if !filepath.IsLocal(name) {
		return Resolved{}, &OutsideError{Name: name, Dir: dir, Base: base, Path: filepath.Join(base, name), How: OutDotDot}
	}
	p, err := filepath.EvalSymlinks(filepath.Join(base, name))
	if err != nil {
		return Resolved{}, err
	}
	rel, err := filepath.Rel(base, p)
	if err != nil || !filepath.IsLocal(rel) {
		return Resolved{}, &OutsideError{Name: name, Dir: dir, Base: base, Path: p, How: OutLink}
	}
	return Resolved{Base: base, Path: p, Rel: rel}, nil
}
