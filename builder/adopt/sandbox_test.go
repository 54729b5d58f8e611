package adopt

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/internal/sandbox/sandboxtest"
)

// TestLdconfigSandboxed plants a hostile static program as the root's
// ldconfig, which install --stage runs: it runs, and neither its writes to
// host paths nor the chroot escape put anything on the host.
func TestLdconfigSandboxed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs the root's ldconfig as kpreload does, as root: it needs root")
	}
	root := distroRoot(t)
	esc := sandboxtest.Plant(t, root, "usr/sbin/ldconfig")
	var log bytes.Buffer
	if err := ldconfig(context.Background(), runner.Default, root, &log); err != nil {
		t.Errorf("ldconfig: %v", err)
	}
	t.Logf("ldconfig's output:\n%s", log.String())
	esc.Check(t, "ldconfig")
}
