package dkms

import (
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestCertFIFO: a recipe's signing certificate that is a FIFO is refused at
// once as not a regular file instead of hanging the build.
func TestCertFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "signing.crt")
	inroottest.FIFO(t, fifo)
	inroottest.RefusesFIFO(t, "CertID", fifo, fifo+": not a regular file", func() error { _, err := CertID(fifo); return err })
}

// TestReadConfFIFO: a source tree's dkms.conf that is a FIFO is refused at
// once as not a regular file instead of hanging the build.
func TestReadConfFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "dkms.conf")
	inroottest.FIFO(t, fifo)
	inroottest.RefusesFIFO(t, "ReadConf", fifo, fifo+": not a regular file", func() error { _, err := ReadConf(fifo); return err })
}
