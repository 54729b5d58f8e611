package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/testsupport/boottest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

const (
	// oldKernel is the image's kernel.
	oldKernel = "6.1.0-56-cloud-amd64"
	// kernelA arrives in the archive and the cycle runs before the VM installs it.
	kernelA = "6.12.117+deb12-cloud-amd64"
	// kernelB arrives in the archive and the VM installs it before the cycle runs.
	kernelB = "6.12.118+deb13-cloud-amd64"
	// suite is the test archive's suite.
	suite = "kernels"
	// guestArchive and guestRegistry are where the guest reaches the
	// archive and the registry on the host's loopback.
	guestArchive  = "10.0.2.101:8080"
	guestRegistry = "10.0.2.100:5000"
	// refresh is what the guest runs once it waits for a kernel's cells
	// (the example of `kpreload kernel-hook --help`, as written).
	refresh = "kpreload kernel-hook refresh"
	// cyclePushed is the file the test puts in the archive once the cycle
	// for kernelB has pushed its cells; the guest waits for it before it
	// runs refresh.
	cyclePushed = "kpreload-test/cycle-pushed"
)

// step runs on every boot of the image after kpreload-drivers.target and
// says what it sees and does on the console, "kpreload-test:" lines. What
// it does follows from the running kernel and whether a driver is ready.
const step = `#!/bin/sh
say() { echo "kpreload-test: $*"; }
hook() { sed -n 's/^kpreload: /kpreload-test: hook: /p' "$1"; }
entries() { grep -o "^menuentry '[^']*'" /boot/grub/grub.cfg | cut -d"'" -f2 | sed "s/^/kpreload-test: $1entry: /"; }
old=` + oldKernel + `
a=` + kernelA + `
b=` + kernelB + `
state=$(systemctl is-active kpreload-ready.service)
say "running $(uname -r), kpreload-ready $state"
say "first entry: $(grep -m1 '^menuentry ' /boot/grub/grub.cfg | cut -d"'" -f2)"
online() { /lib/systemd/systemd-networkd-wait-online --timeout=60 >/dev/null 2>&1 || say "network not online"; }
install_kernel() {
	{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "linux-image-$1-unsigned"; } >/tmp/apt.log 2>&1 && say "apt-get install $1 ok" || { say "apt-get install $1 FAILED"; tail -n 25 /tmp/apt.log | sed 's/^/kpreload-test: apt: /'; }
	hook /tmp/apt.log
}
# The image's real update-grub, as the kernel package's
# /etc/kernel/postinst.d/zz-update-grub runs it (run-parts --exit-on-error:
# its failure fails the install): grub-mkconfig's first and last lines (apt
# runs dpkg on a terminal, whose lines end in CR LF).
grub_mkconfig() { awk '{ sub(/\r$/, "") } /^Generating grub configuration file/ { g = 1 } g && /^done$/ { print "kpreload-test: update-grub by zz-update-grub ran to its end"; exit }' "$1"; }
case "$(uname -r)/$state" in
"$old/active")
	# Kernel A from the archive; its package runs the image's update-grub.
	online
	install_kernel "$a"
	grub_mkconfig /tmp/apt.log ;;
"$a/active")
	online
	install_kernel "$b"
	kpreload status | sed 's/^/kpreload-test: status: /'
	entries ""
	say "waiting for the cells of $b"
	# Each refresh regenerates grub.cfg, cells or not: the first runs once
	# the host says its cycle has pushed them (` + cyclePushed + ` in the
	# archive), not every 10 s while the cycle runs.
	n=0
	until /usr/lib/apt/apt-helper download-file "http://` + guestArchive + `/` + cyclePushed + `" /tmp/cycle-pushed >/dev/null 2>&1; do
		n=$((n+1))
		[ $n -ge 360 ] && { say "the host never said its cycle pushed the cells of $b"; break; }
		sleep 5
	done
	n=0
	while :; do
		` + refresh + ` >/tmp/refresh.log 2>&1
		grep -q "boots kernel $b with kpreload" /tmp/refresh.log && break
		n=$((n+1))
		[ $n -ge 120 ] && { say "no cells for $b"; break; }
		sleep 10
	done
	hook /tmp/refresh.log ;;
"$b/active")
	# Removing the old kernel (postrm.d) takes its entries away.
	kpreload status | sed 's/^/kpreload-test: status: /'
	pkg=$(dpkg-query -W -f '${Package} ${Status}\n' "linux-image-$old*" | awk '/ installed$/ { print $1 }')
	dpkg -r "$pkg" >/tmp/dpkg-r.log 2>&1 && say "dpkg -r ok" || { say "dpkg -r FAILED"; tail -n 15 /tmp/dpkg-r.log | sed 's/^/kpreload-test: dpkg: /'; }
	hook /tmp/dpkg-r.log
	entries "after removal " ;;
*)
	# No driver at boot: kpreload switch brings one up, and readiness follows.
	kpreload switch 1.0.0 >/dev/null 2>&1 && say "switch ok" || say "switch FAILED"
	sleep 2
	say "after switch kpreload-ready $(systemctl is-active kpreload-ready.service)" ;;
esac
sync
say "done"
`

var (
	stepDone    = regexp.MustCompile(`kpreload-test: done`)
	stepWaiting = regexp.MustCompile(`kpreload-test: waiting for the cells of `)
)

// TestFollowE2E proves the chain from a kernel upload to a VM on that
// kernel with its driver, twice, and the GRUB image's kernel updates around
// it, with one image and one VM: four TCG boots of one GPT disk through
// GRUB, under SeaBIOS and (boot 2) OVMF. A signed apt archive on loopback
// (reprepro, gpg) publishes Debian's real kernel packages, a cycle builds
// the test driver's cell by the real dkms and pushes it, signed, to a real
// registry, and a VM of a kpreload image (6.1, the test driver, apt pointed
// at the archive and the kernel hook at the registry, both reached through
// QEMU's user network) installs the kernels with apt-get. Every boot with a
// driver: GRUB boots kpreload's entry of the default kernel, the test
// driver is bound before systemd, and the report comes back on the channel
// the harness names through fw_cfg (no kpreload.report= on the command line).
//
//  1. The archive publishes 6.12 (bookworm-backports'), the cycle pushes its
//     cell; boot 1 (6.1, SeaBIOS): apt-get update && apt-get install; the
//     kernel hook builds 6.12's initramfs, pulls the trusted cell and makes
//     6.12 the default, and the package's zz-update-grub runs the image's
//     real update-grub to its end.
//  2. Boot 2 (OVMF) comes up on 6.12 with the driver. The archive publishes
//     trixie's 6.12 first: apt-get install; its hook finds no cell and keeps
//     the default on the running 6.12 with its driver; kpreload status and
//     grub.cfg list all three kernels. Then the cycle runs, and once the
//     test says so in the archive, kpreload kernel-hook refresh pulls the
//     cell and moves the default.
//  3. Boot 3 (SeaBIOS, a snapshot) comes up on trixie's 6.12 with the driver,
//     its entry first; dpkg -r of the 6.1 kernel (postrm) takes 6.1's
//     entries away.
//  4. Boot 4 (SeaBIOS, a snapshot of the disk after boot 2) with an instance
//     request through fw_cfg for a flavour the cache lacks: no driver is
//     ready at boot; kpreload switch brings the test driver up, and
//     kpreload-ready follows.
func TestFollowE2E(t *testing.T) {
	testenv.SkipShort(t, "dkms builds, an image build and four TCG boots")
	began := time.Now()
	progress := func(msg string) { t.Logf("[%6.1fs] %s", time.Since(began).Seconds(), msg) }
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 50*time.Minute))
	defer cancel()
	testenv.KernelTree(t, oldKernel)
	debA, debB := kernelDeb(t, kernelA), kernelDeb(t, kernelB)
	work := t.TempDir()
	kpreload := testenv.GoBuildStatic(t, work, "kpreload", "./cmd/kpreload")
	initBin := testenv.GoBuildStatic(t, work, "kpreload-init", "./cmd/kpreload-init")
	checkRefreshExample(t, kpreload)
	recipes := filepath.Join(testenv.RepoRoot(t), "recipes")
	r, err := recipe.Load(filepath.Join(recipes, "testdriver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	key, pub := filepath.Join(work, "builder.key"), filepath.Join(work, "builder.pub")
	if _, err := cellsign.Generate(key, pub); err != nil {
		t.Fatal(err)
	}
	reg := testenv.StartRegistry(t)
	archive := testenv.StartAptArchive(t, suite)
	archiveAddr := strings.TrimPrefix(archive.URL, "http://")

	// The image: 6.1 with the test driver; apt's only source is the
	// archive, signed by its key; the hook's registry trusts the builder.
	files := map[string]string{}
	for name, f := range map[string]struct{ guest, text string }{
		"step":         {boottest.StepScript, step},
		"unit":         {"/etc/systemd/system/" + boottest.StepService, boottest.StepUnit("kpreload follow test step")},
		"sources.list": {"/etc/apt/sources.list", "deb [signed-by=/etc/apt/keyrings/kpreload-test.asc] http://" + guestArchive + " " + suite + " main\n"},
		"remote.yaml":  {"", "remote: oci://" + guestRegistry + "/cells\nplain_http: true\ntrust: [builder.pub]\ntimeout: 2m\n"},
		// A cached version in a flavour the cache lacks: refused at boot (a
		// version the image lacks altogether would go on with the default).
		"refused.yaml": {"", "resources:\n  driver:\n    version: \"1.0.0\"\n    flavor: proprietary\n"},
	} {
		mode := os.FileMode(0o644)
		if name == "step" {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(work, name), []byte(f.text), mode); err != nil {
			t.Fatal(err)
		}
		if f.guest != "" {
			files[f.guest] = filepath.Join(work, name)
		}
	}
	files["/etc/apt/keyrings/kpreload-test.asc"] = archive.Key
	progress("image build")
	// No kpreload.report= (as "kpreload image build --help" shows): the
	// harness names the report channel through fw_cfg.
	const cmdline = "console=ttyS0 panic=-1"
	m, err := image.Build(ctx, image.Options{
		Name: "follow", OutDir: t.TempDir(), Kernels: []string{oldKernel},
		Rootfs: rootfs.Options{Files: files, Enable: []string{boottest.StepService}},
		Stage: stage.Options{
			Recipes: []*recipe.Recipe{r}, CacheDir: t.TempDir(), BuildMissing: true,
			Instance:       filepath.Join(testenv.RepoRoot(t), "images", "instance-testdriver.yaml"),
			RemoteConfig:   filepath.Join(work, "remote.yaml"),
			KpreloadBinary: kpreload, InitBinary: initBin,
		},
		Boot:    bootloader.Options{Loader: install.GRUB, Cmdline: cmdline},
		Disk:    disk.Options{SizeMB: 1536, ESPSizeMB: 64},
		Formats: []string{formats.Raw}, TempDir: t.TempDir(), Progress: progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Bootloader != install.GRUB || len(m.Files) != 1 {
		t.Fatalf("manifest bootloader %q, files %+v: want grub and one raw disk", m.Bootloader, m.Files)
	}
	disk := m.Files[0].Path
	cycleCache := t.TempDir()
	downloads := testenv.DownloadCache(t)
	forwards := []string{guestForward(t, guestArchive, archiveAddr), guestForward(t, guestRegistry, reg.Addr)}
	entry := func(k string) string { return "Debian GNU/Linux, with Linux " + k + " (kpreload)" }
	type bootSpec struct {
		firmware string
		kernel   string // the kernel GRUB boots by default
		bound    bool   // the driver is bound at boot
		snapshot bool
		until    *regexp.Regexp
		at       func(ctx context.Context, console string) error
		fwCfg    map[string]string
		wants    []string
		nots     []string
	}
	boot := func(n int, b bootSpec) {
		t.Helper()
		name := fmt.Sprintf("boot %d (%s)", n, b.firmware)
		progress(name)
		consoleLog := filepath.Join(t.TempDir(), "console.log")
		cfg := qemu.Config{
			Firmware: b.firmware, RootDisk: disk, Snapshot: b.snapshot, Devices: []string{"edu"}, FwCfg: b.fwCfg,
			GuestForwards: forwards, Until: b.until, ConsoleLog: consoleLog, Timeout: testenv.Deadline(t, 600*time.Second),
		}
		if b.at != nil {
			cfg.AtUntil = func(ctx context.Context) error { return b.at(ctx, consoleLog) }
		}
		res, err := (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, cfg)
		console, _ := os.ReadFile(consoleLog)
		logSteps := func() {
			for _, l := range strings.Split(string(console), "\n") {
				if strings.Contains(l, "kpreload-test: ") {
					t.Log(l)
				}
			}
		}
		if err != nil {
			logSteps()
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: QEMU ran %s", name, res.Duration.Round(time.Second))
		wants := append(b.wants, "Booting `"+entry(b.kernel)+"'", "kpreload-test: done")
		if b.bound {
			checkImageBoot(t, name, res, b.kernel, "root=UUID="+m.RootUUID+" ro "+cmdline)
			wants = append(wants, "kpreload-test: running "+b.kernel+", kpreload-ready active")
		}
		bad := t.Failed()
		for _, w := range wants {
			if !strings.Contains(string(console), w) {
				t.Errorf("%s: console lacks %q", name, w)
				bad = true
			}
		}
		for _, w := range b.nots {
			if strings.Contains(string(console), w) {
				t.Errorf("%s: console has %q", name, w)
				bad = true
			}
		}
		if bad {
			logSteps()
			t.FailNow()
		}
	}

	// 1. The archive publishes A; the cycle pushes its cell; the VM installs
	// A, whose package runs update-grub.
	progress("archive publishes " + kernelA)
	publishedA := archive.IncludeDeb(suite, debA)
	runCycle(ctx, t, kpreload, recipes, cycleCache, downloads, reg.Addr, key, kernelA)
	toCell := time.Since(publishedA)
	boot(1, bootSpec{firmware: qemu.FirmwareBIOS, kernel: oldKernel, bound: true, until: stepDone, wants: []string{
		"kpreload-test: apt-get install " + kernelA + " ok",
		"kpreload-test: update-grub by zz-update-grub ran to its end",
		"kpreload-test: hook: built /boot/kpreload/initrd.img-" + kernelA,
		"kpreload-test: hook: pulled kpreload-edu 1.0.0 open (set ",
		"kpreload-test: hook: grub boots kernel " + kernelA + " with kpreload by default",
	}})

	// 2. On A with its driver, through OVMF. The archive publishes B; the VM
	// installs it before its cell exists and keeps A; then the cycle runs
	// and refresh pulls B's cell.
	progress("archive publishes " + kernelB)
	archive.IncludeDeb(suite, debB)
	var toVM time.Duration
	boot(2, bootSpec{firmware: qemu.FirmwareUEFI, kernel: kernelA, bound: true, until: stepWaiting, at: func(ctx context.Context, console string) error {
		toVM = time.Since(publishedA) // the driver was bound before the step ran
		// The cycle only once the VM has installed B (and waits for its cells).
		runCycle(ctx, t, kpreload, recipes, cycleCache, downloads, reg.Addr, key, kernelB)
		marker := filepath.Join(archive.Dir, filepath.FromSlash(cyclePushed))
		if err := os.MkdirAll(filepath.Dir(marker), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(marker, []byte(kernelB+"\n"), 0o644); err != nil {
			return err
		}
		return waitConsole(ctx, console, stepDone)
	}, wants: []string{
		"kpreload-test: apt-get install " + kernelB + " ok",
		"kpreload-test: hook: built /boot/kpreload/initrd.img-" + kernelB,
		"kpreload-test: hook: WARNING: the module cache has no driver cell for kernel " + kernelB,
		"kpreload-test: hook: grub boots kernel " + kernelA + " with kpreload by default",
		"kpreload-test: status: default: " + kernelA + " (the newest kernel with its driver cells)",
		"kpreload-test: status:   " + kernelB + ": no driver cells",
		"kpreload-test: status: * " + kernelA + ": kpreload-edu 1.0.0",
		"kpreload-test: status:   " + oldKernel + ": kpreload-edu 1.0.0",
		"kpreload-test: entry: " + entry(oldKernel),
		"kpreload-test: entry: " + entry(kernelA),
		"kpreload-test: entry: " + entry(kernelB),
		"kpreload-test: hook: pulled kpreload-edu 1.0.0 open (set ",
		"kpreload-test: hook: grub boots kernel " + kernelB + " with kpreload by default",
	}, nots: []string{"kpreload-test: no cells for ", "kpreload-test: the host never said"}})

	// 3. On B with its driver; dpkg -r of 6.1 (nothing boots this disk
	// after it but boot 4, which needs the disk as boot 2 left it).
	boot(3, bootSpec{firmware: qemu.FirmwareBIOS, kernel: kernelB, bound: true, snapshot: true, until: stepDone, wants: []string{
		"kpreload-test: first entry: " + entry(kernelB),
		"kpreload-test: status: default: " + kernelB,
		"kpreload-test: dpkg -r ok",
		"kpreload-test: after removal entry: " + entry(kernelB),
		"kpreload-test: after removal entry: " + entry(kernelA),
	}, nots: []string{"kpreload-test: after removal entry: " + entry(oldKernel)}})
	writeTimings(t, toCell, toVM)

	// 4. On B, asked for a flavour the cache lacks: no driver at boot, then
	// kpreload switch.
	boot(4, bootSpec{firmware: qemu.FirmwareBIOS, kernel: kernelB, snapshot: true, until: stepDone,
		fwCfg: map[string]string{"kpreload/instance.yaml": filepath.Join(work, "refused.yaml")}, wants: []string{
			"kpreload-test: running " + kernelB + ", kpreload-ready failed",
			"kpreload-test: switch ok", "kpreload-test: after switch kpreload-ready active",
		}})
	t.Logf("upload to cell %s, upload to VM on the new kernel with its driver %s; the whole test %s",
		toCell.Round(time.Second), toVM.Round(time.Second), time.Since(began).Round(time.Second))
}

// checkRefreshExample checks that the example of `kpreload kernel-hook
// --help` is the command the VM runs, as written.
func checkRefreshExample(t *testing.T, kpreload string) {
	t.Helper()
	out, err := exec.Command(kpreload, "kernel-hook", "--help").Output()
	if err != nil {
		t.Fatalf("kpreload kernel-hook --help: %v", err)
	}
	_, ex, ok := strings.Cut(string(out), "Examples:\n")
	ex, _, _ = strings.Cut(ex, "\n\n")
	if got := strings.TrimSpace(ex); !ok || got != refresh {
		t.Fatalf("kernel-hook --help's example %q is not what the VM runs (%q)", got, refresh)
	}
}
