package modalias

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestLoadTreeRefusesSpecialFiles: a module tree's modules.dep or
// modules.alias that is a FIFO, a device, a directory or larger than
// MaxIndexFile is refused at once, naming it.
func TestLoadTreeRefusesSpecialFiles(t *testing.T) {
	for _, name := range []string{fileDep, fileAlias} {
		for _, kind := range inroottest.Specials(MaxIndexFile) {
			t.Run(name+" "+kind.Name, func(t *testing.T) {
				dir := t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, fileDep), []byte("kernel/a.ko:\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, name)
				os.Remove(p)
				kind.Make(t, p)
				inroottest.RefusesAtOnce(t, "LoadTree", p, kind.Want, func() error { _, err := LoadTree(dir); return err })
			})
		}
	}
}
