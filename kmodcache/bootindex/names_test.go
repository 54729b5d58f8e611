package bootindex

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/names/namestest"
)

// TestReadRefusesNames: an index whose kernel, or a driver set's driver,
// version or flavour, is not a name is refused, naming the file, the field
// and the value.
func TestReadRefusesNames(t *testing.T) {
	tests := []struct {
		name string
		from string // in realIndex
		to   string
		want string
	}{
		{"version dot dot", `"version": "1.0.0"`, `"version": ".."`, `sets[0]: version ".."`},
		{"version up to etc", `"version": "1.0.0"`, `"version": "../../../../etc"`, `sets[0]: version "../../../../etc"`},
		{"no version", `"version": "1.0.0",`, ``, `sets[0]: version "" is empty`},
		{"driver with a slash", `"driver": "kpreload-edu"`, `"driver": "kpreload/edu"`, `sets[0]: driver "kpreload/edu"`},
		{"flavour as an option", `"flavor": "open"`, `"flavor": "-open"`, `sets[0]: flavor "-open"`},
		{"kernel up", `"kernel": "6.12.118+deb13-cloud-amd64"`, `"kernel": "../6.12"`, `kernel "../6.12"`},
		{"no kernel", `"kernel": "6.12.118+deb13-cloud-amd64",`, ``, `kernel "" is empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k.json")
			if !strings.Contains(realIndex, tt.from) {
				t.Fatalf("the index lacks %s", tt.from)
			}
			if err := os.WriteFile(path, []byte(strings.Replace(realIndex, tt.from, tt.to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			ix, err := Read(path)
			if err == nil {
				t.Fatalf("Read accepted %+v", ix)
			}
			if !errors.Is(err, names.ErrInvalid) {
				t.Errorf("error %q does not wrap names.ErrInvalid", err)
			}
			for _, want := range []string{path, tt.want, names.Allowed} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %s", err, want)
				}
			}
		})
	}
}

// TestParseRefusesOutsideNames: for every value outside the name grammar
// (namestest: traversal, slashes, NUL, controls, empty, overlong, a leading
// dot or dash, look-alike Unicode, and seeded random ones), an index that
// carries it as its kernel or as a set's id, driver, version or flavour is
// refused by Parse, the reader under Read and ReadIn and so under every
// reader of a boot index (/init's, install's, the cache's, plan's and
// switch's). "" is refused where the field is required; an absent id or
// flavour is "".
func TestParseRefusesOutsideNames(t *testing.T) {
	good := map[string]string{"kernel": "6.1.0-56-cloud-amd64", "id": strings.Repeat("ab", 32), "driver": "nvidia", "version": "550.54.14", "flavor": "open"}
	optional := map[string]bool{"id": true, "flavor": true}
	for _, c := range namestest.All(500) {
		for _, field := range []string{"kernel", "id", "driver", "version", "flavor"} {
			if c.Value == "" && optional[field] {
				continue
			}
			v := maps.Clone(good)
			v[field] = c.Value
			b, err := json.Marshal(map[string]any{"format": FormatVersion, "kernel": v["kernel"], "sets": []any{map[string]any{
				"id": v["id"], "driver": v["driver"], "version": v["version"], "flavor": v["flavor"], "dir": "x", "modules": []any{},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			if ix, err := Parse("k.json", b); !errors.Is(err, names.ErrInvalid) || !strings.Contains(err.Error(), field+" ") {
				t.Errorf("%s %s %.80q: Parse = %+v, %v; want the %s refused by the name grammar", c.Kind, field, c.Value, ix, err, field)
			}
		}
	}
}
