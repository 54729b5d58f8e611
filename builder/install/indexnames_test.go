package install

import (
	"encoding/json"
	"errors"
	"maps"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/names/namestest"
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

// TestReadersRefuseOutsideNames: for every value outside the name grammar
// (namestest's fixed and seeded random cases), the root's readers refuse it
// wherever it comes: as a set's driver, version, flavour or id, or the
// kernel, of a boot index (readIndex, so install, status and the hooks), as
// the release readIndex is asked for (before it becomes a path), and as a
// release in /boot or /lib/modules (Kernels skips it, so nothing counts it
// as a kernel).
func TestReadersRefuseOutsideNames(t *testing.T) {
	const release = "6.1.0-56-cloud-amd64"
	name := path.Join(CacheDir, bootindex.IndexDir, release+".json")
	root := t.TempDir()
	treetest.Write(t, root, map[string]string{KernelImagePath(release): "k", InitramfsPath(release): "i"})
	good := map[string]string{"kernel": release, "id": strings.Repeat("ab", 32), "driver": "nvidia", "version": "550.54.14", "flavor": "open"}
	for _, c := range namestest.All(300) {
		for _, field := range []string{"kernel", "id", "driver", "version", "flavor"} {
			if c.Value == "" && (field == "id" || field == "flavor") {
				continue // an absent id or flavour
			}
			v := maps.Clone(good)
			v[field] = c.Value
			ix, err := json.Marshal(map[string]any{"format": bootindex.FormatVersion, "kernel": v["kernel"], "sets": []any{map[string]any{
				"id": v["id"], "driver": v["driver"], "version": v["version"], "flavor": v["flavor"], "dir": "../objects/sha256", "modules": []any{},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			treetest.Write(t, root, map[string]string{name: string(ix)})
			if got, err := ReadIndex(root, release); !errors.Is(err, names.ErrInvalid) {
				t.Errorf("%s %s %.80q: ReadIndex = %+v, %v; want it refused by the name grammar", c.Kind, field, c.Value, got, err)
			}
			kernels, err := Kernels(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(kernels) != 1 || len(kernels[0].Drivers) != 0 || kernels[0].IndexError == "" {
				t.Errorf("%s %s %.80q: Kernels = %+v; want %s without drivers, its index refused", c.Kind, field, c.Value, kernels, release)
			}
		}
		if got, err := ReadIndex(root, c.Value); err == nil {
			t.Errorf("%s release %.80q: ReadIndex = %+v; want it refused", c.Kind, c.Value, got)
		}
	}

	// Releases as file names: what a file name can hold (no '/', no NUL, at
	// most 255 bytes) is skipped as a release.
	root = t.TempDir()
	tree := map[string]string{}
	for _, c := range namestest.All(300) {
		if c.Value == "" || c.Value == "." || c.Value == ".." || strings.ContainsAny(c.Value, "/\x00") || len(c.Value) > 200 {
			continue
		}
		tree["boot/vmlinuz-"+c.Value] = "k"
		tree["lib/modules/"+c.Value+"/modules.dep"] = ""
	}
	if len(tree) < 100 {
		t.Fatalf("only %d hostile file names", len(tree))
	}
	treetest.Write(t, root, tree)
	kernels, err := Kernels(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(kernels) != 0 {
		t.Errorf("Kernels = %+v; want none (every release there breaks the name grammar)", kernels)
	}
}
