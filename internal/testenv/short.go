package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// KernelTreeOrSkipShort is KernelTree, except that under -short a kernel that
// is not unpacked yet skips the test, saying how to fetch it, instead of
// downloading it; a full run fetches it, or fails with the script's output.
func KernelTreeOrSkipShort(t testing.TB, kver string) string {
	t.Helper()
	if testing.Short() {
		if _, err := os.Stat(filepath.Join(CacheRoot(), "kernels", kver, ".complete")); err != nil {
			t.Skipf("kernel %s is not unpacked and -short does not download: run scripts/kernels.sh %s (scripts/deps.sh does)", kver, kver)
		}
	}
	return KernelTree(t, kver)
}
