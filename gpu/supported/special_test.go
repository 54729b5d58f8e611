package supported_test

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/supported"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestReadFileRefusesSpecialFiles: a supported-gpus.json that is a FIFO, a
// device, a directory or larger than MaxFile is refused at once, naming it;
// so is a gzip-compressed one that expands past MaxFile.
func TestReadFileRefusesSpecialFiles(t *testing.T) {
	for _, kind := range inroottest.Specials(supported.MaxFile) {
		t.Run(kind.Name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "supported-gpus.json")
			kind.Make(t, p)
			inroottest.RefusesAtOnce(t, "ReadFile", p, kind.Want, func() error { _, err := supported.ReadFile(p); return err })
		})
	}
	t.Run("gzip bomb", func(t *testing.T) {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(`{"chips":[`))
		zw.Write(bytes.Repeat([]byte(" "), supported.MaxFile))
		zw.Close()
		p := filepath.Join(t.TempDir(), "supported-gpus.json.gz")
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := supported.ReadFile(p); err == nil || !strings.Contains(err.Error(), "gunzip: more than") {
			t.Errorf("ReadFile of %d bytes expanding past %d: %v; want a refusal", b.Len(), supported.MaxFile, err)
		}
	})
}
