package selection

import "testing"

// TestMatchVersion: the instance YAML's version rule, latest, exact, a
// branch or a dotted prefix.
func TestMatchVersion(t *testing.T) {
	for _, tt := range []struct {
		want, version string
		match         bool
	}{
		{"latest", "550.54.14", true},
		{"550.54.14", "550.54.14", true},
		{"550", "550.54.14", true},
		{"550.54", "550.54.14", true},
		{"550", "550", true},
		{"2", "2.0.0", true},
		{"55", "550.54.14", false},
		{"535", "550.54.14", false},
		{"550.54.14", "550.54.15", false},
		{"550.54.14", "550.54", false},
		{"550.x", "550.54.14", false},
	} {
		if got := MatchVersion(tt.want, tt.version); got != tt.match {
			t.Errorf("MatchVersion(%q, %q) = %v, want %v", tt.want, tt.version, got, tt.match)
		}
	}
}
