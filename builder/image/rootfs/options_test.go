package rootfs

import (
	"slices"
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
