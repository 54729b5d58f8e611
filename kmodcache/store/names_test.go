package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
)

// TestIndexRefusesNames: the boot index of a kernel that is not a name is
// never looked for, inside the cache or out of it.
func TestIndexRefusesNames(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	// An index outside the cache that ../../x would reach.
	outside := `{"format":1,"kernel":"x","sets":[]}`
	if err := os.WriteFile(filepath.Join(dir, "x.json"), []byte(outside), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"../../x", "..", "-x"} {
		ix, err := s.Index(k)
		if !errors.Is(err, names.ErrInvalid) || !strings.Contains(err.Error(), `kernel release "`+k+`"`) {
			t.Errorf("Index(%q) = %+v, %v; want an error naming the release", k, ix, err)
		}
	}
}
