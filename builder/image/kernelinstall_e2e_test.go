package image

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
)

// TestKernelInstallPlugin: in a root made like a kpreload image (the shared
// image's mmdebstrap root, ciRootfsOptions, with the kernel package, kpreload
// staged, systemd-boot's ESP), a kernel handed to systemd's real
// kernel-install (Debian's systemd-boot package does that, as do dracut and
// ukify users) gets its kpreload initramfs and boot entry from kpreload's
// kernel-install plugin, after kernel-install's own entry, and stays the
// default. kernel-install runs in the root (chroot, with its own /proc).
func TestKernelInstallPlugin(t *testing.T) {
	ctx, kpreload, initBin, progress := e2eStart(t, "mmdebstrap (or the day's rootfs tarball) and a chroot", 20*time.Minute)
	cache, recipes := testCache(t)
	// The shared image's root (ciRootfsOptions): one mmdebstrap tarball a day for both.
	o := ciRootfsOptions()
	o.Name, o.Stage.Recipes, o.Stage.CacheDir = "ki", recipes, cache
	o = o.Resolve()
	work := t.TempDir()
	tarball, _, err := rootfs.Tarball(ctx, DefaultTools().forRootfs(), rootfsSpec(o, time.Now().UTC().Format("2006-01-02")), o.Rootfs.CacheDir, work, progress)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(work, "root")
	if err := rootfs.Unpack(ctx, DefaultTools().Mmdebstrap, tarball, root); err != nil {
		t.Fatal(err)
	}
	cmdline := "root=UUID=0b0e0f0a-1111-4222-8333-444444444444 rw console=ttyS0"
	if _, err := stage.Stage(ctx, stage.Options{Kernels: o.Kernels, Recipes: recipes, CacheDir: cache,
		KpreloadBinary: kpreload, InitBinary: initBin, Cmdline: cmdline, Progress: progress}, root); err != nil {
		t.Fatal(err)
	}
	esp := filepath.Join(root, install.ESPMount)
	if _, err := bootloader.SystemdBootFiles(ctx, esp, root, o.Kernels, cmdline); err != nil {
		t.Fatal(err)
	}
	if !install.UsesKernelInstall(root) {
		t.Fatalf("the root has no %s", install.KernelInstallBinary)
	}
	if _, err := os.Stat(filepath.Join(root, install.KernelInstallPlugin)); err != nil {
		t.Fatalf("kpreload's kernel-install plugin was not installed: %v", err)
	}
	// kernel-install names its entries after the machine (an image has none).
	const machineID = "4c2d1f8e0b7a4e6f9c3d2b1a0f9e8d7c"
	if err := os.WriteFile(filepath.Join(root, "etc/machine-id"), []byte(machineID+"\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	// bootctl install makes the entry-token directory, which tells
	// kernel-install to write Boot Loader Specification entries (layout bls).
	if err := os.MkdirAll(filepath.Join(esp, machineID), 0o755); err != nil {
		t.Fatal(err)
	}
	// What the plugin must make again: the kernel's kpreload entry and initramfs.
	entry := filepath.Join(esp, install.EntryPath(testKernel))
	initrd := filepath.Join(root, install.InitramfsPath(testKernel))
	for _, p := range []string{entry, initrd, filepath.Join(esp, install.ESPInitrdPath(testKernel))} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}

	script := "mount -t proc proc " + root + "/proc && chroot " + root +
		" kernel-install --verbose add " + testKernel + " /boot/vmlinuz-" + testKernel
	out, err := exec.CommandContext(ctx, "unshare", "--mount", "--fork", "sh", "-c", script).CombinedOutput()
	t.Logf("kernel-install add:\n%s", out)
	if err != nil {
		t.Fatalf("kernel-install add: %v", err)
	}
	if !strings.Contains(string(out), "95-kpreload.install") {
		t.Errorf("kernel-install's output does not show kpreload's plugin running")
	}
	// kernel-install's own entry is a fallback: kpreload's boots are
	// counted, and its command line says /init may fall back.
	counted := filepath.Join(esp, install.ESPEntriesDir, install.CountedEntryName(testKernel))
	b, err := os.ReadFile(counted)
	if want := install.LoaderEntry(testKernel, cmdline+" "+install.FallbackFlag); err != nil || string(b) != want {
		t.Errorf("kpreload entry after kernel-install add: %q, %v; want\n%s", b, err, want)
	}
	if fi, err := os.Stat(initrd); err != nil || fi.Size() < 1<<20 {
		t.Errorf("kpreload initramfs after kernel-install add: %v", err)
	}
	own, _ := filepath.Glob(filepath.Join(esp, "loader/entries", machineID+"-"+testKernel+"*.conf"))
	if len(own) != 1 {
		t.Errorf("kernel-install's own entry: %v, want one beside kpreload's", own)
	}
	if conf, _ := os.ReadFile(filepath.Join(esp, install.ESPLoaderConf)); !strings.Contains(string(conf), "default "+install.LoaderDefault(testKernel, true)+"\n") {
		t.Errorf("loader.conf %q: want kpreload's entry the default", conf)
	}
}
