package remote

import (
	"strings"
	"testing"
)

// TestFilterMatch: each field narrows the cells; Version goes through the
// rule given, exact without one.
func TestFilterMatch(t *testing.T) {
	prefix := func(want, version string) bool { return strings.HasPrefix(version, want+".") || version == want }
	id := Identity{Driver: "nvidia", Version: "550.54.14", Flavor: "open", Kernel: "6.1.0-1-amd64"}
	for _, tt := range []struct {
		name string
		f    Filter
		want bool
	}{
		{"empty", Filter{}, true},
		{"kernel", Filter{Kernels: []string{"6.12.0-1-amd64", "6.1.0-1-amd64"}}, true},
		{"other kernel", Filter{Kernels: []string{"6.12.0-1-amd64"}}, false},
		{"driver", Filter{Driver: "nvidia"}, true},
		{"other driver", Filter{Driver: "kpreload_edu"}, false},
		{"flavour", Filter{Flavor: "open"}, true},
		{"other flavour", Filter{Flavor: "proprietary"}, false},
		{"exact version, no rule", Filter{Version: "550.54.14"}, true},
		{"branch, no rule", Filter{Version: "550"}, false},
		{"branch, a rule", Filter{Version: "550", VersionRule: prefix}, true},
		{"exact, a rule", Filter{Version: "550.54.14", VersionRule: prefix}, true},
		{"other branch, a rule", Filter{Version: "535", VersionRule: prefix}, false},
		{"all fields", Filter{Kernels: []string{"6.1.0-1-amd64"}, Driver: "nvidia", Flavor: "open", Version: "550", VersionRule: prefix}, true},
	} {
		if got := tt.f.Match(id); got != tt.want {
			t.Errorf("%s: Filter%+v.Match(%v) = %v, want %v", tt.name, tt.f, id, got, tt.want)
		}
	}
}
