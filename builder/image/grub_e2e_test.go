package image

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/testsupport/boottest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// grubStep runs on every boot of the GRUB test image and prints what it sees
// and does on the console, one "kpreload-test:" line each. Which phase runs
// follows from what earlier boots left on the disk and the running kernel.
const grubStep = `#!/bin/sh
say() { echo "kpreload-test: $*"; }
entries() { grep -o "^menuentry '[^']*'" /boot/grub/grub.cfg | cut -d"'" -f2 | sed "s/^/kpreload-test: $1entry: /"; }
hook() { sed -n 's/^kpreload: /kpreload-test: hook: /p' "$1"; }
old=6.1.0-56-cloud-amd64
new=6.12.117+deb12-cloud-amd64
state=$(systemctl is-active kpreload-ready.service)
say "running $(uname -r), kpreload-ready $state"
say "first entry: $(grep -m1 '^menuentry ' /boot/grub/grub.cfg | cut -d"'" -f2)"
if [ ! -e /var/lib/kpreload-test-1 ]; then
	# 1: the image's real update-grub, then a kernel update from the second
	# disk as apt installs it (postinst.d), with no registry reachable.
	update-grub >/dev/null 2>&1 && say "update-grub ok" || say "update-grub FAILED"
	mkdir -p /mnt/debs && mount -o ro /dev/vdb /mnt/debs
	dpkg -i /mnt/debs/*.deb >/tmp/dpkg.log 2>&1 && say "dpkg -i ok" || { say "dpkg -i FAILED"; tail -n 15 /tmp/dpkg.log | sed 's/^/kpreload-test: dpkg: /'; }
	hook /tmp/dpkg.log
	touch /var/lib/kpreload-test-1
elif [ "$state" = active ] && [ "$(uname -r)" = "$old" ]; then
	# 2: back on the kernel with the driver; the registry is reachable now:
	# the kernel's postinst again (dpkg-reconfigure) pulls its cell.
	kpreload status | sed 's/^/kpreload-test: status: /'
	entries ""
	/lib/systemd/systemd-networkd-wait-online --timeout=60 >/dev/null 2>&1 || say "network not online"
	pkg=$(dpkg-query -W -f '${Package} ${Status}\n' "linux-image-$new*" | awk '/ installed$/ { print $1 }')
	DEBIAN_FRONTEND=noninteractive dpkg-reconfigure "$pkg" >/tmp/reconf.log 2>&1 && say "reconfigure ok" || { say "reconfigure FAILED"; tail -n 15 /tmp/reconf.log | sed 's/^/kpreload-test: dpkg: /'; }
	hook /tmp/reconf.log
elif [ "$state" = active ]; then
	# 3: on the new kernel with the pulled driver; removing the old kernel
	# (postrm.d) takes its entries away.
	pkg=$(dpkg-query -W -f '${Package} ${Status}\n' "linux-image-$old*" | awk '/ installed$/ { print $1 }')
	dpkg -r "$pkg" >/tmp/dpkg-r.log 2>&1 && say "dpkg -r ok" || { say "dpkg -r FAILED"; tail -n 15 /tmp/dpkg-r.log | sed 's/^/kpreload-test: dpkg: /'; }
	hook /tmp/dpkg-r.log
	entries "after removal "
else
	# 4: no driver at boot: kpreload switch brings one up, and readiness follows.
	kpreload switch 1.0.0 >/dev/null 2>&1 && say "switch ok" || say "switch FAILED"
	sleep 2
	say "after switch kpreload-ready $(systemctl is-active kpreload-ready.service)"
fi
sync
say "done"
`

// newKernel is the kernel update the GRUB test installs in the VM: the 6.12
// backports kernel.
const newKernel = "6.12.117+deb12-cloud-amd64"

// guestRegistry is where the guest reaches the test's registry.
const guestRegistry = "10.0.2.100:5000"

// debDisk makes an ext4 disk image holding the linux-image .deb of kernel
// (from the download cache scripts/kernels.sh fills), for the guest to
// install from, and returns its path.
func debDisk(t *testing.T, kernel string) string {
	t.Helper()
	debs, _ := filepath.Glob(filepath.Join(testenv.CacheRoot(), "debs", "linux-image-"+kernel+"*_amd64.deb"))
	if len(debs) != 1 {
		t.Fatalf("the linux-image .deb of %s is not in %s/debs (found %v): run scripts/kernels.sh %s", kernel, testenv.CacheRoot(), debs, kernel)
	}
	dir := t.TempDir()
	if err := fileutil.CopyFile(debs[0], filepath.Join(dir, filepath.Base(debs[0])), 0o644); err != nil {
		t.Fatal(err)
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
// root's own grub-mkconfig with kpreload's /etc/grub.d script) and a registry
// configuration, and boots the same disk four times, through SeaBIOS and OVMF
// in turn. Every boot: GRUB boots kpreload's initramfs by default, the test
// driver is bound before the real init.
//
//  1. The image's real update-grub, then the 6.12 backports kernel installed
//     with dpkg -i from a second disk, with no registry reachable: its hook
//     builds its initramfs and entry, says the cache has no cell for it, and
//     the default stays on 6.1.
//  2. Back on 6.1 with the driver; kpreload status and grub.cfg list both
//     kernels. Now a real registry on the host's loopback is reachable
//     through QEMU's user network: the 6.12 kernel's postinst again
//     (dpkg-reconfigure) pulls its signed cell, and 6.12 becomes the default.
//  3. GRUB boots 6.12 with the pulled driver bound; dpkg -r of the 6.1 kernel
//     (postrm) takes its entries away.
//  4. A request for a version the cache lacks: no driver is ready at boot;
//     kpreload switch brings the test driver up, and kpreload-ready follows.
func TestGRUBImageBIOSAndUEFI(t *testing.T) {
	if testing.Short() {
		t.Skip("mmdebstrap and four TCG boots; -short")
	}
	testenv.KernelTree(t, testKernel)
	testenv.KernelTree(t, newKernel) // and its .deb in the download cache
	cache, recipes := testCache(t)
	kpreload, initBin := binaries(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 40*time.Minute))
	defer cancel()

	// The registry: the test driver's 6.12 cell, built by the real dkms and
	// signed by the builder's key, which the image trusts.
	signer, err := cellsign.Generate(filepath.Join(dir, "builder.key"), filepath.Join(dir, "builder.pub"))
	if err != nil {
		t.Fatal(err)
	}
	reg := testenv.StartRegistry(t)
	rm, err := remote.Open("oci://"+reg.Addr+"/cells", remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(dir, "none.json"), Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := matrix.Run(ctx, matrix.Options{Recipes: recipes, Kernels: []string{newKernel}, CacheDir: t.TempDir(), Remote: rm}); err != nil || len(res) != 1 || res[0].Remote != "pushed" {
		t.Fatalf("build and push the 6.12 cell: %+v, %v", res, err)
	}
	files := map[string]string{}
	for name, text := range map[string]string{
		"step": grubStep, "unit": boottest.StepUnit("kpreload GRUB image test step"),
		"remote.yaml": "remote: oci://" + guestRegistry + "/cells\nplain_http: true\ntrust: [builder.pub]\ntimeout: 2m\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files[boottest.StepScript] = filepath.Join(dir, "step")
	files["/etc/systemd/system/"+boottest.StepService] = filepath.Join(dir, "unit")

	out := t.TempDir()
	start := time.Now()
	// No kpreload.report= (as "kpreload image build --help" shows): the harness
	// names the report channel through fw_cfg, and the report still comes back on it.
	cmdline := "console=ttyS0 panic=-1"
	m, err := Build(ctx, Options{
		Name: "grub", OutDir: out, Kernels: []string{testKernel}, Recipes: recipes, CacheDir: cache,
		Bootloader: install.GRUB, SizeMB: 1536, ESPSizeMB: 64, Formats: []string{FormatRaw},
		Cmdline: cmdline, Files: files, Enable: []string{boottest.StepService},
		Instance:       filepath.Join(testenv.RepoRoot(t), "images", "instance-testdriver.yaml"),
		RemoteConfig:   filepath.Join(dir, "remote.yaml"),
		KpreloadBinary: kpreload, InitBinary: initBin, TempDir: t.TempDir(),
		Progress: func(msg string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), msg) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Bootloader != install.GRUB || len(m.Files) != 1 {
		t.Fatalf("manifest bootloader %q, files %+v: want grub and one raw disk", m.Bootloader, m.Files)
	}
	// A cached version in a flavour the cache lacks: refused at boot (a
	// version the image lacks altogether would go on with the default).
	refused := filepath.Join(dir, "refused.yaml")
	if err := os.WriteFile(refused, []byte("resources:\n  driver:\n    version: \"1.0.0\"\n    flavor: proprietary\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	entry := func(k string) string { return "Debian GNU/Linux, with Linux " + k + " (kpreload)" }
	boots := []struct {
		fw     string
		kernel string // "" when no driver is bound at boot
		cfg    func(*qemu.Config)
		wants  []string
		nots   []string
	}{
		{qemu.FirmwareBIOS, testKernel, func(c *qemu.Config) { c.Drives = []string{debDisk(t, newKernel)} }, []string{
			"kpreload-test: update-grub ok", "kpreload-test: dpkg -i ok",
			"kpreload-test: hook: built /boot/kpreload/initrd.img-" + newKernel,
			"kpreload-test: hook: WARNING: the module cache has no driver cell for kernel " + newKernel,
			"kpreload-test: hook: grub boots kernel " + testKernel + " with kpreload by default",
		}, nil},
		{qemu.FirmwareUEFI, testKernel, func(c *qemu.Config) {
			c.GuestForwards = []string{"tcp:" + guestRegistry + "-tcp:" + reg.Addr}
		}, []string{
			"kpreload-test: status: default: " + testKernel + " (the newest kernel with its driver cells)",
			"kpreload-test: status:   " + newKernel + ": no driver cells",
			"kpreload-test: status: * " + testKernel + ": kpreload-edu 1.0.0",
			"kpreload-test: entry: " + entry(newKernel),
			"kpreload-test: reconfigure ok",
			"kpreload-test: hook: pulled kpreload-edu 1.0.0 open (set ",
			"kpreload-test: hook: grub boots kernel " + newKernel + " with kpreload by default",
		}, nil},
		{qemu.FirmwareBIOS, newKernel, nil, []string{
			"kpreload-test: first entry: " + entry(newKernel),
			"kpreload-test: dpkg -r ok",
			"kpreload-test: after removal entry: " + entry(newKernel),
		}, []string{"kpreload-test: after removal entry: " + entry(testKernel)}},
		{qemu.FirmwareBIOS, "", func(c *qemu.Config) {
			c.FwCfg = map[string]string{"kpreload/instance.yaml": refused}
		}, []string{
			"kpreload-test: running " + newKernel + ", kpreload-ready failed",
			"kpreload-test: switch ok", "kpreload-test: after switch kpreload-ready active",
		}, nil},
	}
	for i, b := range boots {
		cfg := qemu.Config{
			Firmware: b.fw, RootDisk: m.Files[0].Path, Snapshot: i >= 2, // boots 1 and 2 keep what they did
			Devices: []string{"edu"}, Until: grubStepDone, Timeout: testenv.Deadline(t, 420*time.Second),
		}
		if b.cfg != nil {
			b.cfg(&cfg)
		}
		name := fmt.Sprintf("boot %d (%s)", i+1, b.fw)
		res, err := (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: booted to %q in %s", name, res.UntilMatch, res.Duration.Round(time.Second))
		console, _ := os.ReadFile(res.Console)
		if b.kernel != "" {
			checkImageBoot(t, res, b.kernel, "root=UUID="+m.RootUUID+" ro "+cmdline)
			if strings.Contains(res.Report.Cmdline, "kpreload.report=") || slices.Contains(res.Warnings, "report read from the console, not the report channel") {
				t.Errorf("%s: cmdline %q, warnings %q: want the report on the channel fw_cfg named", name, res.Report.Cmdline, res.Warnings)
			}
			b.wants = append(b.wants, "Booting `"+entry(b.kernel)+"'", "kpreload-test: running "+b.kernel+", kpreload-ready active")
		}
		bad := false
		for _, want := range b.wants {
			if !strings.Contains(string(console), want) {
				t.Errorf("%s: console lacks %q", name, want)
				bad = true
			}
		}
		for _, not := range b.nots {
			if strings.Contains(string(console), not) {
				t.Errorf("%s: console has %q", name, not)
				bad = true
			}
		}
		if bad {
			for _, l := range strings.Split(string(console), "\n") {
				if strings.Contains(l, "kpreload-test: ") {
					t.Log(l)
				}
			}
			t.FailNow()
		}
	}
}
