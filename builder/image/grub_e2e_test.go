package image

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/testenv"
)

// grubStep runs on every boot of the GRUB test image: the first boot runs
// the image's real update-grub (real grub-probe on the real disk, unlike the
// build), then every boot prints grub.cfg's first entry and whether
// kpreload-ready is active, on the console.
const grubStep = `#!/bin/sh
say() { echo "kpreload-test: $*"; }
entries() { grep -o "^menuentry '[^']*'" /boot/grub/grub.cfg | cut -d"'" -f2 | sed 's/^/kpreload-test: entry: /'; }
first=
if [ ! -e /var/lib/kpreload-test-updated ]; then
	first=yes
	# First boot (kept): the image's real update-grub, then a kernel update
	# from the second disk, as apt would install it (postinst.d hooks).
	if update-grub >/dev/null 2>&1 && touch /var/lib/kpreload-test-updated; then say "update-grub ok"; else say "update-grub FAILED"; fi
	mkdir -p /mnt/debs && mount -o ro /dev/vdb /mnt/debs
	dpkg -i /mnt/debs/*.deb >/tmp/dpkg.log 2>&1 && say "dpkg -i ok" || { say "dpkg -i FAILED"; tail -n 15 /tmp/dpkg.log | sed 's/^/kpreload-test: dpkg: /'; }
	sed -n 's/^kpreload: /kpreload-test: hook: /p' /tmp/dpkg.log
	sync
fi
say "first entry: $(grep -m1 '^menuentry ' /boot/grub/grub.cfg | cut -d"'" -f2)"
state=$(systemctl is-active kpreload-ready.service)
say "kpreload-ready $state"
if [ "$state" != active ]; then
	# No driver at boot: kpreload switch brings one up, and readiness follows.
	kpreload switch 1.0.0 >/dev/null 2>&1 && say "switch ok" || say "switch FAILED"
	sleep 2
	say "after switch kpreload-ready $(systemctl is-active kpreload-ready.service)"
elif [ -z "$first" ] && ls /lib/modules | grep -q '^6\.12'; then
	# A later boot with the driver: the new kernel did not take the GPU
	# away; then remove it (postrm.d hooks).
	kpreload status | sed 's/^/kpreload-test: status: /'
	entries
	pkg=$(dpkg-query -W -f '${Package} ${Status}\n' 'linux-image-6.12*' | awk '/ installed$/ { print $1 }')
	dpkg -r "$pkg" >/tmp/dpkg-r.log 2>&1 && say "dpkg -r ok" || { say "dpkg -r $pkg FAILED"; tail -n 15 /tmp/dpkg-r.log | sed 's/^/kpreload-test: dpkg: /'; }
	sed -n 's/^kpreload: /kpreload-test: hook: /p' /tmp/dpkg-r.log
	entries | sed 's/entry:/after removal entry:/'
fi
say "done"
`

const grubStepUnit = `[Unit]
Description=kpreload GRUB image test step
After=kpreload-drivers.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/kpreload-test-step
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
`

// newKernel is the kernel update the GRUB test installs in the VM: the 6.12
// backports kernel, for which the test's cache has no cell.
const newKernel = "6.12.117+deb12-cloud-amd64"

// debDisk makes an ext4 disk image holding the linux-image .deb of kernel
// (from the download cache scripts/kernels.sh fills), for the guest to
// install from, and returns its path.
func debDisk(t *testing.T, kernel string) string {
	t.Helper()
	debs, _ := filepath.Glob(filepath.Join(DefaultDownloadDir(), "debs", "linux-image-"+kernel+"*_amd64.deb"))
	if len(debs) != 1 {
		t.Fatalf("the linux-image .deb of %s is not in %s/debs (found %v): run scripts/kernels.sh %s", kernel, DefaultDownloadDir(), debs, kernel)
	}
	dir := t.TempDir()
	if err := os.Link(debs[0], filepath.Join(dir, filepath.Base(debs[0]))); err != nil {
		if err := fileutil.CopyFile(debs[0], filepath.Join(dir, filepath.Base(debs[0])), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(t.TempDir(), "debs.raw")
	if b, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", dir, img, "64M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 -d: %v\n%s", err, b)
	}
	return img
}

// grubStepDone is the test step's last line.
var grubStepDone = regexp.MustCompile(`kpreload-test: done`)

// TestGRUBImageBIOSAndUEFI builds an image with --bootloader grub (one GPT
// disk with a BIOS boot partition and GRUB's UEFI image, grub.cfg made by the
// root's own grub-mkconfig with kpreload's /etc/grub.d script) and boots the
// same disk under SeaBIOS and under OVMF: GRUB boots kpreload's initramfs by
// default, the test driver is bound before the real init, kpreload-ready is
// active.
//
// The first boot (kept) runs the image's real update-grub, then installs the
// 6.12 backports kernel from a second disk with dpkg -i, as apt would: the
// postinst hook builds its kpreload initramfs and entry, says the cache has no
// driver cell for it, and keeps the default on 6.1. The second boot, through
// the other firmware, comes back on 6.1 with the driver, kpreload status and
// grub.cfg list both kernels, and dpkg -r of the new kernel (the postrm hook)
// takes its entry away. A third boot asks for a version the cache lacks, so no
// driver is ready at boot: kpreload switch then brings the test driver up, and
// kpreload-ready follows (active).
func TestGRUBImageBIOSAndUEFI(t *testing.T) {
	if testing.Short() {
		t.Skip("mmdebstrap and two TCG boots; -short")
	}
	testenv.KernelTree(t, testKernel)
	testenv.KernelTree(t, newKernel) // and its .deb in the download cache
	cache, recipes := testCache(t)
	kpreload, initBin := binaries(t)
	dir := t.TempDir()
	step, unit := filepath.Join(dir, "step"), filepath.Join(dir, "unit")
	if err := os.WriteFile(step, []byte(grubStep), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unit, []byte(grubStepUnit), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	cmdline := "console=ttyS0 panic=-1 kpreload.report=" + qemu.ReportDevice
	m, err := Build(ctx, Options{
		Name: "grub", OutDir: out, Kernels: []string{testKernel}, Recipes: recipes, CacheDir: cache,
		Bootloader: install.GRUB, SizeMB: 1536, ESPSizeMB: 64, Formats: []string{FormatRaw},
		Cmdline: cmdline,
		Files: map[string]string{
			"/usr/local/sbin/kpreload-test-step":             step,
			"/etc/systemd/system/kpreload-test-step.service": unit,
		},
		Enable:         []string{"kpreload-test-step.service"},
		Instance:       filepath.Join(testenv.RepoRoot(t), "images", "instance-testdriver.yaml"),
		KpreloadBinary: kpreload, InitBinary: initBin, TempDir: t.TempDir(),
		Progress: func(msg string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), msg) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Bootloader != install.GRUB || len(m.Files) != 1 {
		t.Fatalf("manifest bootloader %q, files %+v: want grub and one raw disk", m.Bootloader, m.Files)
	}
	disk := m.Files[0].Path
	absent := filepath.Join(dir, "absent.yaml")
	if err := os.WriteFile(absent, []byte("resources:\n  driver:\n    version: \"2.0.0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := qemu.Config{
		Firmware: qemu.FirmwareBIOS, RootDisk: disk, Snapshot: true, Devices: []string{"edu"}, Until: grubStepDone,
		Timeout: 300 * time.Second, FwCfg: map[string]string{"kpreload/instance.yaml": absent},
	}
	defer func() {
		if t.Failed() {
			return
		}
		res, err := (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, cfg)
		if err != nil {
			t.Fatalf("boot with no driver ready: %v", err)
		}
		console, _ := os.ReadFile(res.Console)
		for _, want := range []string{"kpreload-test: kpreload-ready failed", "kpreload-test: switch ok", "kpreload-test: after switch kpreload-ready active"} {
			if !strings.Contains(string(console), want) {
				t.Errorf("boot with no driver ready, then kpreload switch: console lacks %q (%s)", want, res.Console)
			}
		}
	}()
	debs := debDisk(t, newKernel)
	for i, fw := range []string{qemu.FirmwareBIOS, qemu.FirmwareUEFI} {
		cfg := qemu.Config{
			Firmware: fw, RootDisk: disk, Snapshot: i > 0, // the first boot keeps what it did
			Devices: []string{"edu"}, Until: grubStepDone, Timeout: 420 * time.Second,
		}
		if i == 0 {
			cfg.Drives = []string{debs}
		}
		res, err := (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, cfg)
		if err != nil {
			t.Fatalf("%s boot: %v (console %v)", fw, err, res)
		}
		t.Logf("%s: booted to %q in %s", fw, res.UntilMatch, res.Duration.Round(time.Second))
		checkImageBoot(t, res, m, "root=UUID="+m.RootUUID+" ro "+cmdline)
		console, _ := os.ReadFile(res.Console)
		for _, want := range []string{
			"Booting `Debian GNU/Linux, with Linux " + testKernel + " (kpreload)'",
			"kpreload-test: first entry: Debian GNU/Linux, with Linux " + testKernel + " (kpreload)",
			"kpreload-test: kpreload-ready active",
		} {
			if !strings.Contains(string(console), want) {
				t.Errorf("%s boot: console lacks %q (%s)", fw, want, res.Console)
			}
		}
		var wants []string
		if i == 0 {
			// The kernel update: its hook builds its initramfs and entry, says the
			// cache has no driver cell for it, and keeps the default on the
			// kernel that has one.
			wants = []string{
				"kpreload-test: update-grub ok", "kpreload-test: dpkg -i ok",
				"kpreload-test: hook: built /boot/kpreload/initrd.img-" + newKernel,
				"kpreload-test: hook: WARNING: the module cache has no driver cell for kernel " + newKernel,
				"kpreload-test: hook: grub boots kernel " + testKernel + " with kpreload by default",
			}
		} else {
			// The next boot came back on the kernel with the driver (checked
			// above), both kernels are in the menu; removing the new kernel
			// (postrm) takes its entry away.
			wants = []string{
				"kpreload-test: status: default: " + testKernel + " (the newest kernel with its driver cells)",
				"kpreload-test: status:   " + newKernel + ": no driver cells",
				"kpreload-test: status: * " + testKernel + ": kpreload-edu 1.0.0",
				"kpreload-test: entry: Debian GNU/Linux, with Linux " + newKernel + " (kpreload)",
				"kpreload-test: dpkg -r ok",
				"kpreload-test: hook: removed the kpreload initramfs of " + newKernel,
				"kpreload-test: after removal entry: Debian GNU/Linux, with Linux " + testKernel + " (kpreload)",
			}
			if strings.Contains(string(console), "after removal entry: Debian GNU/Linux, with Linux "+newKernel+" (kpreload)") {
				t.Errorf("%s boot: the removed kernel's kpreload entry is still in grub.cfg (%s)", fw, res.Console)
			}
		}
		missing := false
		for _, want := range wants {
			if !strings.Contains(string(console), want) {
				t.Errorf("%s boot: console lacks %q (%s)", fw, want, res.Console)
				missing = true
			}
		}
		if missing {
			for _, l := range strings.Split(string(console), "\n") {
				if strings.Contains(l, "kpreload-test: ") {
					t.Log(l)
				}
			}
		}
	}
}
