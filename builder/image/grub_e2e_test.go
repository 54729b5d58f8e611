package image

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/internal/testenv"
)

// grubStep runs on every boot of the GRUB test image: the first boot runs
// the image's real update-grub (real grub-probe on the real disk, unlike the
// build), then every boot prints grub.cfg's first entry and whether
// kpreload-ready is active, on the console.
const grubStep = `#!/bin/sh
if [ ! -e /var/lib/kpreload-test-updated ]; then
	if update-grub >/dev/null 2>&1 && touch /var/lib/kpreload-test-updated && sync; then
		echo "kpreload-test: update-grub ok"
	else
		echo "kpreload-test: update-grub FAILED"
	fi
fi
echo "kpreload-test: first entry: $(grep -m1 '^menuentry ' /boot/grub/grub.cfg | cut -d"'" -f2)"
state=$(systemctl is-active kpreload-ready.service)
echo "kpreload-test: kpreload-ready $state"
if [ "$state" != active ]; then
	# No driver at boot: kpreload switch brings one up, and readiness follows.
	kpreload switch 1.0.0 >/dev/null 2>&1 && echo "kpreload-test: switch ok" || echo "kpreload-test: switch FAILED"
	sleep 2
	echo "kpreload-test: after switch kpreload-ready $(systemctl is-active kpreload-ready.service)"
fi
echo "kpreload-test: done"
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

// grubStepDone is the test step's last line.
var grubStepDone = regexp.MustCompile(`kpreload-test: done`)

// TestGRUBImageBIOSAndUEFI builds an image with --bootloader grub (one GPT
// disk with a BIOS boot partition and GRUB's UEFI image, grub.cfg made by the
// root's own grub-mkconfig with kpreload's /etc/grub.d script) and boots the
// same disk under SeaBIOS and under OVMF: GRUB boots kpreload's initramfs by
// default, the test driver is bound before the real init, kpreload-ready is
// active. The first boot (kept, --persist) runs the image's real update-grub;
// the second boot, through the other firmware, proves the regenerated
// grub.cfg still boots kpreload. A third boot asks for a version the cache
// lacks, so no driver is ready at boot: kpreload switch then brings the test
// driver up, and kpreload-ready follows (active).
func TestGRUBImageBIOSAndUEFI(t *testing.T) {
	if testing.Short() {
		t.Skip("mmdebstrap and two TCG boots; -short")
	}
	testenv.KernelTree(t, testKernel)
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
	for i, fw := range []string{qemu.FirmwareBIOS, qemu.FirmwareUEFI} {
		cfg := qemu.Config{
			Firmware: fw, RootDisk: disk, Snapshot: i > 0, // the first boot keeps update-grub's work
			Devices: []string{"edu"}, Until: grubStepDone, Timeout: 300 * time.Second,
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
		if i == 0 && !strings.Contains(string(console), "kpreload-test: update-grub ok") {
			t.Errorf("%s boot: the image's update-grub did not succeed (%s)", fw, res.Console)
		}
	}
}
