package modalias

import (
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestBuiltinProvides checks built-in names and aliases on real trees: the
// cloud kernels build crc32c and ext4 in, the generic kernel builds neither
// in, and both build sha256 in.
func TestBuiltinProvides(t *testing.T) {
	cases := []struct {
		kver, lookup string
		want         bool
	}{
		{"6.1.0-56-cloud-amd64", "crypto-crc32c", true},
		{"6.1.0-56-cloud-amd64", "fs-ext4", true},
		{"6.1.0-56-cloud-amd64", "ext4", true},
		{"6.1.0-56-cloud-amd64", "fs-xfs", false},
		{"6.1.0-56-cloud-amd64", "xfs", false},
		{"6.1.0-56-amd64", "crypto-crc32c", false},
		{"6.1.0-56-amd64", "fs-ext4", false},
		{"6.1.0-56-amd64", "sha256", true},
		{"6.1.0-56-amd64", "xxhash64", false},
		{"6.1.0-56-amd64", "[unbalanced", false},
	}
	trees := map[string]*Tree{}
	for _, c := range cases {
		tr := trees[c.kver]
		if tr == nil {
			tr = loadKernelTree(t, realTree(t, c.kver))
			trees[c.kver] = tr
		}
		if got := tr.BuiltinProvides(c.lookup); got != c.want {
			t.Errorf("kernel %s: BuiltinProvides(%q) = %v, want %v", c.kver, c.lookup, got, c.want)
		}
	}
}

// realTree is the unpacked kernel kver (testsupport/testenv).
func realTree(t *testing.T, kver string) kernelTree {
	t.Helper()
	return kernelTree{root: testenv.KernelTreeOrSkipShort(t, kver), kver: kver}
}
