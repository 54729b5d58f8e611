package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image/stage"
)

// TestValidateKernelNames: an image's kernels are names (kmodcache/names):
// shaped like a release is not enough.
func TestValidateKernelNames(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	long := "6.1.0-56-cloud-" + strings.Repeat("a", 60)
	for k, want := range map[string]string{
		"6.1..0-cloud-amd64": `kernel "6.1..0-cloud-amd64" holds ".."`,
		long:                 `is 75 bytes long`,
	} {
		o := Options{Name: "ci", OutDir: dir, Kernels: []string{k}, Stage: stage.Options{KpreloadBinary: bin, InitBinary: bin}}
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(kernel %.20q) = %v, want an error containing %q", k, err, want)
		}
	}
}
