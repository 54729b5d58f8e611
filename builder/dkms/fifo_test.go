package dkms

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestCertFIFO: a recipe's signing certificate that is a FIFO is refused at
// once as not a regular file instead of hanging the build.
func TestCertFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "signing.crt")
	inroottest.FIFO(t, fifo)
	err := inroottest.Within(5*time.Second, func() error { _, err := CertID(fifo); return err })
	if errors.Is(err, inroottest.ErrHung) || err == nil || !strings.Contains(err.Error(), fifo+": not a regular file") {
		t.Errorf("CertID of a FIFO: %v; want a not-a-regular-file error naming %s", err, fifo)
	}
}

// TestReadConfFIFO: a source tree's dkms.conf that is a FIFO is refused at
// once as not a regular file instead of hanging the build.
func TestReadConfFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "dkms.conf")
	inroottest.FIFO(t, fifo)
	err := inroottest.Within(5*time.Second, func() error { _, err := ReadConf(fifo); return err })
	if errors.Is(err, inroottest.ErrHung) || err == nil || !strings.Contains(err.Error(), fifo+": not a regular file") {
		t.Errorf("ReadConf of a FIFO: %v; want a not-a-regular-file error naming %s", err, fifo)
	}
}
