package remote

import (
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestSeenFileRefusesSpecialFiles: the cache's record of the generations it
// has seen that is a FIFO, a device, a directory or larger than its bound is
// refused at once, naming it; its content is never shown.
func TestSeenFileRefusesSpecialFiles(t *testing.T) {
	for _, kind := range inroottest.Specials(maxSeenFile) {
		t.Run(kind.Name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, SeenFile)
			kind.Make(t, p)
			inroottest.RefusesAtOnce(t, "loadSeen", p, kind.Want, func() error { _, err := loadSeen(dir); return err })
		})
	}
}
