package install

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/builder/internal/sandbox/sandboxtest"
)

// TestRootProgramsSandboxed plants a hostile static program as the root's
// update-grub (and, without it, grub-mkconfig) and runs install, the
// postinst hook and the postrm hook on that root with the real UpdateGrub:
// the program runs each time, and neither its writes to host paths nor the
// chroot escape (chroot into a subdirectory, chdir("..") 64 times,
// chroot(".")) nor /proc/1/root put anything on the host.
func TestRootProgramsSandboxed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs the root's programs as kpreload does, as root: it needs root")
	}
	for _, prog := range []string{"update-grub", "grub-mkconfig"} {
		t.Run(prog, func(t *testing.T) {
			root, _ := linkRoot(t)
			os.Remove(filepath.Join(root, "usr/sbin/update-grub"))
			esc := sandboxtest.Plant(t, root, "usr/sbin/"+prog)
			var log bytes.Buffer
			o := Options{Root: root, RootFS: testRootFS(), Bootloader: GRUB, Log: &log}
			ctx := context.Background()
			for _, s := range []struct {
				name string
				run  func() error
			}{
				{"install", func() error { _, err := Install(ctx, o); return err }},
				{"postinst", func() error { _, err := KernelAdded(ctx, o, testKernel); return err }},
				{"postrm", func() error { _, err := KernelRemoved(ctx, o, testKernel); return err }},
			} {
				log.Reset()
				err := s.run()
				t.Logf("%s: %v\n%s", s.name, err, log.String())
				esc.Check(t, s.name)
			}
		})
	}
}
