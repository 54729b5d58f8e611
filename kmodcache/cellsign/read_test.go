package cellsign

import (
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestKeyFileFIFO: a trust or signing key file that is a FIFO is refused at
// once as not a regular file instead of hanging the command.
func TestKeyFileFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "team.pub")
	inroottest.FIFO(t, fifo)
	for _, tc := range []struct {
		name string
		load func() error
	}{
		{"LoadTrust", func() error { _, err := LoadTrust(fifo); return err }},
		{"LoadSigner", func() error { _, err := LoadSigner(fifo); return err }},
	} {
		inroottest.RefusesFIFO(t, tc.name, fifo, fifo, tc.load)
	}
}
