package modinfo

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestReadFileFIFO: a module file that is a FIFO (kpreload modinfo, cache
// add) is refused at once as not a regular file instead of hanging.
func TestReadFileFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "hang.ko")
	inroottest.FIFO(t, fifo)
	for _, tc := range []struct {
		name string
		read func() error
	}{
		{"ReadFile", func() error { _, err := ReadFile(fifo); return err }},
		{"Open", func() error { _, _, err := Open(fifo); return err }},
	} {
		err := inroottest.Within(5*time.Second, tc.read)
		if errors.Is(err, inroottest.ErrHung) || err == nil || !strings.Contains(err.Error(), fifo+": not a regular file") {
			t.Errorf("%s of a FIFO: %v; want a not-a-regular-file error naming %s", tc.name, err, fifo)
		}
	}
}
