package mistakes

import (
	"errors"

	"github.com/kpreload/kpreload/kmodcache/names"
)

// CheckNames refuses flags and arguments that name a driver, version,
// flavour or kernel release but break kmodcache/names; pairs are the flag
// (or argument) and its value, and a value not given ("") is skipped.
func CheckNames(pairs ...string) error {
	var errs []error
	for i := 0; i+1 < len(pairs); i += 2 {
		errs = append(errs, names.CheckOptional(pairs[i], pairs[i+1]))
	}
	return errors.Join(errs...)
}
