package adopt

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/initramfs/rootcheck"
	"github.com/kpreload/kpreload/testsupport/dibtest"
	"github.com/kpreload/kpreload/testsupport/testenv"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

// TestRealGrubRoot runs install --stage's steps on a real Debian 12 root
// (mmdebstrap, GRUB's packages) in a filesystem image mounted through a
// loop device, as --image mounts one: the root's own ldconfig and
// update-grub run in their sandbox, grub-probe there still examines the
// loop device (kpreload's entry boots root=UUID= of the image's filesystem),
// its complaint about the image file is noted as harmless as before, and
// grub.cfg's default entry is kpreload's. The kernel is a stand-in (GRUB
// only lists it); the image is made once per machine under $KPRELOAD_CACHE.
func TestRealGrubRoot(t *testing.T) {
	testenv.SkipShort(t, "mmdebstrap of a Debian root with GRUB (a download), once per machine")
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (mmdebstrap, loop mounts, the sandbox)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 20*time.Minute))
	defer cancel()
	cached := dibtest.GrubRoot(ctx, t)
	img := filepath.Join(t.TempDir(), "debian.raw")
	dibtest.Copy(t, cached, img)
	root, unmount, err := Mount(ctx, img, ImageOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unmount()
	// A stand-in kernel (ext4 built in) with the distribution's initramfs,
	// and the kpreload initramfs SkipInitramfs keeps; a text console, as
	// diskimage-builder's and vmdb2's images have (with GRUB's graphical
	// default, 00_header asks grub-probe for the font's drive, which a
	// loop-mounted image's answers through the image file, a host path:
	// update-grub fails so in a plain chroot too).
	treetest.Write(t, root, map[string]string{
		"etc/default/grub":           "GRUB_DEFAULT=0\nGRUB_TIMEOUT=0\nGRUB_TERMINAL=console\nGRUB_CMDLINE_LINUX_DEFAULT=\"console=ttyS0\"\n",
		"boot/vmlinuz-" + testKernel: "kernel", "boot/initrd.img-" + testKernel: "distribution initramfs",
		"lib/modules/" + testKernel + "/modules.dep":             "",
		"lib/modules/" + testKernel + "/modules.builtin.modinfo": "ext4.alias=fs-ext4\x00crc32c_generic.alias=crypto-crc32c\x00",
		install.InitramfsPath(testKernel):                        "kpreload initramfs",
	})
	os.Remove(filepath.Join(root, "etc/ld.so.cache"))
	var log bytes.Buffer
	ext4 := rootcheck.Root{FSType: "ext4"}
	// The real kpreload: GRUB's 09_kpreload runs it (kernel-hook grub-entries).
	st := stageOptions(t)
	st.KpreloadBinary = testenv.GoBuildStatic(t, t.TempDir(), "kpreload", "./cmd/kpreload")
	o := Options{Stage: st, Runner: runner.Default, Log: &log, Install: install.Options{RootFS: &ext4, SkipInitramfs: true}}
	res, err := Root(ctx, root, o)
	t.Logf("install --stage's steps:\n%s", log.String())
	if err != nil {
		t.Fatalf("Root: %v", err)
	}
	if res.Install.Default != testKernel || res.Install.Bootloader != install.GRUB {
		t.Errorf("install: %+v, want GRUB booting %s", res.Install, testKernel)
	}
	// grub-probe's harmless complaint about the image file is still noted.
	if !strings.Contains(log.String(), install.GrubProbeNoiseNote) {
		t.Errorf("install's output lacks the note on grub-probe's complaint")
	}
	if _, err := os.Stat(filepath.Join(root, "etc/ld.so.cache")); err != nil {
		t.Errorf("the root's ldconfig wrote no linker cache: %v", err)
	}
	cfg, err := os.ReadFile(filepath.Join(root, install.GrubConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := install.CheckGrubConfig(root, testKernel); err != nil {
		t.Error(err)
	}
	if !strings.Contains(string(cfg), "linux\t/boot/vmlinuz-"+testKernel+" root=UUID="+dibtest.GrubRootUUID+" ro") {
		t.Errorf("grub.cfg does not find the root by its filesystem's UUID %s (grub-probe could not examine the loop device):\n%s", dibtest.GrubRootUUID, cfg)
	}
}
