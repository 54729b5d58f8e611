package activate

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/names/namestest"
)

// TestReadyNames: a ready record whose driver, version, flavour, kernel or
// previous version is not a name is refused when read, naming the file, the
// field and the value, and is never written.
func TestReadyNames(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(r *Ready)
		field string
	}{
		{"version up to etc", func(r *Ready) { r.Version = "../../../../etc" }, `version "../../../../etc"`},
		{"version dot dot", func(r *Ready) { r.Version = ".." }, `version ".."`},
		{"no version", func(r *Ready) { r.Version = "" }, `version "" is empty`},
		{"driver with a slash", func(r *Ready) { r.Driver = "nvidia/../x" }, `driver "nvidia/../x"`},
		{"flavour dot dot", func(r *Ready) { r.Flavor = ".." }, `flavor ".."`},
		{"kernel up", func(r *Ready) { r.Kernel = "../6.1" }, `kernel "../6.1"`},
		{"previous version up", func(r *Ready) { r.Previous = "../1.0" }, `previous "../1.0"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := t.TempDir()
			r := Ready{Format: ReadyFormat, Driver: "nvidia", Version: "535.261.03", Flavor: "open", Kernel: "6.1.0-56-cloud-amd64", Modules: []string{}, By: "init"}
			tt.edit(&r)

			err := MarkReady(run, r)
			if err == nil || !errors.Is(err, names.ErrInvalid) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("MarkReady: err = %v, want one naming %s", err, tt.field)
			}
			if _, err := os.Stat(ReadyPath(run)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("MarkReady wrote %s (%v)", ReadyPath(run), err)
			}

			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(ReadyPath(run)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(ReadyPath(run), b, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadReady(run)
			if err == nil {
				t.Fatalf("ReadReady accepted %+v", got)
			}
			for _, want := range []string{ReadyPath(run), tt.field, names.Allowed} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("ReadReady: error %q does not say %s", err, want)
				}
			}
		})
	}
}

// TestPointRefusesNames: the driver link never points at a version that is
// not a name.
func TestPointRefusesNames(t *testing.T) {
	for _, v := range []string{"..", "-rf", "1.0/../..", "1 0"} {
		root, run := t.TempDir(), t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, DriversDir, v), 0o755); err != nil {
			t.Fatal(err)
		}
		err := Point(run, root, DriversDir, v)
		if !errors.Is(err, names.ErrInvalid) || !strings.Contains(err.Error(), `driver version "`+v+`"`) {
			t.Errorf("Point(%q): err = %v, want one naming the version", v, err)
		}
		if _, err := os.Lstat(LinkPath(run)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Point(%q) made the link (%v)", v, err)
		}
	}
}

// TestReadyRefusesOutsideNames: for every value outside the name grammar
// (namestest's fixed and seeded random cases) as the driver, version,
// flavour, kernel, previous version or set id, ReadReadyIn (under ReadReady,
// so cdi, switch, status and user-data apply) refuses the record and
// MarkReady never writes it. "" is refused for the driver and the version;
// the others may be absent.
func TestReadyRefusesOutsideNames(t *testing.T) {
	root, run := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(ReadyPath(RunDir))), 0o755); err != nil {
		t.Fatal(err)
	}
	fields := map[string]func(r *Ready) *string{
		"driver": func(r *Ready) *string { return &r.Driver }, "version": func(r *Ready) *string { return &r.Version },
		"flavor": func(r *Ready) *string { return &r.Flavor }, "kernel": func(r *Ready) *string { return &r.Kernel },
		"previous": func(r *Ready) *string { return &r.Previous }, "set": func(r *Ready) *string { return &r.Set },
	}
	for _, c := range namestest.All(300) {
		for field, at := range fields {
			if c.Value == "" && field != "driver" && field != "version" {
				continue
			}
			r := Ready{Format: ReadyFormat, Driver: "nvidia", Version: "535.261.03", Flavor: "open", Kernel: "6.1.0-56-cloud-amd64",
				Set: strings.Repeat("ab", 32), Previous: "550.54.14", Modules: []string{}, By: "init"}
			*at(&r) = c.Value
			if err := MarkReady(run, r); !errors.Is(err, names.ErrInvalid) {
				t.Errorf("%s %s %.80q: MarkReady = %v; want it refused by the name grammar", c.Kind, field, c.Value, err)
			}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, ReadyPath(RunDir)), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := ReadReadyIn(root, RunDir); !errors.Is(err, names.ErrInvalid) || !strings.Contains(err.Error(), field+" ") {
				t.Errorf("%s %s %.80q: ReadReadyIn = %+v, %v; want the %s refused by the name grammar", c.Kind, field, c.Value, got, err, field)
			}
		}
	}
}
