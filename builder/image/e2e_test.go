package image

// Real end-to-end tests: the test driver built by the real dkms into a module
// cache, a Debian bookworm image made by mmdebstrap from the archive, and QEMU
// (TCG) boot of its qcow2 through OVMF and systemd-boot with -device edu.
// A cold build takes a few minutes (mmdebstrap); -short skips them.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/testsupport/boottest"
	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// testCache returns the module cache of the test run with the test driver
// 1.0.0 built for testKernel by the real dkms, and its recipe alone: the cache
// is bothVersionsCache's, and an image takes the cells of the recipes it is
// given (TestStageDirectory checks that its staged cache holds the one set).
func testCache(t *testing.T) (string, []*recipe.Recipe) {
	t.Helper()
	cache, recipes := bothVersionsCache(t)
	return cache, recipes[:1]
}

var (
	bothOnce    sync.Once
	bothDir     string
	bothErr     error
	bothRecipes []*recipe.Recipe
)

// bothVersionsCache builds the test driver's versions 1.0.0 and 2.0.0
// (recipes/testdriver.yaml, testdriver-2.yaml) for testKernel with the real
// dkms into a module cache of the test run, once: every image test of the
// package reads it (testCache gives the tests of one version 1.0.0's recipe).
func bothVersionsCache(t *testing.T) (string, []*recipe.Recipe) {
	t.Helper()
	bothOnce.Do(func() {
		for _, name := range []string{"testdriver.yaml", "testdriver-2.yaml"} {
			r, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", name))
			if err != nil {
				bothErr = err
				return
			}
			bothRecipes = append(bothRecipes, r)
		}
		if bothDir, bothErr = os.MkdirTemp("", "kpreload-image-cache2-"); bothErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 10*time.Minute))
		defer cancel()
		start := time.Now()
		_, bothErr = matrix.Run(ctx, matrix.Options{Recipes: bothRecipes, Kernels: []string{testKernel}, CacheDir: bothDir})
		t.Logf("test driver 1.0.0 and 2.0.0 built for %s in %s (once for the package's tests)", testKernel, time.Since(start).Round(100*time.Millisecond))
	})
	if bothErr != nil {
		t.Fatalf("build the test driver 1.0.0 and 2.0.0 into a cache: %v", bothErr)
	}
	return bothDir, bothRecipes
}

// TestStageDirectory stages into an empty directory, as the Packer provisioner
// does for another builder's image: the kernel's modules come from the unpacked
// kernel, nothing assumes the directory is the image.
func TestStageDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("real dkms build; -short")
	}
	testenv.KernelTree(t, testKernel)
	cache, recipes := testCache(t)
	kpreload, initBin := binaries(t)
	root := t.TempDir()
	instance := filepath.Join(t.TempDir(), "instance.yaml")
	if err := os.WriteFile(instance, []byte("driver: kpreload-edu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	res, err := stage.Stage(context.Background(), stage.Options{
		Kernels: []string{testKernel}, Recipes: recipes, CacheDir: cache,
		KpreloadBinary: kpreload, InitBinary: initBin, Instance: instance,
		Progress: func(m string) { msgs = append(msgs, m) },
	}, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Drivers) != 1 || res.Drivers[0].Driver != "kpreload-edu" || res.Drivers[0].Kernel != testKernel || len(res.Drivers[0].CacheKey) == 0 {
		t.Errorf("drivers = %+v, want the kpreload-edu set for %s with its cache key", res.Drivers, testKernel)
	}
	for _, p := range []string{ImageKpreload, ImageInit, ImageInstance, ImagePostinstHook, ImagePostrmHook,
		"etc/ld.so.conf.d/kpreload.conf", ImageInitramfsDir + "/initrd.img-" + testKernel} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("staged tree lacks /%s: %v", p, err)
		}
	}
	// The staged cache is a valid store whose boot index holds exactly the set.
	st, err := store.Open(filepath.Join(root, ImageCacheDir))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := st.Index(testKernel)
	if err != nil || len(ix.Sets) != 1 || ix.Sets[0].ID != res.Drivers[0].SetID {
		t.Errorf("staged boot index = %+v (err %v), want the one set %s", ix, err, res.Drivers[0].SetID)
	}
	if problems, err := st.Verify(context.Background()); err != nil || len(problems) > 0 {
		t.Errorf("staged cache does not verify: %v %+v", err, problems)
	}
	if len(res.Initramfs) != 1 || res.Initramfs[0].Size == 0 {
		t.Errorf("initramfs = %+v, want one for %s", res.Initramfs, testKernel)
	}
	if len(msgs) == 0 {
		t.Error("no progress messages")
	}
	files := testenv.InitramfsFiles(t, filepath.Join(root, ImageInitramfsDir, "initrd.img-"+testKernel))
	if strings.Contains(files["lib/modules/"+testKernel+"/kpreload.index.json"], `"complete":true`) {
		t.Error("a default image's initramfs index is marked complete")
	}

	// --early-drivers: the set goes into the initramfs too, the index is marked
	// complete, the instance file is copied in, the image is marked for the hook.
	early := t.TempDir()
	if _, err := stage.Stage(context.Background(), stage.Options{
		Kernels: []string{testKernel}, Recipes: recipes, CacheDir: cache,
		KpreloadBinary: kpreload, InitBinary: initBin, Instance: instance, EarlyDrivers: true,
	}, early); err != nil {
		t.Fatal(err)
	}
	files = testenv.InitramfsFiles(t, filepath.Join(early, ImageInitramfsDir, "initrd.img-"+testKernel))
	ixJSON := files["lib/modules/"+testKernel+"/kpreload.index.json"]
	if !strings.Contains(ixJSON, `"complete":true`) || !strings.Contains(ixJSON, res.Drivers[0].SetID) || files["etc/kpreload/instance.yaml"] == "" {
		t.Errorf("early-drivers initramfs index %.300s (instance %q): want complete, with set %s", ixJSON, files["etc/kpreload/instance.yaml"], res.Drivers[0].SetID)
	}
	if _, err := os.Stat(filepath.Join(early, ImageEarlyDrivers)); err != nil {
		t.Errorf("the image is not marked for the hook: %v", err)
	}

	// A missing cell fails Stage with what the cache holds, before writing anything.
	other := t.TempDir()
	_, err = stage.Stage(context.Background(), stage.Options{
		Kernels: []string{"6.12.117+deb12-cloud-amd64"}, Recipes: recipes, CacheDir: cache,
		KpreloadBinary: kpreload, InitBinary: initBin,
	}, other)
	if !errors.Is(err, ErrMissingCells) || !strings.Contains(err.Error(), "kpreload-edu 1.0.0 open for "+testKernel) {
		t.Errorf("missing cell: err = %v, want ErrMissingCells listing the cache", err)
	}
	if ents, _ := os.ReadDir(other); len(ents) != 0 {
		t.Errorf("failed Stage left %d entries in the root", len(ents))
	}
}

// TestBuildFailsEarly checks that bad options fail before any slow step and leave
// no output behind.
func TestBuildFailsEarly(t *testing.T) {
	kpreload, initBin := binaries(t)
	out := t.TempDir()
	r := &recipe.Recipe{Name: "testdriver", Driver: recipe.Driver{Name: "kpreload-edu", Version: "1.0.0"}, Flavor: "open"}
	lister := recipe.ListerFunc(func() ([]string, error) { return []string{testKernel}, nil })
	for _, c := range []struct {
		name    string
		kernels []string
		want    error
	}{
		{"unknown kernel", []string{"6.1.0-99-cloud-amd64"}, ErrUnknownKernel},
		{"missing cell", []string{testKernel}, ErrMissingCells},
	} {
		_, err := Build(context.Background(), Options{
			Name: "x", OutDir: out, Kernels: c.kernels,
			Stage: stage.Options{
				Recipes: []*recipe.Recipe{r}, CacheDir: t.TempDir(),
				KpreloadBinary: kpreload, InitBinary: initBin, Lister: lister,
			},
		})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
		if c.want == ErrUnknownKernel && (err == nil || !strings.Contains(err.Error(), "available: "+testKernel)) {
			t.Errorf("%s: err = %v, want the available kernels listed", c.name, err)
		}
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("failed builds left %d entries in the output directory", len(ents))
	}
}

// defaultTarget is what systemd prints when it reaches the image's default target.
var defaultTarget = regexp.MustCompile(`Reached target .*(Multi-User System|Graphical Interface)`)

// TestBuildAndBootImage checks the shared image (ciImage) as the clouds
// import it: both versions of the test driver, each with its userspace
// built from C, Debian's podman and crun, cloud-init, an instance YAML
// asking for 1.0.0, written raw, as qcow2, as a streamOptimized VMDK (EC2,
// VMware) and a fixed VHD (Azure). The VMDK, the VHD and the qcow2 are each
// proved by `qemu-img compare` against the raw disk: identical guest-visible
// content, so each is a bootable conversion of the same disk
// (TestWriteFormats checks each format's container on a small disk).
//
// Its boot is TestCloudInitImage's first instance, which boots a copy of the
// qcow2 through OVMF and systemd-boot with -device edu, QEMU told its
// format, and carries this image's boot checks (checkImageBoot: the
// kpreload initramfs from the ESP mounts the root by UUID, loads the test
// driver from the root's cache and binds it before switch_root, its report
// comes back, and systemd reaches kpreload-drivers.target and the default
// target) and the podman CDI check (podmanScript, checkPodmanLines): a
// container started with --device kpreload.dev/edu=all sees
// /dev/kpreload-edu0 and loads libkpreload_edu.so.1 (mounted by the CDI
// spec, found through the ld cache the spec's hook made), whose version
// equals the loaded module's; after kpreload switch a new container sees
// the other version in both.
func TestBuildAndBootImage(t *testing.T) {
	if testing.Short() {
		t.Skip("mmdebstrap with podman and cloud-init; -short")
	}
	testenv.KernelTree(t, testKernel)
	img := ciImage(t)
	out, m := img.out, img.m
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 10*time.Minute))
	defer cancel()

	// Outputs: exactly the four disks and the manifest, which reads back as written.
	ents, _ := os.ReadDir(out)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got, want := strings.Join(names, " "), "ci.manifest.json ci.qcow2 ci.raw ci.vhd ci.vmdk"; got != want {
		t.Errorf("output directory holds %q, want %q", got, want)
	}
	read, err := ReadManifest(filepath.Join(out, "ci.manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	sameDrivers := len(read.Drivers) == len(m.Drivers) && len(m.Drivers) == 2
	for i := 0; sameDrivers && i < len(m.Drivers); i++ {
		sameDrivers = read.Drivers[i].SetID == m.Drivers[i].SetID
	}
	if len(read.Files) != 4 || read.RootUUID != m.RootUUID || !sameDrivers {
		t.Errorf("manifest on disk = %+v, want what Build returned (four files, the two driver sets)", read)
	}
	for _, f := range read.Files {
		size, sum, err := digest(f.Path)
		if err != nil || size != f.Size || sum != f.SHA256 {
			t.Errorf("%s: size %d sha256 %s (err %v), manifest says %d %s", f.Path, size, sum, err, f.Size, f.SHA256)
		}
		if f.VirtualSize != ciImageSizeMB*disk.MiB {
			t.Errorf("%s: virtual size %d, want the disk's %d", f.Path, f.VirtualSize, ciImageSizeMB*disk.MiB)
		}
	}
	if got, want := strings.Join(read.BootFirmware, " "), "uefi"; got != want {
		t.Errorf("manifest boot firmware %q, want %q (systemd-boot)", got, want)
	}
	if m.KernelPackages[testKernel] == "" || !strings.Contains(m.Cmdline, "root=UUID="+m.RootUUID) {
		t.Errorf("manifest kernel packages %v, cmdline %q: want the kernel's version and root=UUID", m.KernelPackages, m.Cmdline)
	}
	for _, v := range []string{"1.0.0", "2.0.0"} {
		if got := strings.Join(m.Userspace[v], " "); got != "source:testdriver-userspace" {
			t.Errorf("userspace of %s = %q, want built from testdriver-userspace", v, got)
		}
	}

	// Each converted file against the raw disk (the boots write only to a
	// temporary overlay of the raw disk or of a copy of the qcow2):
	// qemu-img compare reads both through their format drivers and exits 0
	// only when the guest sees the same sectors, so a VMDK or VHD that
	// matches is as bootable as the qcow2 TestCloudInitImage boots.
	raw := OutputPath(out, "ci", formats.Raw)
	for _, f := range []string{formats.QCOW2, formats.VMDK, formats.VHD} {
		format, _ := formats.QEMU(f)
		path := OutputPath(out, "ci", f)
		cmp := exec.CommandContext(ctx, "qemu-img", "compare", "-f", "raw", "-F", format, raw, path)
		if b, err := cmp.CombinedOutput(); err != nil {
			t.Errorf("qemu-img compare of the %s with the raw disk: %v\n%s", f, err, b)
		}
	}
}

// checkImageBoot checks a boot of an image: kpreload's report came back for
// kernel with cmdline in its command line, the root was mounted
// from /dev/vda2, the test driver was loaded from the image's cache and bound
// before the real init ran, and systemd reached kpreload-drivers.target.
func checkImageBoot(t *testing.T, res *qemu.Result, kernel, cmdline string) {
	t.Helper()
	rep := res.Report
	if rep == nil {
		t.Fatalf("no kpreload report on the report channel; warnings %v; console %s", res.Warnings, res.Console)
	}
	t.Logf("report: %s", rep.Summary())
	if rep.Kernel != kernel || !strings.Contains(rep.Cmdline, cmdline) {
		t.Errorf("report kernel %q cmdline %q: want %s booted by the boot entry (%s)", rep.Kernel, rep.Cmdline, kernel, cmdline)
	}
	if rep.Root.FSType != "ext4" || rep.Root.Device != "/dev/vda2" || rep.Root.Mounted <= 0 {
		t.Errorf("root = %+v, want ext4 on /dev/vda2 mounted", rep.Root)
	}
	boottest.CheckEduLoaded(t, rep, "rootfs")
	// The probe's kernel line and systemd's first line carry the same (printk) clock:
	// the driver was bound before the real init ran. (The report's own times come
	// from another clock, which drifts from printk's under TCG.)
	console, _ := os.ReadFile(res.Console)
	probe, ok := qemu.Find(res.Kernel, "bound, id 0x010000ed")
	systemd, sok := qemu.FirstPrintk(console, "systemd[1]:")
	if !ok || !sok || probe.Time >= systemd {
		t.Errorf("test driver probe line %+v (found %v), systemd's first line at %.3f (found %v): want the probe logged before the real init ran", probe, ok, systemd, sok)
	}
	for _, want := range []string{"systemd", "Welcome to", "Debian GNU/Linux 12"} {
		if !strings.Contains(string(console), want) {
			t.Errorf("console lacks %q (%s)", want, res.Console)
		}
	}
	// The readiness target (WantedBy=multi-user.target, so ordered before it):
	// the units from rootfiles are enabled and /run/kpreload/ready was there.
	// systemd's status lines end on the console once the serial getty starts
	// (it hangs the line up); where the target comes later, a guest check
	// says it through the kernel log instead (podmanScript).
	if !driversReady.Match(console) && !strings.Contains(string(console), "E2E: drivers target active") {
		t.Errorf("console lacks systemd reaching kpreload-drivers.target (%s)", res.Console)
	}
}

// driversReady is systemd reaching kpreload-drivers.target; systemd shortens the
// unit name to the console's width, so match its start and its description.
var driversReady = regexp.MustCompile(`Reached target .*kpreload-dr.*GPU drivers loaded and ready`)
