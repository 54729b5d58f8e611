package remote

import (
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// TestSeenFileRefusesSpecialFiles: the cache's record of the generations it
// has seen that is a FIFO, a device, a directory or larger than its bound is
// refused at once, naming it; its content is never shown.
func TestSeenFileRefusesSpecialFiles(t *testing.T) {
	for _, kind := range inroottest.Specials(maxSeenFile) {
		t.Run(kind.Name, func(t *testing.T) {
			st, err := store.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(st.Dir(), SeenFile)
			kind.Make(t, p)
			inroottest.RefusesAtOnce(t, "loadSeen", p, kind.Want, func() error { _, err := loadSeen(st); return err })
		})
	}
}
