package install

import (
	"slices"
	"testing"
)

// TestDriverVersions: each driver version once, in the order it first
// appears, with the flavours of its sets; no flavour, no parentheses.
func TestDriverVersions(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []Set
		want []string
	}{
		{"none", nil, []string{}},
		{"one", []Set{{Driver: "kpreload-edu", Version: "1.0.0", Flavor: "open"}}, []string{"kpreload-edu 1.0.0 (open)"}},
		{"both flavours of a version", []Set{
			{Driver: "nvidia", Version: "550.163.01", Flavor: "open"}, {Driver: "nvidia", Version: "535.261.03", Flavor: "proprietary"},
			{Driver: "nvidia", Version: "550.163.01", Flavor: "proprietary"},
		}, []string{"nvidia 550.163.01 (open, proprietary)", "nvidia 535.261.03 (proprietary)"}},
		{"a flavour twice", []Set{{Driver: "nvidia", Version: "550", Flavor: "open", ID: "a"}, {Driver: "nvidia", Version: "550", Flavor: "open", ID: "b"}}, []string{"nvidia 550 (open)"}},
		{"no flavour", []Set{{Driver: "x", Version: "1"}}, []string{"x 1"}},
		{"two drivers, one version", []Set{{Driver: "a", Version: "1", Flavor: "open"}, {Driver: "b", Version: "1", Flavor: "open"}}, []string{"a 1 (open)", "b 1 (open)"}},
	} {
		if got := driverVersions(tc.sets); !slices.Equal(got, tc.want) {
			t.Errorf("%s: driverVersions = %q, want %q", tc.name, got, tc.want)
		}
	}
}
