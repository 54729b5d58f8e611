package namestest

import (
	"errors"
	"slices"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
)

// TestCasesAreOutside: every case, fixed or generated, breaks the grammar
// (names.Check refuses it), the generator gives the same cases for the same
// seed, and every kind the readers' tests rely on is there.
func TestCasesAreOutside(t *testing.T) {
	all := All(2000)
	kinds := map[string]int{}
	for _, c := range all {
		kinds[c.Kind]++
		if err := names.Check("name", c.Value); !errors.Is(err, names.ErrInvalid) {
			t.Errorf("%s case %q: names.Check = %v, want it refused", c.Kind, c.Value, err)
		}
	}
	for _, k := range []string{"empty", "traversal", "slash", "nul", "control", "overlong", "leading", "confusable",
		"generated break", "generated leading", "generated overlong"} {
		if kinds[k] == 0 {
			t.Errorf("no %s case", k)
		}
	}
	if !slices.Equal(Generate(Seed, 50), Generate(Seed, 50)) {
		t.Error("Generate gives other cases for the same seed")
	}
	if slices.Equal(Generate(Seed, 50), Generate(Seed+1, 50)) {
		t.Error("Generate gives the same cases for another seed")
	}
}
