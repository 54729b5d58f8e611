package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/kmodcache/modalias"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/modprobetest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

const rootUUID = "5f1d2c3b-8a9e-4f70-b6d5-4c3b2a190807"

// bootCase is one boot of a real kernel with a kpreload initramfs.
type bootCase struct {
	kernel string
	// driverOnRoot puts the test driver's cache on the root filesystem (loaded after
	// root is mounted, before switch_root) instead of in the initramfs.
	driverOnRoot bool
	// rootSpec is the root= value.
	rootSpec string
	// append is added to the kernel command line after root=.
	append string
}

type booted struct {
	res  *qemu.Result
	rep  *report.Report
	root *report.RootInit
}

func boot(t *testing.T, c bootCase) booted {
	t.Helper()
	dir := t.TempDir()
	ktree := testenv.KernelTree(t, c.kernel)
	initBin, _ := binaries(t)

	// The test driver goes into a real kpreload cache, built by the real dkms.
	cacheDir := filepath.Join(dir, "cache")
	s, err := store.Open(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AddFiles(context.Background(), store.AddRequest{
		Driver: "kpreload-edu", Version: "1.0.0", Files: []string{eduModule(t, c.kernel, "")},
	}); err != nil {
		t.Fatalf("cache add: %v", err)
	}
	o := assemble.Options{
		Kernel:     c.kernel,
		ModulesDir: filepath.Join(ktree, "lib", "modules", c.kernel),
		Init:       initBin,
	}
	extraRoot := map[string]string{}
	if c.driverOnRoot {
		extraRoot["/var/lib/kpreload/cache"] = cacheDir
	} else {
		o.CacheDir = cacheDir
	}
	initrd := filepath.Join(dir, "initrd.img")
	if _, err := assemble.WriteFile(o, initrd); err != nil {
		t.Fatalf("initramfs: %v", err)
	}
	disk := rootDisk(t, dir, rootUUID, extraRoot)

	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 4*time.Minute))
	defer cancel()
	res, err := qemu.Run(ctx, qemu.Config{
		Kernel:     filepath.Join(ktree, "boot", "vmlinuz-"+c.kernel),
		Initramfs:  initrd,
		RootDisk:   disk,
		Devices:    []string{"edu", "nvme,serial=kpreload-nvme"},
		Append:     strings.TrimSpace("root=" + c.rootSpec + " " + c.append),
		Timeout:    testenv.Deadline(t, 3*time.Minute),
		ConsoleLog: filepath.Join(dir, "console.log"),
	})
	if err != nil {
		t.Fatalf("boot %s: %v", c.kernel, err)
	}
	if res.Report == nil {
		t.Fatalf("boot %s: no report from /init came back; console %s:\n%s", c.kernel, res.Console, tailFile(res.Console, 30))
	}
	if res.RootInit == nil {
		t.Fatalf("boot %s: the root filesystem's /sbin/init never reported; console:\n%s", c.kernel, tailFile(res.Console, 30))
	}
	if con, _ := os.ReadFile(res.Console); strings.Contains(string(con), "unable to open an initial console") {
		t.Errorf("boot %s: the kernel found no /dev/console for /init", c.kernel)
	}
	t.Logf("%s: %s", c.kernel, res.Report.Summary())
	return booted{res: res, rep: res.Report, root: res.RootInit}
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func moduleResult(rep *report.Report, name string) (report.Module, bool) {
	for _, m := range rep.Modules {
		if m.Name == name && m.Result != "refused" {
			return m, true
		}
	}
	return report.Module{}, false
}

func pciDriver(root *report.RootInit, id string) (report.PCIDevice, bool) {
	for _, d := range root.PCI {
		if d.ID() == id {
			return d, true
		}
	}
	return report.PCIDevice{}, false
}

// TestBootLoadsDriversBeforeUserspace boots each kernel with root on virtio-blk
// (virtio_pci and virtio_blk are modules there), an NVMe controller and QEMU's edu
// device, and checks that kpreload's /init loaded the root disk's drivers by
// coldplug, mounted root, loaded the DKMS-built test driver, and handed over to
// the root's /sbin/init, with a valid report.
//
// The 6.1 boot's command line also ends in a lone quote (`kpreload.note="`):
// u-root's cmdline parser panics on it, which in /init would have been a
// kernel panic; kpreload's own parser (initramfs/kcmdline) takes it, and the
// boot reaches the real init with the test driver bound, no crash recorded.
func TestBootLoadsDriversBeforeUserspace(t *testing.T) {
	for _, c := range []bootCase{
		{kernel: kernels[0], rootSpec: "UUID=" + rootUUID, append: loneQuote},
		{kernel: kernels[1], rootSpec: "LABEL=kpreload-root", driverOnRoot: true},
	} {
		t.Run(c.kernel, func(t *testing.T) {
			b := boot(t, c)
			rep, root := b.rep, b.root
			if c.append == loneQuote {
				checkLoneQuote(t, b)
			}

			if rep.Kernel != c.kernel || root.Kernel != c.kernel {
				t.Errorf("kernel: report %q, root init %q, want %q", rep.Kernel, root.Kernel, c.kernel)
			}
			// Root came from modules /init loaded by coldplug.
			vb, ok := moduleResult(rep, "virtio_blk")
			if !ok || vb.Result != "loaded" || vb.Phase != "initramfs" {
				t.Errorf("virtio_blk = %+v (found %v), want loaded in the initramfs phase", vb, ok)
			}
			if strings.HasPrefix(c.kernel, "6.12") && vb.Decompress != "kernel" {
				t.Errorf("virtio_blk on %s: decompressed by %q, want the kernel (.ko.xz, MODULE_INIT_COMPRESSED_FILE)", c.kernel, vb.Decompress)
			}
			if rep.Root.Device != "/dev/vda" || rep.Root.FSType != "ext4" || rep.Root.Mounted <= 0 {
				t.Errorf("report root = %+v, want /dev/vda ext4 mounted", rep.Root)
			}
			if vb.End > rep.Root.Mounted {
				t.Errorf("virtio_blk finished loading at %.3f, after root was mounted at %.3f", vb.End, rep.Root.Mounted)
			}
			// Where virtio_pci is a module (6.1; 6.12's is built in), virtio_blk
			// was known before its device existed (the virtio PCI function's
			// ids say what it becomes): it loads in virtio_pci's round, not in
			// one after virtio_pci has bound.
			// The round is what is asserted, not the goroutines' start times: on
			// a loaded host virtio_blk's load may begin a few milliseconds after
			// virtio_pci's ended even though both were handed to the loader together.
			predicted, predictedAt := false, 0.0
			for _, e := range rep.Events {
				if strings.HasPrefix(e.What, "virtio:d00000002v00001AF4 will appear below ") && strings.HasSuffix(e.What, ": loading virtio_blk in the same round") {
					predicted, predictedAt = true, e.Time
				}
			}
			if vp, ok := moduleResult(rep, "virtio_pci"); ok {
				if vp.Result != "loaded" || !predicted || predictedAt > vp.Start {
					t.Errorf("virtio_pci = %+v, virtio_blk predicted %v at %.3f: want an event, before virtio_pci started loading, saying virtio_blk loads in the same coldplug round", vp, predicted, predictedAt)
				}
			} else if predicted {
				t.Errorf("virtio_pci is built in, yet an event says virtio_blk was loaded ahead of its device: %+v", rep.Events)
			}
			// The root's own /sbin/init ran, as pid 1, from that disk, after /init.
			if root.PID != 1 || root.Root.BlockDevice != "/dev/vda" {
				t.Errorf("root init: pid %d, root %+v; want pid 1 on /dev/vda", root.PID, root.Root)
			}
			if root.Start < rep.SwitchRoot {
				t.Errorf("root init started at %.3f, before switch_root at %.3f", root.Start, rep.SwitchRoot)
			}
			// The report /init wrote to /run survived switch_root.
			if len(root.Report) == 0 {
				t.Errorf("root init found no %s", report.Path)
			}
			// The DKMS-built test driver is bound to edu, before the real init ran.
			edu, ok := pciDriver(root, "1234:11e8")
			if !ok || edu.Driver != "kpreload_edu" || edu.EduID != "0x010000ed" {
				t.Errorf("edu device = %+v (found %v), want bound to kpreload_edu with edu_id 0x010000ed", edu, ok)
			}
			em, ok := moduleResult(rep, "kpreload_edu")
			wantPhase := "initramfs"
			if c.driverOnRoot {
				wantPhase = "rootfs"
			}
			if !ok || em.Result != "loaded" || em.Phase != wantPhase || em.End > rep.SwitchRoot {
				t.Errorf("kpreload_edu = %+v, want loaded in phase %s before switch_root (%.3f)", em, wantPhase, rep.SwitchRoot)
			}
			var probe *report.KmsgLine
			for i, l := range root.Kmsg {
				if strings.Contains(l.Text, "kpreload_edu") && strings.Contains(l.Text, "bound, id 0x010000ed") {
					probe = &root.Kmsg[i]
				}
			}
			if probe == nil || probe.Time > root.Start {
				t.Errorf("test driver probe line %+v: want it logged before the real init started (%.3f)", probe, root.Start)
			}
			if nv, ok := pciDriver(root, "1b36:0010"); !ok || nv.Driver != "nvme" {
				t.Errorf("nvme controller = %+v, want bound to nvme", nv)
			}
			// Timings are from kernel start and in order.
			if !(rep.InitStart > 0 && rep.InitStart <= rep.DriversReady && rep.DriversReady <= rep.SwitchRoot) {
				t.Errorf("timings: init %.3f, drivers ready %.3f, switch_root %.3f: want 0 < init <= ready <= switch_root", rep.InitStart, rep.DriversReady, rep.SwitchRoot)
			}
			if len(rep.Errors) != 0 {
				t.Errorf("report errors: %q", rep.Errors)
			}
			checkAgainstModprobe(t, c.kernel, rep)
		})
	}
}

// checkAgainstModprobe compares kpreload's alias resolution with the real
// `modprobe -R` on the kernel's own module tree, for every modalias the booted
// VM's sysfs showed.
func checkAgainstModprobe(t *testing.T, kver string, rep *report.Report) {
	t.Helper()
	root := testenv.KernelTree(t, kver)
	tree, err := modalias.LoadTree(filepath.Join(root, "lib", "modules", kver))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, d := range rep.Devices {
		if seen[d.Modalias] {
			continue
		}
		seen[d.Modalias] = true
		want, err := modprobetest.Resolve(root, kver, d.Modalias)
		if err != nil {
			t.Fatalf("modprobe -R %s: %v", d.Modalias, err)
		}
		if got := tree.Resolve(d.Modalias); !slices.Equal(got, want) {
			t.Errorf("Resolve(%q) = %q, modprobe -R says %q", d.Modalias, got, want)
		}
	}
	if len(seen) < 10 {
		t.Errorf("only %d modaliases seen in the VM's sysfs; want the whole machine", len(seen))
	}
	t.Logf("%s: %d modaliases from the booted VM agree with modprobe -R", kver, len(seen))
}

// loneQuote ends a command line with a lone quote: u-root's cmdline parser
// panics on it, which in /init would have been a kernel panic.
const loneQuote = `kpreload.note="`

// checkLoneQuote checks a boot whose command line ends in loneQuote: /init's
// own parser (initramfs/kcmdline) took it, and the boot reached the real
// init with the test driver loaded, no crash recorded.
func checkLoneQuote(t *testing.T, b booted) {
	t.Helper()
	if !strings.HasSuffix(b.rep.Cmdline, loneQuote) {
		t.Errorf("report cmdline %q, want it to end in the lone quote", b.rep.Cmdline)
	}
	if b.root.PID != 1 {
		t.Errorf("root init pid %d, want 1", b.root.PID)
	}
	if m, ok := moduleResult(b.rep, "kpreload_edu"); !ok || m.Result != "loaded" {
		t.Errorf("kpreload_edu = %+v, want loaded", m)
	}
	for _, e := range b.rep.Errors {
		if strings.Contains(e, "crashed") {
			t.Errorf("/init recorded a crash: %s", e)
		}
	}
}
