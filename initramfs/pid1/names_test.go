package pid1

import (
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/names/namestest"
)

// TestBootRefusesOutsideNames: /init boots past an index, in the initramfs
// or in the root's cache, whose driver set's driver, version or flavour is
// a value outside the name grammar (namestest's first fixed case of each
// kind; the readers under it take every case in kmodcache/bootindex): the index is
// refused, so nothing of it is loaded, the report and the console say why,
// and the root's /sbin/init still runs.
func TestBootRefusesOutsideNames(t *testing.T) {
	var cases []namestest.Case
	for _, c := range namestest.Fixed {
		if !slices.ContainsFunc(cases, func(d namestest.Case) bool { return d.Kind == c.Kind }) {
			cases = append(cases, c)
		}
	}
	for _, where := range []string{"initramfs", "root"} {
		for _, c := range cases {
			for _, field := range []string{"driver", "version", "flavor"} {
				if c.Value == "" && field == "flavor" {
					continue
				}
				t.Run(where+" "+c.Kind+" "+field, func(t *testing.T) {
					t.Parallel()
					f := newFixture(t, "")
					s := edu("1.0.0")
					*map[string]*string{"driver": &s.driver, "version": &s.version, "flavor": &s.flavor}[field] = c.Value
					if where == "initramfs" {
						f.initSets = []testSet{s}
					} else {
						f.rootSets = []testSet{s}
					}
					out := f.boot()
					if slices.Contains(out.kern.loaded, "kpreload_edu") {
						t.Errorf("%s %s %s %.60q: kpreload_edu loaded from a refused index", where, c.Kind, field, c.Value)
					}
					errs := strings.Join(out.rep.Errors, "\n")
					if !strings.Contains(errs, "boot index") || !strings.Contains(errs, names.Allowed) || !strings.Contains(out.console, names.Allowed) {
						t.Errorf("%s %s %s %.60q: errors %q, want the index refused by the name grammar", where, c.Kind, field, c.Value, errs)
					}
					if len(out.sys.switched) != 1 {
						t.Errorf("%s %s %s %.60q: switch_root calls %q, want the root's init run", where, c.Kind, field, c.Value, out.sys.switched)
					}
				})
			}
		}
	}
}
