package bootloader

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestCertificateFIFO: a module certificate that is a FIFO is refused at
// once as not a regular file instead of hanging the image build.
func TestCertificateFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "signing.crt")
	inroottest.FIFO(t, fifo)
	err := inroottest.Within(5*time.Second, func() error { _, err := ReadCertificate(fifo); return err })
	if errors.Is(err, inroottest.ErrHung) || err == nil || !strings.Contains(err.Error(), fifo+": not a regular file") {
		t.Errorf("ReadCertificate of a FIFO: %v; want a not-a-regular-file error naming %s", err, fifo)
	}
}
