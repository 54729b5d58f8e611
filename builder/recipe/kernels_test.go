package recipe

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// fakeKernels is an archive with the orderings that trip a plain string sort.
var fakeKernels = ListerFunc(func() ([]string, error) {
	return []string{
		"6.1.0-10-cloud-amd64", "6.1.0-9-cloud-amd64", "6.1.0-56-cloud-amd64", "6.1.0-56-amd64", "6.1.0-56-rt-amd64",
		"6.12.10+deb12-cloud-amd64", "6.12.9+deb12-cloud-amd64", "6.12.90+deb12.1-cloud-amd64", "6.12.90+deb12-cloud-amd64",
		"not-a-release",
	}, nil
})

func TestResolve(t *testing.T) {
	sel := func(series, flavor string, n int) Selector {
		return Selector{Series: series, Flavor: flavor, Newest: n}
	}
	tests := []struct {
		name string
		m    Matrix
		want []string
	}{
		{"newest 2 of 6.1 cloud", Matrix{Select: []Selector{sel("6.1", "cloud-amd64", 2)}},
			[]string{"6.1.0-10-cloud-amd64", "6.1.0-56-cloud-amd64"}},
		{"newest 3 of 6.12 cloud", Matrix{Select: []Selector{sel("6.12", "cloud-amd64", 3)}},
			[]string{"6.12.10+deb12-cloud-amd64", "6.12.90+deb12-cloud-amd64", "6.12.90+deb12.1-cloud-amd64"}},
		{"more than exist", Matrix{Select: []Selector{sel("6.1", "cloud-amd64", 10)}},
			[]string{"6.1.0-9-cloud-amd64", "6.1.0-10-cloud-amd64", "6.1.0-56-cloud-amd64"}},
		{"other flavour", Matrix{Select: []Selector{sel("6.1", "amd64", 1)}},
			[]string{"6.1.0-56-amd64"}},
		{"explicit and selectors, deduplicated and sorted", Matrix{
			Releases: []string{"6.12.9+deb12-cloud-amd64", "6.1.0-56-cloud-amd64"},
			Select:   []Selector{sel("6.1", "cloud-amd64", 1), sel("6.12", "cloud-amd64", 1)}},
			[]string{"6.1.0-56-cloud-amd64", "6.12.9+deb12-cloud-amd64", "6.12.90+deb12.1-cloud-amd64"}},
	}
	for _, tc := range tests {
		got, err := tc.m.Resolve(fakeKernels)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: Resolve(%+v) = %v, %v, want %v", tc.name, tc.m, got, err, tc.want)
		}
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		name string
		m    Matrix
		l    KernelLister
		want []string
	}{
		{"missing release", Matrix{Releases: []string{"6.1.0-56-cloud-amd64", "6.1.0-99-cloud-amd64"}}, fakeKernels,
			[]string{"kernels.releases[1]: kernel 6.1.0-99-cloud-amd64 is not available; available cloud-amd64 kernels: " +
				"6.1.0-9-cloud-amd64, 6.1.0-10-cloud-amd64, 6.1.0-56-cloud-amd64, 6.12.9+deb12-cloud-amd64, 6.12.10+deb12-cloud-amd64, " +
				"6.12.90+deb12-cloud-amd64, 6.12.90+deb12.1-cloud-amd64"}},
		{"missing flavour", Matrix{Releases: []string{"6.1.0-56-arm64"}}, fakeKernels,
			[]string{"kernels.releases[0]: kernel 6.1.0-56-arm64 is not available; available arm64 kernels: none"}},
		{"empty selector", Matrix{Select: []Selector{{Series: "5.10", Flavor: "cloud-amd64", Newest: 1}}}, fakeKernels,
			[]string{"kernels.select[0]: newest 1 of 5.10 cloud-amd64: no such kernel is available; available cloud-amd64 kernels: 6.1.0-9-cloud-amd64"}},
		{"lister fails", Matrix{Releases: []string{"6.1.0-56-cloud-amd64"}},
			ListerFunc(func() ([]string, error) { return nil, errors.New("apt-cache exploded") }),
			[]string{"list available kernels: apt-cache exploded"}},
	}
	for _, tc := range tests {
		got, err := tc.m.Resolve(tc.l)
		if err == nil {
			t.Errorf("%s: Resolve(%+v) = %v, nil, want an error", tc.name, tc.m, got)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Resolve(%+v) error =\n%v\nwant it to contain %q", tc.name, tc.m, err, w)
			}
		}
	}
}

// TestResolveKernelsLocates checks that a recipe's resolve errors name the
// file, the line and the field.
func TestResolveKernelsLocates(t *testing.T) {
	p := writeRecipe(t, "r.yaml", validHead+"kernels:\n  releases:\n    - 6.1.0-56-cloud-amd64\n    - 6.1.0-99-cloud-amd64\n  select:\n    - {series: \"5.10\", flavor: cloud-amd64, newest: 2}\n")
	r, err := Load(p)
	if err != nil {
		t.Fatalf("Load(%s) = %v", p, err)
	}
	_, err = r.ResolveKernels(fakeKernels)
	for _, want := range []string{
		p + ":13: kernels.releases[1]: kernel 6.1.0-99-cloud-amd64 is not available",
		p + ":15: kernels.select[0]: newest 2 of 5.10 cloud-amd64: no such kernel",
	} {
		if err == nil || !hasLine(err.Error(), want, "") {
			t.Errorf("ResolveKernels() error =\n%v\nwant a line starting %q", err, want)
		}
	}
}

// aptSearchSample is real "apt-cache search --names-only" output (bookworm
// with backports), trimmed.
const aptSearchSample = `linux-headers-6.1.0-56-cloud-amd64 - Header files for Linux 6.1.0-56-cloud-amd64
linux-headers-6.1.0-56-common - Common header files for Linux 6.1.0-56
linux-headers-6.12-cloud-amd64 - Header files for Linux 6.12-cloud-amd64 (meta-package)
linux-headers-6.12.117+deb12-cloud-amd64 - Header files for Linux 6.12.117+deb12-cloud-amd64
linux-image-6.1.0-48-cloud-amd64 - Linux 6.1 for x86-64 cloud (signed)
linux-image-6.1.0-56-cloud-amd64 - Linux 6.1 for x86-64 cloud (signed)
linux-image-6.1.0-56-cloud-amd64-dbg - Debug symbols for linux-image-6.1.0-56-cloud-amd64
linux-image-6.1.0-56-cloud-amd64-unsigned - Linux 6.1 for x86-64 cloud
linux-image-6.1.0-56-amd64-signed-template - Template for signed linux-image packages for amd64
linux-image-6.12-cloud-amd64 - Linux 6.12 for x86-64 cloud (meta-package)
linux-image-6.12.117+deb12-cloud-amd64 - Linux 6.12.117+deb12 for x86-64 cloud (signed)
linux-image-6.12.117+deb12-cloud-amd64-unsigned - Linux 6.12.117+deb12 for x86-64 cloud
`

func TestParseAptKernels(t *testing.T) {
	got := parseAptKernels([]byte(aptSearchSample))
	want := []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"}
	if !slices.Equal(got, want) {
		t.Errorf("parseAptKernels(sample) = %v, want %v (6.1.0-48 has no headers)", got, want)
	}
}

// TestAptKernels asks the real apt archive.
func TestAptKernels(t *testing.T) {
	testenv.SkipShort(t, "asks Debian's archive (through the host's apt lists) which kernels it carries today")
	for _, prog := range []string{"apt-cache", "dpkg"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Fatalf("%s not found (%v): run on Debian with scripts/deps.sh", prog, err)
		}
	}
	apt := AptKernels()
	avail, err := apt.Available()
	if err != nil {
		t.Fatalf("AptKernels().Available() = %v (run scripts/deps.sh, then apt-get update)", err)
	}
	t.Logf("apt offers %d kernels with headers: %v", len(avail), avail)
	for _, want := range []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"} {
		if !slices.Contains(avail, want) {
			t.Errorf("AptKernels().Available() = %v, want it to include %s", avail, want)
		}
	}

	// The newest 6.1 cloud kernel, found with dpkg as the judge.
	var newest string
	n61 := 0
	for _, rel := range avail {
		if !strings.HasPrefix(rel, "6.1.") || !strings.HasSuffix(rel, "-cloud-amd64") {
			continue
		}
		n61++
		if newest == "" || exec.Command("dpkg", "--compare-versions", rel, "gt", newest).Run() == nil {
			newest = rel
		}
	}
	if n61 < 3 {
		t.Fatalf("apt offers %d 6.1 cloud kernels with headers, want at least 3: %v", n61, avail)
	}
	m := Matrix{Select: []Selector{{Series: "6.1", Flavor: "cloud-amd64", Newest: 3}}}
	got, err := m.Resolve(AptKernels())
	if err != nil {
		t.Fatalf("Resolve(newest 3 of 6.1 cloud) = %v", err)
	}
	t.Logf("newest 3 of 6.1 cloud-amd64: %v", got)
	if len(got) != 3 || got[2] != newest {
		t.Errorf("Resolve(newest 3 of 6.1 cloud) = %v, want 3 releases ending with %s", got, newest)
	}
	// Each one must really be buildable: its headers package exists.
	for _, rel := range got {
		if out, err := exec.Command("apt-cache", "show", "--no-all-versions", "linux-headers-"+rel).CombinedOutput(); err != nil || !strings.Contains(string(out), "Package: linux-headers-"+rel) {
			t.Errorf("apt-cache show linux-headers-%s: %v\n%s", rel, err, out)
		}
	}

	// The shipped recipes resolve against the real archive (one lister: it asks apt once).
	rs, err := LoadDir(recipesDir)
	if err != nil {
		t.Fatalf("LoadDir(%q): %v", recipesDir, err)
	}
	for _, r := range rs {
		got, err := r.ResolveKernels(apt)
		if err != nil || len(got) == 0 {
			t.Errorf("%s: ResolveKernels(apt) = %v, %v, want kernels", r.Name, got, err)
			continue
		}
		t.Logf("%s: %s", r.Name, strings.Join(got, " "))
		if r.Name == "nvidia-535-open" && !slices.Contains(got, "6.12.117+deb12-cloud-amd64") {
			t.Errorf("nvidia-535-open resolves to %v, want the 6.12.117+deb12-cloud-amd64 cell", got)
		}
	}
}
