package stage

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestUnitName: the one rule of which staged files are units to enable,
// shared by the Packer provisioner and install --stage.
func TestUnitName(t *testing.T) {
	for _, c := range []struct {
		rel, want string
		ok        bool
	}{
		{"usr/lib/systemd/system/kpreload-boot-ok.service", "kpreload-boot-ok.service", true},
		{"lib/systemd/system/x.timer", "x.timer", true},
		{"etc/systemd/system/x.path", "x.path", true},
		{"/usr/lib/systemd/system/kpreload-drivers.target", "kpreload-drivers.target", true},
		{"usr/lib/systemd/system/getty@.service", "", false},
		{"usr/lib/systemd/system-preset/80-kpreload.preset", "", false},
		{"usr/lib/systemd/system/x.service.d/override.conf", "", false},
		{"opt/kpreload/drivers/1.0/usr/lib/systemd/system/nvidia.service", "", false},
		{"etc/ld.so.conf.d/kpreload.conf", "", false},
	} {
		if got, ok := UnitName(c.rel); got != c.want || ok != c.ok {
			t.Errorf("UnitName(%q) = %q, %v; want %q, %v", c.rel, got, ok, c.want, c.ok)
		}
	}
	dir := t.TempDir()
	for _, p := range []string{"usr/lib/systemd/system/b.service", "usr/lib/systemd/system/a.target", "etc/systemd/system/b.service", "usr/lib/systemd/system/c@.service"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("b.service", filepath.Join(dir, "usr/lib/systemd/system/d.service")); err != nil {
		t.Fatal(err)
	}
	got, err := Units(dir)
	if want := []string{"a.target", "b.service"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("Units = %v, %v; want %v", got, err, want)
	}
}
