package install

import (
	"encoding/json"
	"errors"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

// TestIndexNamesRefusedByEveryReader: a root's boot index whose set names a
// driver, version, flavour or id outside the name grammar (a path, a
// terminal control, an option) is refused by every reader of it alike:
// bootindex.Read (/init, plan and switch, the cache), bootindex.ReadIn and
// readIndex (install, status, the kernel hooks' pull), and install.Kernels
// (status, the hooks' choice of the default): its kernel counts as one
// without driver cells, so it is not made the default, and status says why.
func TestIndexNamesRefusedByEveryReader(t *testing.T) {
	const older, newer = "6.1.0-55-cloud-amd64", "6.1.0-56-cloud-amd64"
	good := map[string]string{"id": strings.Repeat("ab", 32), "driver": "nvidia", "version": "550.54.14", "flavor": "open"}
	tests := []struct{ field, value string }{
		{"driver", "../../etc"},
		{"version", "../.."},
		{"driver", "evil\x1b]0;PWNED\a\x1b[2J"},
		{"version", "1\r\nFAKE: line"},
		{"flavor", "-open"},
		{"id", "../x"},
		{"driver", ""},
		{"version", strings.Repeat("9", names.MaxLen+1)},
	}
	for _, tc := range tests {
		t.Run(tc.field+" "+tc.value, func(t *testing.T) {
			set := map[string]any{"dir": "../objects/sha256", "modules": []any{}}
			for k, v := range good {
				set[k] = v
			}
			set[tc.field] = tc.value
			ix, err := json.Marshal(map[string]any{"format": bootindex.FormatVersion, "kernel": older, "sets": []any{set}})
			if err != nil {
				t.Fatal(err)
			}
			name := path.Join(CacheDir, bootindex.IndexDir, older+".json")
			root := t.TempDir()
			treetest.Write(t, root, map[string]string{
				KernelImagePath(older): "k", InitramfsPath(older): "i",
				KernelImagePath(newer): "k", InitramfsPath(newer): "i",
				name: string(ix),
			})
			readers := map[string]func() error{
				"bootindex.Read":   func() error { _, err := bootindex.Read(filepath.Join(root, name)); return err },
				"bootindex.ReadIn": func() error { _, err := bootindex.ReadIn(root, name); return err },
				"readIndex":        func() error { _, err := ReadIndex(root, older); return err },
			}
			for what, read := range readers {
				if err := read(); !errors.Is(err, names.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
					t.Errorf("%s: %v; want the %s refused by the name grammar", what, err, tc.field)
				}
			}
			kernels, err := Kernels(root)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range kernels {
				if len(k.Drivers) != 0 {
					t.Errorf("Kernels: %s has drivers %q from a refused index", k.Release, k.Drivers)
				}
				if k.Release == older && (!strings.Contains(k.IndexError, "sets[0]: "+tc.field) || !strings.Contains(k.IndexError, names.Allowed)) {
					t.Errorf("Kernels: %s: index error %q, want the refusal", k.Release, k.IndexError)
				}
			}
			if def := DefaultKernel(kernels, false); def != newer {
				t.Errorf("DefaultKernel = %s, want %s (a refused index holds no driver cells)", def, newer)
			}
		})
	}
}
