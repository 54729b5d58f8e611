package recipe

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestLoadFIFO: a recipe that is a FIFO (named, or found by LoadDir) is
// refused at once as not a regular file instead of hanging the build.
func TestLoadFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "hang.yaml")
	inroottest.FIFO(t, fifo)
	for _, tc := range []struct {
		name string
		load func() error
	}{
		{"Load", func() error { _, err := Load(fifo); return err }},
		{"LoadDir", func() error { _, err := LoadDir(dir); return err }},
	} {
		err := inroottest.Within(5*time.Second, tc.load)
		if errors.Is(err, inroottest.ErrHung) || err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), fifo) {
			t.Errorf("%s of a FIFO recipe: %v; want a not-a-regular-file error naming %s", tc.name, err, fifo)
		}
	}
}
