//go:build !cgo

package k8sconfig

import "testing"

// TestNeedsCgo fails a build without cgo: this package's tests read every
// written file back with mig-parted's own types, whose go-nvml dependency
// needs cgo. `make test` and `make unit` run them with CGO_ENABLED=1.
func TestNeedsCgo(t *testing.T) {
	t.Fatal("gpu/k8sconfig's tests decode through mig-parted, which imports go-nvml (cgo): run them with CGO_ENABLED=1")
}
