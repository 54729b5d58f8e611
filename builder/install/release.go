package install

import (
	"fmt"

	"github.com/kpreload/kpreload/kmodcache/names"
)

// CheckRelease refuses a kernel release that could not be a file name in
// /boot: empty, or not a name (kmodcache/names: at most 64 letters, digits
// and ".+~_-", starting with a letter or digit, no ".."). Every path this
// package makes from a release goes through it first.
func CheckRelease(release string) error {
	if release == "" {
		return fmt.Errorf("no kernel release given")
	}
	return names.Check("kernel release", release)
}
