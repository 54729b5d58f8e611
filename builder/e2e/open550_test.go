package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestOpen550BuildAndBoot is the proof of the open GPU kernel modules of
// the 550 branch (the H100/H200 driver): nvidia-550-open, its source read
// from trixie through kpreload's private apt configuration and patched for
// the kernel's four-argument pci_resize_resource, is built by the real dkms
// for 6.1.0-56 (into the persistent store: see nvidiaStore), staged into an
// image root (cache, userspace, GSP firmware), and booted in QEMU with
// kpreload.load=nvidia: the kernel runs nvidia.ko's init, which finds no
// GPU (NVRM: No NVIDIA GPU found., ENODEV), and every firmware file the
// module declares (nvidia/550.163.01/gsp_*.bin) is in the image's
// /lib/firmware, where the kernel looks.
func TestOpen550BuildAndBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("a real dkms build of the open NVIDIA modules and a QEMU boot: skipped with -short")
	}
	kernelRoot(t, k61)
	kp := staticBinary(t, "kpreload")
	initBin := staticBinary(t, "kpreload-init")
	rootInit := staticBinary(t, "kpreload-rootinit")

	code, cells := kpreloadBuild(t, kp, "--cache", nvidiaStore(), "nvidia-550-open:"+k61)
	c := cells["nvidia-550-open/"+k61]
	if code != 0 || (c.State != matrix.StateOK && c.State != matrix.StateCached) {
		t.Fatalf("nvidia-550-open/%s = exit %d, %s %q (log %s); want ok or cached", k61, code, c.State, c.FirstError, c.Log)
	}
	if c.Key["patches_sha256"] == "" || c.Key["source_package"] != "nvidia-open-kernel-dkms=550.163.01-2" || c.Key["flavor"] != "open" {
		t.Errorf("nvidia-550-open/%s key %v, want the trixie source, flavour open and the patches' digest", k61, c.Key)
	}

	// Stage it as an image does: cache subset, userspace, firmware.
	r, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", "nvidia-550-open.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	staged, err := stage.Stage(context.Background(), stage.Options{
		Kernels: []string{k61}, Recipes: []*recipe.Recipe{r}, CacheDir: nvidiaStore(), DownloadDir: downloads(),
		KpreloadBinary: kp, InitBinary: initBin, NoInitramfs: true,
	}, root)
	if err != nil {
		t.Fatalf("stage: %v", err)
	}
	if len(staged.Drivers) != 1 || staged.Drivers[0].SetID != c.SetID {
		t.Fatalf("staged drivers %+v, want set %.12s", staged.Drivers, c.SetID)
	}
	if _, err := os.Stat(filepath.Join(root, image.ImageDriversDir, "550.163.01", "usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1")); err != nil {
		t.Errorf("the 550.163.01 userspace lacks libcuda.so.1: %v", err)
	}
	st, err := store.Open(nvidiaStore())
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Get(c.SetID)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, mod := range m.Modules {
		if mod.Name != "nvidia" {
			continue
		}
		info, err := modinfo.ReadFile(st.ObjectPath(mod.SHA256))
		if err != nil {
			t.Fatal(err)
		}
		declared = info.Firmware
	}
	if len(declared) == 0 {
		t.Fatalf("nvidia.ko of set %.12s declares no firmware; the open module should declare its GSP firmware", c.SetID)
	}
	for _, fw := range declared {
		if !strings.HasPrefix(fw, "nvidia/550.163.01/gsp_") {
			t.Errorf("nvidia.ko declares firmware %s, want nvidia/550.163.01/gsp_*", fw)
		}
		if fi, err := os.Stat(filepath.Join(root, "lib", "firmware", fw)); err != nil || fi.Size() < 1<<20 {
			t.Errorf("declared firmware %s is not in the image's /lib/firmware (%v)", fw, err)
		}
	}
	t.Logf("nvidia.ko declares %v; all in the staged /lib/firmware", declared)

	// Boot with the staged cache and firmware on the root disk.
	dir := t.TempDir()
	initrd := filepath.Join(dir, "initrd.img")
	if _, err := assemble.WriteFile(assemble.Options{
		Kernel: k61, ModulesDir: filepath.Join(kernelRoot(t, k61), "lib", "modules", k61), Init: initBin,
	}, initrd); err != nil {
		t.Fatalf("initramfs: %v", err)
	}
	res := boot(t, k61, dir, initrd, rootInit, filepath.Join(root, image.ImageCacheDir), nil, "kpreload.load=nvidia")
	for _, m := range res.Report.Modules {
		if m.Name == "nvidia" && m.Result == "refused" {
			t.Errorf("nvidia.ko was refused before the kernel saw it: %s", m.Reason)
		}
	}
	nv, ok := loaded(res.Report, "nvidia")
	if !ok {
		t.Fatalf("the report has no nvidia module: %+v", res.Report.Modules)
	}
	if nv.Result != "failed" || nv.Errno != "ENODEV" || nv.Set != c.SetID {
		t.Errorf("nvidia = %+v, want failed with ENODEV from set %.12s", nv, c.SetID)
	}
	con := console(t, res)
	if !strings.Contains(con, "NVRM: No NVIDIA GPU found.") {
		t.Errorf("console lacks NVRM: No NVIDIA GPU found.:\n%s", lastLines(con, 30))
	}
	for _, line := range strings.Split(con, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "[") && strings.Contains(line, "NVRM") {
			t.Logf("console: %s", strings.TrimSpace(line))
		}
	}
}
