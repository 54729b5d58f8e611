package cellsign

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		err := inroottest.Within(5*time.Second, tc.load)
		if errors.Is(err, inroottest.ErrHung) || err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), fifo) {
			t.Errorf("%s of a FIFO: %v; want a not-a-regular-file error naming %s", tc.name, err, fifo)
		}
	}
}
