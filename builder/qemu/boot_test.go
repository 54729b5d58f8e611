package qemu

// Real boots: Debian cloud kernels under TCG, with the real rootinit binary as /init of
// a tiny initramfs or as /sbin/init of a real ext4 root disk. They take about ten
// seconds each on two cores.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/rootdisk"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// testKernels are the kernels of the default matrix (scripts/lib.sh).
var testKernels = []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"}

// bootTimeout is the limit for one TCG boot in these tests: two minutes on
// the reference host, stretched by the host's measured slowdown.
func bootTimeout(t testing.TB) time.Duration { return testenv.Deadline(t, 120*time.Second) }

func TestMain(m *testing.M) {
	code := m.Run()
	if initDir != "" {
		os.RemoveAll(initDir)
	}
	os.Exit(code)
}

// kernelImage returns the unpacked kernel's vmlinuz, or fails with how to fetch it.
func kernelImage(t *testing.T, kver string) string {
	t.Helper()
	p := filepath.Join(testenv.KernelTree(t, kver), "boot", "vmlinuz-"+kver)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("kernel %s not unpacked (%v): run scripts/kernels.sh %s", kver, err, kver)
	}
	return p
}

// needQEMU fails the test when QEMU is missing.
func needQEMU(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(DefaultBinary); err != nil {
		t.Fatalf("%s not found: install qemu-system-x86 (scripts/deps.sh): %v", DefaultBinary, err)
	}
}

var (
	initOnce sync.Once
	initDir  string
	initErr  error
)

// rootInitBinary builds the real rootinit once for the package's tests.
func rootInitBinary(t *testing.T) string {
	t.Helper()
	initOnce.Do(func() {
		initDir, initErr = os.MkdirTemp("", "kpreload-qemu-test-")
		if initErr == nil {
			initErr = rootdisk.BuildRootInit(context.Background(), filepath.Join(initDir, "rootinit"))
		}
	})
	if initErr != nil {
		t.Fatalf("build rootinit: %v", initErr)
	}
	return filepath.Join(initDir, "rootinit")
}

// tinyInitramfs makes an uncompressed newc archive, with the system cpio, that holds
// only the rootinit binary as /init.
func tinyInitramfs(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Fatalf("cpio not found: install cpio (scripts/deps.sh): %v", err)
	}
	stage := t.TempDir()
	bin, err := os.ReadFile(rootInitBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stage, "init"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "initramfs.cpio")
	cmd := exec.Command("sh", "-c", `find . | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0 > "$1"`, "sh", out)
	cmd.Dir = stage
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio: %v\n%s", err, b)
	}
	return out
}

// logTimings writes the boot's milestones to the test log.
func logTimings(t *testing.T, kver string, res *Result) {
	t.Helper()
	var parts []string
	for _, m := range []string{"Run /init", "Run /sbin/init", "reboot: Power down"} {
		if l, ok := Find(res.Kernel, m); ok {
			parts = append(parts, fmt.Sprintf("%q at %.3fs", m, l.Time))
		}
	}
	if res.RootInit != nil {
		parts = append(parts, fmt.Sprintf("rootinit start %.3fs, end %.3fs", res.RootInit.Start, res.RootInit.End))
	}
	t.Logf("%s under %s: wall %.1fs; %s", kver, res.Accel, res.Duration.Seconds(), strings.Join(parts, "; "))
}

func hasPCI(devs []report.PCIDevice, id, driver string) bool {
	for _, d := range devs {
		if d.ID() == id && d.Driver == driver {
			return true
		}
	}
	return false
}

// TestBootRootInitAsInitramfs boots each kernel with rootinit as the initramfs's /init.
func TestBootRootInitAsInitramfs(t *testing.T) {
	needQEMU(t)
	initrd := tinyInitramfs(t)
	for _, kver := range testKernels {
		t.Run(kver, func(t *testing.T) {
			marker := fmt.Sprintf("kpreload.test=%d", time.Now().UnixNano())
			c := Config{Kernel: kernelImage(t, kver), Initramfs: initrd, Devices: []string{"edu"},
				Append: "rdinit=/init " + marker, Timeout: bootTimeout(t)}
			r := &Runner{WorkDir: t.TempDir()}
			res, err := r.Run(context.Background(), c)
			if err != nil {
				t.Fatalf("Run(%s): %v", kver, err)
			}
			logTimings(t, kver, res)
			ri := res.RootInit
			if ri == nil {
				t.Fatalf("Run(%s): no root-init record; console %s", kver, res.Console)
			}
			if ri.Start <= 0 || ri.End < ri.Start {
				t.Errorf("Run(%s): rootinit Start, End = %v, %v, want 0 < Start <= End", kver, ri.Start, ri.End)
			}
			if !strings.Contains(ri.Cmdline, marker) || !strings.Contains(ri.Cmdline, "kpreload.report=/dev/ttyS1") {
				t.Errorf("Run(%s): rootinit Cmdline = %q, want it to contain %q and the report device", kver, ri.Cmdline, marker)
			}
			if ri.Kernel != kver || ri.PID != 1 || ri.Root.FSType != "rootfs" {
				t.Errorf("Run(%s): rootinit kernel %q, pid %d, root %+v; want %q, 1, rootfs", kver, ri.Kernel, ri.PID, ri.Root, kver)
			}
			if !hasPCI(ri.PCI, "1234:11e8", "") {
				t.Errorf("Run(%s): rootinit PCI = %+v, want the unbound edu device 1234:11e8", kver, ri.PCI)
			}
			if want := []string{"/proc", "/sys", "/dev"}; strings.Join(ri.Mounted, ",") != strings.Join(want, ",") || len(ri.Errors) != 0 {
				t.Errorf("Run(%s): rootinit mounted %q with errors %q, want %q and none", kver, ri.Mounted, ri.Errors, want)
			}
			for _, w := range res.Warnings {
				if strings.Contains(w, "from the console") {
					t.Errorf("Run(%s): %s; want the record on the report channel", kver, w)
				}
			}
			if res.Panicked || res.ExitCode != 0 {
				t.Errorf("Run(%s): panicked %v, exit code %d, want a clean power-off", kver, res.Panicked, res.ExitCode)
			}
			if _, ok := Find(res.Kernel, "reboot: Power down"); !ok {
				t.Errorf("Run(%s): console lacks the power-down line", kver)
			}
		})
	}
}

// TestBootRootDisk boots each kernel without an initramfs from a real ext4 root disk on
// NVMe (built into both kernels), with rootinit as /sbin/init.
func TestBootRootDisk(t *testing.T) {
	needQEMU(t)
	disk := filepath.Join(t.TempDir(), "root.img")
	const uuid = "5f1d2c3b-8a9e-4f70-b6d5-4c3b2a190807"
	if err := rootdisk.Build(context.Background(), rootdisk.Options{Out: disk, UUID: uuid, Init: rootInitBinary(t)}); err != nil {
		t.Fatal(err)
	}
	for _, kver := range testKernels {
		t.Run(kver, func(t *testing.T) {
			c := Config{Kernel: kernelImage(t, kver), RootDisk: disk, RootBus: "nvme", Devices: []string{"edu"},
				Append: "rootfstype=ext4 rootwait", Timeout: bootTimeout(t)}
			res, err := (&Runner{WorkDir: t.TempDir()}).Run(context.Background(), c)
			if err != nil {
				t.Fatalf("Run(%s): %v", kver, err)
			}
			logTimings(t, kver, res)
			ri := res.RootInit
			if ri == nil {
				t.Fatalf("Run(%s): no root-init record; console %s", kver, res.Console)
			}
			// The kernel mounted the root itself, so /proc/mounts calls it /dev/root.
			if ri.Root.BlockDevice != "/dev/nvme0n1" || ri.Root.FSType != "ext4" {
				t.Errorf("Run(%s): rootinit Root = %+v, want ext4 on block device /dev/nvme0n1", kver, ri.Root)
			}
			if !hasPCI(ri.PCI, "1b36:0010", "nvme") || !hasPCI(ri.PCI, "1234:11e8", "") {
				t.Errorf("Run(%s): rootinit PCI = %+v, want QEMU's NVMe controller bound to nvme and an unbound edu", kver, ri.PCI)
			}
			if _, ok := Find(res.Kernel, "Run /sbin/init as init process"); !ok {
				t.Errorf("Run(%s): console lacks the kernel running /sbin/init", kver)
			}
		})
	}
}

// TestBootPanics checks that a kernel with nothing to run panics, and that Run sees it
// and returns promptly instead of waiting for the timeout.
func TestBootPanics(t *testing.T) {
	needQEMU(t)
	for _, kver := range testKernels {
		t.Run(kver, func(t *testing.T) {
			c := Config{Kernel: kernelImage(t, kver), Append: "rdinit=/nonexistent", Timeout: bootTimeout(t)}
			res, err := (&Runner{WorkDir: t.TempDir()}).Run(context.Background(), c)
			if err == nil || !strings.Contains(err.Error(), "kernel panicked: Kernel panic - not syncing: VFS: Unable to mount root fs") {
				t.Fatalf("Run(%s, no root) error = %v, want a kernel panic about the root fs", kver, err)
			}
			if !res.Panicked || res.TimedOut || res.RootInit != nil || res.Report != nil {
				t.Errorf("Run(%s, no root) = panicked %v, timed out %v, rootinit %v, report %v; want only panicked",
					kver, res.Panicked, res.TimedOut, res.RootInit, res.Report)
			}
			if res.Duration > bootTimeout(t)/2 {
				t.Errorf("Run(%s, no root) took %s, want it to end at the panic", kver, res.Duration)
			}
			t.Logf("%s panicked after %.1fs wall: %s", kver, res.Duration.Seconds(), res.PanicLine)
		})
	}
}

// TestKVMProbeHere runs the real probe on this machine: whatever KVM does here, the
// probe must answer within its time box.
func TestKVMProbeHere(t *testing.T) {
	needQEMU(t)
	start := time.Now()
	ok, detail := ProbeKVM(context.Background(), ExecDriver{}, kernelImage(t, testKernels[0]), t.TempDir(), 5*time.Second)
	if d := time.Since(start); d > testenv.Deadline(t, 8*time.Second) {
		t.Errorf("ProbeKVM took %s, want at most about 5s", d)
	}
	if detail == "" {
		t.Errorf("ProbeKVM = %v with no detail, want a reason", ok)
	}
	t.Logf("ProbeKVM here: ok=%v: %s", ok, detail)
}
