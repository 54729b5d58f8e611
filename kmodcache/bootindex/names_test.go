package bootindex

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
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
