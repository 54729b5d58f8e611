package rootfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOptionsSpec checks the tarball spec Options asks for: the four suites
// of its mirrors, and the base, the image's own, the extra and cloud-init's
// packages sorted once each.
func TestOptionsSpec(t *testing.T) {
	o := Options{Suite: "trixie", Mirror: "http://m/debian", SecurityMirror: "http://s/debian-security", Packages: []string{"curl", "udev"}, CloudInit: true}
	s := o.Spec([]string{"linux-image-6.12", "curl"}, true, "2026-12-07")
	wantSources := []string{
		"deb http://m/debian trixie main contrib non-free non-free-firmware",
		"deb http://m/debian trixie-updates main contrib non-free non-free-firmware",
		"deb http://s/debian-security trixie-security main contrib non-free non-free-firmware",
		"deb http://m/debian trixie-backports main contrib non-free non-free-firmware",
	}
	if !slices.Equal(s.Sources, wantSources) {
		t.Errorf("sources = %q, want %q", s.Sources, wantSources)
	}
	want := slices.Concat(BasePackages, []string{"linux-image-6.12", "curl"}, CloudInitPackages)
	slices.Sort(want)
	want = slices.Compact(want)
	if got := s.Packages; !slices.Equal(got, want) {
		t.Errorf("packages = %q, want %q", got, want)
	}
	if s.Suite != "trixie" || s.Date != "2026-12-07" || !s.DistributionInitramfs {
		t.Errorf("spec = %+v, want trixie, the day and the distribution's initramfs", s)
	}
	if !slices.Contains(o.Spec(nil, false, "d").Packages, "cloud-init") {
		t.Errorf("a cloud-init root lacks cloud-init")
	}
	if o.CloudInit = false; slices.Contains(o.Spec(nil, false, "d").Packages, "cloud-init") {
		t.Errorf("a root without cloud-init has it")
	}
}

func TestOptionsProblems(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		o    Options
		want string // in the one problem; "" for none
	}{
		{"good", Options{Files: map[string]string{"/etc/f": file}, Packages: []string{"curl", "htop=3.2.2-2"}}, ""},
		{"relative destination", Options{Files: map[string]string{"etc/f": file}}, "a clean absolute path"},
		{"unclean destination", Options{Files: map[string]string{"/etc/../f": file}}, "a clean absolute path"},
		{"missing source", Options{Files: map[string]string{"/etc/f": filepath.Join(dir, "nope")}}, "no such file"},
		{"directory source", Options{Files: map[string]string{"/etc/f": dir}}, "not a regular file"},
		{"two packages in one", Options{Packages: []string{"a b"}}, `package "a b"`},
		{"empty package", Options{Packages: []string{""}}, `package ""`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.o.Problems()
			switch {
			case tt.want == "" && len(got) != 0:
				t.Errorf("Problems() = %v, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0].Error(), tt.want)):
				t.Errorf("Problems() = %v, want one saying %q", got, tt.want)
			}
		})
	}
}
