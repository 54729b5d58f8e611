package recipe

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/internal/inroot"
)

// confineKey checks the key file of an extra archive, key as a recipe or
// SharedArchivesFile in dir names it, and returns its absolute path with every link
// resolved and its content as read then (which the archive then trusts, so a
// link swapped in later cannot lead out). The key belongs beside the recipes: key must be relative to
// dir and stay inside it (no "..", no link out of it), and name a regular,
// non-empty file of at most archive.MaxKeySize bytes, read confined to dir.
// The error says what is wrong with key (the caller adds file, line and
// field).
func confineKey(dir, key string) (string, []byte, error) {
	// One helper resolves the directory and the key alike, so "recipes"
	// (the default --recipes, relative) and its absolute path accept the
	// same keys and refuse the same links.
	at, err := inroot.Below(dir, key)
	var out *inroot.OutsideError
	switch {
	case errors.As(err, &out) && out.How == inroot.OutAbsolute:
		return "", nil, fmt.Errorf("%s: an absolute path is refused: keep the archive's key beside the recipes and name it relative to %s", key, dir)
	case errors.As(err, &out) && out.How == inroot.OutDotDot:
		return "", nil, fmt.Errorf("%s leaves the recipes directory %s: keep the archive's key beside the recipes", key, dir)
	case errors.As(err, &out):
		return "", nil, fmt.Errorf("%s is a link to %s, outside the recipes directory %s: keep the archive's key beside the recipes", key, out.Path, dir)
	case err != nil:
		return "", nil, fmt.Errorf("%s: %w", key, err)
	}
	// Read inside dir (a link swapped in meanwhile cannot lead out), as a
	// regular file of a key's size: never a FIFO, a device or a huge file.
	data, err := inroot.ReadFile(at.Base, at.Rel, archive.MaxKeySize)
	if err != nil {
		if errors.Is(err, inroot.ErrTooLarge) {
			return "", nil, fmt.Errorf("%s: too big for an OpenPGP public key: %w", key, err)
		}
		return "", nil, fmt.Errorf("%s: %w", key, err)
	}
	if len(data) == 0 {
		return "", nil, fmt.Errorf("%s is empty", key)
	}
	return at.Path, data, nil
}

// confineKeys checks the key of each of r's own extra archives (confineKey,
// relative to the recipe file) and replaces it with its resolved path and
// content; the
// errors name the file, the line and the field.
func (r *Recipe) confineKeys() []error {
	var errs []error
	for i, x := range r.Archives {
		if x.Key == "" {
			continue // Validate says it is missing
		}
		field := fmt.Sprintf("archives[%d].key", i)
		p, data, err := confineKey(filepath.Dir(r.File), x.Key)
		if err != nil {
			errs = append(errs, r.errorf(field, "%v", err))
			continue
		}
		r.Archives[i].Key, r.Archives[i].KeyData = p, data
	}
	return errs
}
