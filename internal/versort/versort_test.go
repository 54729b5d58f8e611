package versort

import "testing"

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"6.12.117+deb12-cloud-amd64", "6.1.0-56-cloud-amd64", 1},
		{"6.1.0-56-cloud-amd64", "6.1.0-9-cloud-amd64", 1},
		{"6.1.0-56-cloud-amd64", "6.1.0-56-cloud-amd64", 0},
		{"6.12.118+deb13-cloud-amd64", "6.12.117+deb12-cloud-amd64", 1},
		{"6.1~rc1", "6.1", -1},
		{"6.12.10+deb12-cloud-amd64", "6.12.9+deb12-cloud-amd64", 1},
		{"6.1.0-056", "6.1.0-56", 0},
	} {
		got := Compare(c.a, c.b)
		if (got > 0) != (c.want > 0) || (got < 0) != (c.want < 0) {
			t.Errorf("Compare(%q, %q) = %d, want sign %d", c.a, c.b, got, c.want)
		}
	}
}
