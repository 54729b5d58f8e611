package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/modprobetest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// genericKernels are Debian's generic -amd64 kernels, bookworm's and trixie's.
// Unlike the cloud flavour they build crc32c and most filesystems as modules,
// which the filesystems ask for by alias (ext4's softdep pre: crypto-crc32c).
var genericKernels = []string{"6.1.0-56-amd64", "6.12.118+deb13-amd64"}

// genericRootUUID is the root filesystem's UUID in every TestGenericKernelRoots boot.
const genericRootUUID = "3c1f0e2d-6b5a-4e9d-8c7b-2a1f0e9d8c7b"

// genericRoot is one cell of TestGenericKernelRoots: a kernel and a root filesystem.
type genericRoot struct {
	kernel, fstype string
}

// genericRoots are the cells booted: both generic kernels on ext4 as today's
// mkfs.ext4 makes it (metadata_csum: crc32c), xfs and btrfs.
var genericRoots = []genericRoot{
	{genericKernels[0], rootdisk.FSExt4}, // the reference boot: booted first, alone
	{genericKernels[1], rootdisk.FSExt4},
	{genericKernels[0], rootdisk.FSXFS},
	{genericKernels[1], rootdisk.FSXFS},
	{genericKernels[0], rootdisk.FSBtrfs},
	{genericKernels[1], rootdisk.FSBtrfs},
}

// genericBootEnd ends a boot at the kernel's power-off (the root's init
// powers the machine off once it has reported) or as soon as /init says it
// cannot mount a root device that is there (a missing filesystem module):
// it would only retry.
var genericBootEnd = regexp.MustCompile(`reboot: Power down|cannot mount root`)

// genericBootTimeout bounds one boot from the reference boot's wall time: ten
// times it, at least two minutes, and longer again when more boots run at once
// than the host has CPUs (each TCG boot keeps one busy). A slower host thus
// gets a longer bound; a boot fails on what it checks (no root init, a module
// missing), never on a time its host was too slow for.
func genericBootTimeout(reference time.Duration, parallel int) time.Duration {
	d := max(2*time.Minute, 10*reference)
	if n := runtime.NumCPU(); parallel > n {
		d = d * time.Duration(parallel) / time.Duration(n)
	}
	return d
}

// testDriverCells builds the test driver (recipes/testdriver.yaml) for the
// given kernels into a fresh cache with the project's own matrix, as
// `kpreload build testdriver:KVER` does (trixie's kernel in its build root),
// and returns the cache.
func testDriverCells(t *testing.T, kvers []string) string {
	t.Helper()
	r, err := recipe.Load(filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 15*time.Minute))
	defer cancel()
	start := time.Now()
	res, err := matrix.Run(ctx, matrix.Options{
		Recipes:       []*recipe.Recipe{r},
		RecipeKernels: map[*recipe.Recipe][]string{r: kvers},
		CacheDir:      cache,
		TempDir:       t.TempDir(),
		LogDir:        t.TempDir(),
	})
	if err != nil {
		t.Fatalf("build the test driver for %v: %v", kvers, err)
	}
	for _, c := range res {
		if c.State != matrix.StateOK {
			t.Fatalf("test driver for %s: %s %s (log %s)", c.Kernel, c.State, c.FirstError, c.LogPath)
		}
	}
	t.Logf("test driver built for %v in %s", kvers, time.Since(start).Round(100*time.Millisecond))
	return cache
}

// TestGenericKernelRoots boots Debian's generic kernels (bookworm's 6.1 and
// trixie's 6.12) with kpreload's initramfs on ext4 (mkfs.ext4's defaults:
// metadata_csum), xfs and btrfs roots, each made without mounting by
// `kpreload rootdisk --fstype` (builder/rootdisk) with the test driver's cells
// in the root's cache, and -device edu. Each boot must mount the root with
// its filesystem, /init having loaded before the mount every module the real
// `modprobe --show-depends FSTYPE` names (crc32c through the crypto-crc32c
// alias included), and reach the root's init with kpreload_edu bound to the
// edu device before it started.
func TestGenericKernelRoots(t *testing.T) {
	if testing.Short() {
		t.Skip("real dkms builds and QEMU boots: skipped with -short")
	}
	start := time.Now()
	initBin, rootInit := binaries(t)
	trees := map[string]string{}
	for _, k := range genericKernels {
		trees[k] = testenv.KernelTree(t, k)
	}
	cache := testDriverCells(t, genericKernels)

	// One initramfs per kernel (every root filesystem's modules: the default)
	// and one root disk per filesystem, shared by the boots (QEMU snapshots).
	dir := t.TempDir()
	initrds := map[string]string{}
	for _, k := range genericKernels {
		initrds[k] = filepath.Join(dir, "initrd-"+k+".img")
		if _, err := assemble.WriteFile(assemble.Options{Kernel: k, ModulesDir: filepath.Join(trees[k], "lib", "modules", k), Init: initBin}, initrds[k]); err != nil {
			t.Fatalf("initramfs for %s: %v", k, err)
		}
	}
	disks := map[string]string{}
	for _, fs := range rootdisk.FSTypes {
		disks[fs] = filepath.Join(dir, "root-"+fs+".img")
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 2*time.Minute))
		err := rootdisk.Build(ctx, rootdisk.Options{Out: disks[fs], FSType: fs, UUID: genericRootUUID, Init: rootInit,
			Extra: map[string]string{"/var/lib/kpreload/cache": cache}})
		cancel()
		if err != nil {
			t.Fatalf("%s root disk: %v", fs, err)
		}
	}
	// The ext4 root is what today's mkfs.ext4 makes by default: with metadata
	// checksums, for which the kernel needs crc32c.
	if out, err := exec.Command("dumpe2fs", "-h", disks[rootdisk.FSExt4]).CombinedOutput(); err != nil || !regexp.MustCompile(`(?m)^Filesystem features:.*\bmetadata_csum\b`).Match(out) {
		t.Fatalf("dumpe2fs -h of the ext4 root: %v; want metadata_csum among its features:\n%s", err, out)
	}
	t.Logf("initramfs images and root disks made in %s (since the test started)", time.Since(start).Round(100*time.Millisecond))

	bootOne := func(t *testing.T, c genericRoot, timeout time.Duration) *qemu.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
		defer cancel()
		res, err := qemu.Run(ctx, qemu.Config{
			Kernel:     filepath.Join(trees[c.kernel], "boot", "vmlinuz-"+c.kernel),
			Initramfs:  initrds[c.kernel],
			RootDisk:   disks[c.fstype],
			Snapshot:   true,
			Devices:    []string{"edu"},
			Append:     "root=UUID=" + genericRootUUID,
			Until:      genericBootEnd,
			Timeout:    timeout,
			ConsoleLog: filepath.Join(t.TempDir(), "console.log"),
		})
		if err != nil {
			t.Fatalf("boot: %v", err)
		}
		checkGenericBoot(t, c, trees[c.kernel], res)
		return res
	}

	name := func(c genericRoot) string { return c.kernel + "/" + c.fstype }
	const referenceTimeout = 3 * time.Minute
	var reference time.Duration
	refPassed := t.Run(name(genericRoots[0]), func(t *testing.T) {
		res := bootOne(t, genericRoots[0], testenv.Deadline(t, referenceTimeout))
		reference = res.Duration
	})
	if !refPassed {
		reference = referenceTimeout / 10 // it failed: the others get the reference's own bound
	}
	// Two boots at a time gained 5 s of 59 on the 2-core CI host (each TCG boot
	// keeps a core busy, and make test runs two packages at once): one boot per
	// two CPUs.
	parallel := max(1, min(runtime.NumCPU()/2, len(genericRoots)-1))
	timeout := genericBootTimeout(reference, parallel)
	t.Logf("reference boot %s: %s; the other %d boot %d at a time, each within %s", name(genericRoots[0]), reference.Round(100*time.Millisecond), len(genericRoots)-1, parallel, timeout.Round(time.Second))
	slots := make(chan struct{}, parallel)
	var mu sync.Mutex
	walls := map[string]time.Duration{}
	if refPassed {
		walls[name(genericRoots[0])] = reference
	}
	rest := time.Now()
	t.Run("others", func(t *testing.T) {
		for _, c := range genericRoots[1:] {
			t.Run(name(c), func(t *testing.T) {
				t.Parallel()
				slots <- struct{}{}
				defer func() { <-slots }()
				res := bootOne(t, c, timeout)
				mu.Lock()
				walls[name(c)] = res.Duration
				mu.Unlock()
			})
		}
	})
	var b strings.Builder
	for _, c := range genericRoots {
		fmt.Fprintf(&b, "\n  %-28s %s", name(c), walls[name(c)].Round(100*time.Millisecond))
	}
	t.Logf("boots (wall each):%s\nthe %d after the reference: %s; the whole test: %s", b.String(),
		len(genericRoots)-1, time.Since(rest).Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// checkGenericBoot checks one boot of TestGenericKernelRoots: the root
// mounted with its filesystem after /init loaded what modprobe would for it,
// and the test driver bound before the root's init started.
func checkGenericBoot(t *testing.T, c genericRoot, tree string, res *qemu.Result) {
	t.Helper()
	if res.Report == nil || res.RootInit == nil {
		if con, err := os.ReadFile(res.Console); err == nil {
			if m := regexp.MustCompile(`(?m)^.*cannot mount root.*$`).Find(con); m != nil {
				t.Errorf("/init could not mount the root: %s", m)
			}
		}
		t.Fatalf("the boot did not reach the root's init (report %v, root init %v) in %s; console %s:\n%s",
			res.Report != nil, res.RootInit != nil, res.Duration.Round(100*time.Millisecond), res.Console, tailFile(res.Console, 30))
	}
	rep, root := res.Report, res.RootInit
	t.Logf("%s on %s in %s: %s", c.kernel, c.fstype, res.Duration.Round(100*time.Millisecond), rep.Summary())
	if rep.Kernel != c.kernel || root.Kernel != c.kernel || root.PID != 1 {
		t.Errorf("kernel: report %q, root init %q (pid %d); want %q, pid 1", rep.Kernel, root.Kernel, root.PID, c.kernel)
	}
	if rep.Root.FSType != c.fstype || rep.Root.Device != "/dev/vda" || rep.Root.Mounted <= 0 || rep.Root.Error != "" {
		t.Errorf("report root = %+v, want /dev/vda mounted as %s", rep.Root, c.fstype)
	}
	if root.Root.FSType != c.fstype {
		t.Errorf("the root init's / is %+v, want %s", root.Root, c.fstype)
	}
	// What the filesystem needs, as the real modprobe resolves it (soft
	// dependencies and crypto aliases included), loaded by /init before the mount.
	want, err := modprobetest.ShowDepends(tree, c.kernel, c.fstype)
	if err != nil {
		t.Fatal(err)
	}
	crc32c := false
	for _, m := range want {
		if m.Builtin {
			continue
		}
		got, ok := moduleResult(rep, m.Name)
		if !ok || got.Result != "loaded" || got.Phase != "initramfs" || got.End > rep.Root.Mounted {
			t.Errorf("%s (modprobe --show-depends %s) = %+v (found %v), want loaded by /init before the root was mounted at %.3f", m.Name, c.fstype, got, ok, rep.Root.Mounted)
		}
		crc32c = crc32c || strings.HasPrefix(m.Name, "crc32c")
	}
	if !crc32c {
		t.Errorf("modprobe --show-depends %s = %+v names no crc32c module: want the one the filesystem asks for", c.fstype, want)
	}
	// The test driver, from the root's cache, bound before the root's init ran.
	em, ok := moduleResult(rep, "kpreload_edu")
	if !ok || em.Result != "loaded" || em.Phase != "rootfs" || em.End > rep.SwitchRoot {
		t.Errorf("kpreload_edu = %+v (found %v), want loaded from the root's cache before switch_root (%.3f)", em, ok, rep.SwitchRoot)
	}
	if edu, ok := pciDriver(root, "1234:11e8"); !ok || edu.Driver != "kpreload_edu" || edu.EduID != "0x010000ed" {
		t.Errorf("edu device = %+v (found %v), want bound to kpreload_edu with edu_id 0x010000ed", edu, ok)
	}
	var probe *report.KmsgLine
	for i, l := range root.Kmsg {
		if strings.Contains(l.Text, "kpreload_edu") && strings.Contains(l.Text, "bound, id 0x010000ed") {
			probe = &root.Kmsg[i]
		}
	}
	if probe == nil || probe.Time > root.Start {
		t.Errorf("test driver probe line %+v: want it logged before the root's init started (%.3f)", probe, root.Start)
	}
	if len(rep.Errors) != 0 {
		t.Errorf("report errors: %q", rep.Errors)
	}
}
