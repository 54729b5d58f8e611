package testenv

import "testing"

// SkipShort skips t under -short (the offline unit tier, `make unit`), saying
// why the test is outside it: it needs a download, an unpacked kernel, a VM or
// a tool's long run. Every test that needs one of those calls it (KernelTree
// does), so that `go test -short ./...` passes on a fresh clone with no network
// and no cache; `make test` runs them all.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("not in the unit tier (-short): %s", why)
	}
}

// KernelTreeOrSkipShort is KernelTree (which skips under -short itself).
func KernelTreeOrSkipShort(t testing.TB, kver string) string {
	t.Helper()
	return KernelTree(t, kver)
}
