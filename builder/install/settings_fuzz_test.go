package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// readSettingsFuzz is the ReadSettings call the fuzz target makes (a local
// wrapper, so that a change of its signature is one line here).
func readSettingsFuzz(root string) (Settings, error) { return ReadSettings(root) }

// FuzzReadSettings checks the reader of a root's etc/kpreload/boot.yaml (the
// image's, or any root given with --root): no panic; an error names the
// file; accepted settings hold a known policy, and round-trip (written back
// as YAML, they read to the same settings).
func FuzzReadSettings(f *testing.F) {
	for _, s := range []string{
		"", "default: newest\n", "default: newest-with-driver\n", "# boot settings\ndefault: newest # as Debian\n",
		"default: oldest\n", "default: [\n", "default:\n", "default: ~\n", "default: 1\n", "default: {a: b}\n",
		"default: newest\nunknown: 1\n", "---\ndefault: newest\n---\ndefault: oldest\n", "- a\n- b\n",
		"a: &a [*a, *a]\n", "default: \"newest\\u0000\"\n", "\xef\xbb\xbfdefault: newest\n", "\xff\xfe",
		"default: !!binary bmV3ZXN0\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		root := fakeRoot(t, map[string]string{SettingsFile: string(text)})
		p := filepath.Join(root, SettingsFile)
		st, err := readSettingsFuzz(root)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("ReadSettings(%q) = %v: the error does not name %s", text, err, p)
			}
			return
		}
		if st.Default != NewestWithDriver && st.Default != Newest {
			t.Fatalf("ReadSettings(%q) = %+v: default is neither %s nor %s", text, st, NewestWithDriver, Newest)
		}
		back, err := yaml.Marshal(st)
		if err != nil {
			t.Fatalf("yaml.Marshal(%+v): %v", st, err)
		}
		if err := os.WriteFile(p, back, 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := readSettingsFuzz(root)
		if err != nil || again != st {
			t.Fatalf("ReadSettings of %q (written back from %q) = %+v, %v; want %+v", back, text, again, err, st)
		}
	})
}
