package recipe

import (
	"errors"
	"os/exec"
	"testing"
)

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"6.1.0-9", "6.1.0-10", -1},
		{"6.1.0-10", "6.1.0-9", 1},
		{"6.12.9+deb12", "6.12.10+deb12", -1},
		{"6.12.90+deb12", "6.12.90+deb12.1", -1},
		{"6.1.0-56", "6.12.43+deb12", -1},
		{"1.0~rc1", "1.0", -1},
		{"1.0~", "1.0", -1},
		{"1.0~~", "1.0~", -1},
		{"1.0", "1.0+b1", -1},
		{"1.0", "1.0.1", -1},
		{"1.0a", "1.0", 1},
		{"1.0a", "1.0+", -1}, // letters sort before other characters
		{"1.0", "1.00", 0},
		{"0001", "1", 0},
		{"1:0.1", "2.0", 1},
		{"0:2.0", "2.0", 0},
		{"1.0-1", "1.0-1.1", -1},
		{"1.0-1", "1.0", 1},
		{"535.216.03-3~deb12u1", "535.216.03-3", -1},
		{"470.256.02-1~deb12u1", "470.256.02-5~bpo12+1", -1},
		{"535.261.03-1", "535.309.01-0+deb12u1", -1},
		{"99999999999999999999", "100000000000000000000", -1},
		{"a", "b", -1},
		{"", "", 0},
	}
	for _, tc := range tests {
		if got := CompareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := CompareVersions(tc.b, tc.a); got != -tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
	}
}

// TestCompareVersionsDpkg checks CompareVersions against the real
// "dpkg --compare-versions" on every pair of a set of versions.
func TestCompareVersionsDpkg(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Fatalf("dpkg not found (%v): run on Debian (scripts/deps.sh)", err)
	}
	versions := []string{
		"6.1.0-9", "6.1.0-10", "6.1.0-56", "6.1.0-56-cloud-amd64", "6.1.0-9-cloud-amd64",
		"6.12.9+deb12", "6.12.10+deb12", "6.12.90+deb12", "6.12.90+deb12.1", "6.12.117+deb12",
		"1.0~rc1", "1.0", "1.0+b1", "1.0a", "1.00", "1:0.1", "1.0-1.1", "1.0.0-1~",
		"535.216.03-3~deb12u1", "535.261.03-1", "535.309.01-0+deb12u1", "470.256.02-5~bpo12+1",
	}
	dpkg := func(a, op, b string) bool {
		err := exec.Command("dpkg", "--compare-versions", a, op, b).Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("dpkg --compare-versions %s %s %s: %v", a, op, b, err)
		}
		return err == nil
	}
	for i, a := range versions {
		for _, b := range versions[i+1:] {
			want := 0
			if dpkg(a, "lt", b) {
				want = -1
			} else if dpkg(a, "gt", b) {
				want = 1
			}
			if got := CompareVersions(a, b); got != want {
				t.Errorf("CompareVersions(%q, %q) = %d, want %d (dpkg --compare-versions)", a, b, got, want)
			}
		}
	}
}

func TestParseRelease(t *testing.T) {
	tests := []struct {
		in      string
		want    Release
		wantErr bool
	}{
		{"6.1.0-56-cloud-amd64", Release{6, 1, "6.1.0-56", "cloud-amd64"}, false},
		{"6.12.117+deb12-cloud-amd64", Release{6, 12, "6.12.117+deb12", "cloud-amd64"}, false},
		{"6.12.90+deb12.1-cloud-amd64", Release{6, 12, "6.12.90+deb12.1", "cloud-amd64"}, false},
		{"6.1.0-56-amd64", Release{6, 1, "6.1.0-56", "amd64"}, false},
		{"6.1.0-56-rt-amd64", Release{6, 1, "6.1.0-56", "rt-amd64"}, false},
		{"6.12-cloud-amd64", Release{}, true},
		{"6.1.0-56", Release{}, true},
		{"cloud-amd64", Release{}, true},
		{"6.1.0-56-cloud-amd64 ", Release{}, true},
		{"", Release{}, true},
	}
	for _, tc := range tests {
		got, err := ParseRelease(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseRelease(%q) = %+v, %v, want %+v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("ParseRelease(%q).String() = %q", tc.in, got.String())
		}
	}
	if s := (Release{Major: 6, Minor: 12}).Series(); s != "6.12" {
		t.Errorf("Series() = %q, want 6.12", s)
	}
}

func TestCompareReleases(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"6.1.0-9-cloud-amd64", "6.1.0-10-cloud-amd64", -1},
		{"6.12.9+deb12-cloud-amd64", "6.12.10+deb12-cloud-amd64", -1},
		{"6.12.90+deb12-cloud-amd64", "6.12.90+deb12.1-cloud-amd64", -1},
		{"6.1.0-56-cloud-amd64", "6.12.43+deb12-cloud-amd64", -1},
		{"6.1.0-56-amd64", "6.1.0-56-cloud-amd64", -1},
		{"6.1.0-56-cloud-amd64", "6.1.0-56-cloud-amd64", 0},
	}
	for _, tc := range tests {
		if got := CompareReleases(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareReleases(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := CompareReleases(tc.b, tc.a); got != -tc.want {
			t.Errorf("CompareReleases(%q, %q) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
	}
}
