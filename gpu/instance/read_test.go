package instance

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestReadFIFO: an instance YAML that is a FIFO is refused at once as not a
// regular file, by every reader of one, instead of hanging.
func TestReadFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "instance.yaml")
	inroottest.FIFO(t, fifo)
	for _, tc := range []struct {
		name string
		read func() error
	}{
		{"ReadFile", func() error { _, err := ReadFile(fifo); return err }},
		{"ReadRequest", func() error { _, err := ReadRequest("file", fifo); return err }},
		{"Find", func() error {
			_, errs := Find(func(string) (string, bool) { return "", false }, []File{{Source: SourceImage, Path: fifo}})
			return errors.Join(errs...)
		}},
	} {
		err := inroottest.Within(5*time.Second, tc.read)
		if errors.Is(err, inroottest.ErrHung) || err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), fifo) {
			t.Errorf("%s of a FIFO: %v; want a not-a-regular-file error naming %s", tc.name, err, fifo)
		}
	}
}
