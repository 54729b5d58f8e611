package deb

import (
	"debug/buildinfo"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/internal/layout"
)

// GPLRecipes are the recipes' directories that hold the test driver's
// source, GPL-2.0 by its SPDX lines (TestGPLRecipes checks them).
var GPLRecipes = []string{"testdriver", "testdriver-2", "testdriver-userspace"}

// copyright is /usr/share/doc/kpreload/copyright, in Debian's machine-readable
// format: kpreload's own files, the test driver's GPL source, and the Go
// modules linked into the programs (read from the programs' build information).
func copyright(o Options) ([]byte, error) {
	mods := map[string]string{}
	for _, name := range []string{"kpreload", layout.Init, layout.RootInit, layout.Plugin} {
		bi, err := buildinfo.ReadFile(filepath.Join(o.BinDir, name))
		if err != nil {
			return nil, fmt.Errorf("deb: copyright: the Go modules in %s: %w", name, err)
		}
		for _, m := range bi.Deps {
			if m.Replace != nil {
				m = m.Replace
			}
			mods[m.Path] = m.Version
		}
	}
	var b strings.Builder
	b.WriteString(`Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: kpreload
Source: https://github.com/kpreload/kpreload
Comment: The programs are statically linked Go programs. Besides kpreload's own
 code they hold these Go modules, each under the license its source names at
 the version given:
`)
	for _, p := range slices.Sorted(maps.Keys(mods)) {
		fmt.Fprintf(&b, " %s %s\n", p, mods[p])
	}
	var gpl []string
	for _, d := range GPLRecipes {
		gpl = append(gpl, strings.TrimPrefix(layout.Recipes, "/")+"/"+d+"/*")
	}
	// The notices' year is the release's: the build date is the last commit's.
	fmt.Fprintf(&b, `
Files: *
Copyright: %[1]d the kpreload authors
License: not-stated
 The kpreload source tree this package was made from names no license.

Files: %[2]s
Copyright: %[1]d the kpreload authors
License: GPL-2
 On Debian systems, the complete text of the GNU General Public License
 version 2 can be found in "/usr/share/common-licenses/GPL-2".
`, o.Date.Year(), strings.Join(gpl, " "))
	return []byte(b.String()), nil
}
