package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/names/namestest"
)

// TestIndexRefusesNames: the boot index of a kernel that is not a name is
// never looked for, inside the cache or out of it.
func TestIndexRefusesNames(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	// An index outside the cache that ../../x would reach.
	outside := `{"format":1,"kernel":"x","sets":[]}`
	if err := os.WriteFile(filepath.Join(dir, "x.json"), []byte(outside), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"../../x", "..", "-x"} {
		ix, err := s.Index(k)
		if !errors.Is(err, names.ErrInvalid) || !strings.Contains(err.Error(), `kernel release "`+k+`"`) {
			t.Errorf("Index(%q) = %+v, %v; want an error naming the release", k, ix, err)
		}
	}
}

// TestSetRecordsRefuseOutsideNames: a set record in sets/ (canonical, its
// name its own sha256, so only its names are wrong) whose kernel, driver,
// version or flavour is a value outside the name grammar (namestest's fixed
// and seeded random cases) is refused by Get, left out of List (which names
// it as unreadable) and of Kernels; Index refuses each such kernel before it
// becomes a path.
func TestSetRecordsRefuseOutsideNames(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const kernel = "6.1.0-56-cloud-amd64"
	vermagic := kernel + " SMP preempt mod_unload modversions "
	fields := map[string]func(m *manifest.Manifest) *string{
		"kernel": func(m *manifest.Manifest) *string { return &m.Kernel }, "driver": func(m *manifest.Manifest) *string { return &m.Driver },
		"version": func(m *manifest.Manifest) *string { return &m.Version }, "flavor": func(m *manifest.Manifest) *string { return &m.Flavor },
	}
	write := func(edit func(m *manifest.Manifest)) string {
		m := &manifest.Manifest{Format: manifest.FormatVersion, Kernel: kernel, Vermagic: vermagic, Driver: "nvidia", Version: "535.261.03", Flavor: "open",
			Modules: []manifest.Module{{Name: "nvidia", File: "nvidia.ko", SHA256: strings.Repeat("a", 64), Size: 1, ELFSize: 1, Vermagic: vermagic}}}
		edit(m)
		b, err := manifest.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		id := manifest.IDOf(b)
		if err := os.WriteFile(s.ManifestPath(id), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// The record with good names is read: only the names make the others bad.
	id := write(func(*manifest.Manifest) {})
	if _, err := s.Get(id); err != nil {
		t.Fatalf("Get of the good record: %v", err)
	}
	if err := os.Remove(s.ManifestPath(id)); err != nil {
		t.Fatal(err)
	}
	for _, c := range namestest.All(200) {
		for field, at := range fields {
			if c.Value == "" && field == "flavor" {
				continue
			}
			id := write(func(m *manifest.Manifest) { *at(m) = c.Value })
			if got, err := s.Get(id); err == nil {
				t.Errorf("%s %s %.80q: Get = %+v; want it refused", c.Kind, field, c.Value, got)
			}
			list, err := s.List()
			if len(list) != 0 || err == nil {
				t.Errorf("%s %s %.80q: List = %+v, %v; want no set and the record named unreadable", c.Kind, field, c.Value, list, err)
			}
			if ks, _ := s.Kernels(); len(ks) != 0 {
				t.Errorf("%s %s %.80q: Kernels = %q; want none", c.Kind, field, c.Value, ks)
			}
			if err := os.Remove(s.ManifestPath(id)); err != nil {
				t.Fatal(err)
			}
		}
		if ix, err := s.Index(c.Value); !errors.Is(err, names.ErrInvalid) {
			t.Errorf("%s kernel %.80q: Index = %+v, %v; want it refused by the name grammar", c.Kind, c.Value, ix, err)
		}
	}
}
