package recipe

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/kpreload/kpreload/kmodcache/names"
)

// CompareVersions compares two Debian version strings as dpkg does
// ("dpkg --compare-versions"): epoch numerically, then the upstream version
// and the revision with dpkg's ordering, where digit runs compare as
// numbers, letters sort before other characters and "~" sorts before
// everything, even the end. It returns -1, 0 or +1.
func CompareVersions(a, b string) int {
	ea, ua, ra := splitVersion(a)
	eb, ub, rb := splitVersion(b)
	if c := compareDigits(ea, eb); c != 0 {
		return c
	}
	if c := verrevcmp(ua, ub); c != 0 {
		return c
	}
	return verrevcmp(ra, rb)
}

// splitVersion splits [epoch:]upstream[-revision]; a missing epoch is "0".
func splitVersion(v string) (epoch, upstream, revision string) {
	epoch = "0"
	if i := strings.IndexByte(v, ':'); i >= 0 && isDigits(v[:i]) {
		epoch, v = v[:i], v[i+1:]
	}
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		return epoch, v[:i], v[i+1:]
	}
	return epoch, v, ""
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }

// compareDigits compares two runs of decimal digits as numbers of any length.
func compareDigits(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		return sign(len(a) - len(b))
	}
	return strings.Compare(a, b)
}

// order is dpkg's weight of one character in a non-digit run; 0 stands for
// the end of the string (and for a digit, which ends the run).
func order(c byte) int {
	switch {
	case c == 0 || isDigit(c):
		return 0
	case isLetter(c):
		return int(c)
	case c == '~':
		return -1
	}
	return int(c) + 256
}

// verrevcmp is dpkg's comparison of an upstream version or a revision.
func verrevcmp(a, b string) int {
	at := func(s string, i int) byte {
		if i < len(s) {
			return s[i]
		}
		return 0
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		for (i < len(a) && !isDigit(a[i])) || (j < len(b) && !isDigit(b[j])) {
			ac, bc := order(at(a, i)), order(at(b, j))
			if ac != bc {
				return sign(ac - bc)
			}
			i++
			j++
		}
		si := i
		for i < len(a) && isDigit(a[i]) {
			i++
		}
		sj := j
		for j < len(b) && isDigit(b[j]) {
			j++
		}
		if c := compareDigits(a[si:i], b[sj:j]); c != 0 {
			return c
		}
	}
	return 0
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// Release is a Debian kernel release (uname -r), such as
// "6.1.0-56-cloud-amd64" or "6.12.117+deb12-cloud-amd64".
type Release struct {
	// Major and Minor are the kernel series, 6 and 1 for 6.1.0-56-cloud-amd64.
	Major, Minor int
	// Version is everything before the flavour: "6.1.0-56", "6.12.117+deb12".
	Version string
	// Flavor is the kernel flavour: "cloud-amd64", "amd64", "rt-amd64".
	Flavor string
}

// Series is the release's major.minor, such as "6.12".
func (r Release) Series() string { return fmt.Sprintf("%d.%d", r.Major, r.Minor) }

// String returns the release as uname -r prints it.
func (r Release) String() string { return r.Version + "-" + r.Flavor }

// releaseRE matches Debian kernel releases: the upstream version with an
// optional ABI number (6.1.0-56) or backports suffix (6.12.117+deb12,
// 6.12.90+deb12.1), then a flavour that starts with a letter.
var releaseRE = regexp.MustCompile(`^(([0-9]+)\.([0-9]+)\.[0-9]+(?:-[0-9]+)?(?:\+[0-9A-Za-z.]+)?)-([a-z][a-z0-9]*(?:-[a-z0-9]+)*)$`)

// ParseRelease parses a Debian kernel release such as "6.1.0-56-cloud-amd64";
// a release is a name (kmodcache/names) first.
func ParseRelease(s string) (Release, error) {
	if err := names.Check("kernel release", s); err != nil {
		return Release{}, err
	}
	m := releaseRE.FindStringSubmatch(s)
	if m == nil {
		return Release{}, fmt.Errorf("%q is not a Debian kernel release such as 6.1.0-56-cloud-amd64 or 6.12.117+deb12-cloud-amd64", s)
	}
	major, err1 := strconv.Atoi(m[2])
	minor, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil {
		return Release{}, fmt.Errorf("%q: kernel series %s.%s is out of range", s, m[2], m[3])
	}
	return Release{Major: major, Minor: minor, Version: m[1], Flavor: m[4]}, nil
}

// CompareReleases orders kernel releases as dpkg orders their versions
// (6.1.0-9 < 6.1.0-10, 6.12.9+deb12 < 6.12.10+deb12 < 6.12.10+deb12.1),
// breaking ties by flavour. Strings that are not releases compare as
// whole Debian versions. It returns -1, 0 or +1.
func CompareReleases(a, b string) int {
	ra, errA := ParseRelease(a)
	rb, errB := ParseRelease(b)
	if errA != nil || errB != nil {
		return CompareVersions(a, b)
	}
	if c := CompareVersions(ra.Version, rb.Version); c != 0 {
		return c
	}
	return strings.Compare(ra.Flavor, rb.Flavor)
}
