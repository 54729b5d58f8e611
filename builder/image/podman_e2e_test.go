package image

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// podmanScript runs inside the booted image once kpreload-drivers.target is
// reached (the test driver active, its CDI spec written by kpreload-cdi), and
// prints every finding on the console behind "E2E: ", through the kernel log
// (/dev/kmsg, unthrottled): a write to /dev/ttyS0 dies once the serial getty
// starts and hangs the line up. The container root is a
// tarball of the VM's own loader, libc, sh and cat, imported offline: the
// driver's library and program come from the CDI spec, nothing else.
const podmanScript = `#!/bin/sh
echo on >/proc/sys/kernel/printk_devkmsg
exec >/dev/kmsg 2>&1
say() { echo "E2E: $*"; }
say "begin"
say "ready $(tr -d '\n ' </run/kpreload/ready)"
for n in /dev/kpreload-edu*; do say "node $n $(cat $n)"; done
say "specs $(ls /var/run/cdi)"
say "report cdi $(tr -d '\n ' </run/kpreload/report.json | grep -o '"cdi":{[^}]*}')"
R=/tmp/croot
mkdir -p $R/bin $R/lib64 $R/usr/lib/x86_64-linux-gnu $R/usr/bin $R/etc $R/dev $R/proc $R/sys $R/tmp
ln -s usr/lib $R/lib
cp -L /lib64/ld-linux-x86-64.so.2 $R/lib64/
cp -L /lib/x86_64-linux-gnu/libc.so.6 $R/usr/lib/x86_64-linux-gnu/
cp -L /bin/dash $R/bin/sh
cp -L /bin/cat $R/bin/cat
tar -C $R -cf /tmp/croot.tar .
P=podman
say "podman $($P --version)"
$P import /tmp/croot.tar localhost/edu-base >/tmp/import.log 2>&1 || { say "import failed: $(tail -3 /tmp/import.log)"; }
container() {
	out=$($P run --rm --network none --device kpreload.dev/edu=all localhost/edu-base /usr/bin/kpreload-edu-version 2>&1; echo "rc=$?")
	echo "$out" | while IFS= read -r l; do echo "E2E: $1 $l"; done
}
container first
if kpreload switch 2.0.0 >/tmp/switch.log 2>&1; then say "switch ok"; else say "switch failed: $(tail -5 /tmp/switch.log)"; fi
say "ready $(tr -d '\n ' </run/kpreload/ready)"
for n in /dev/kpreload-edu*; do say "node $n $(cat $n)"; done
say "specs $(ls /var/run/cdi)"
container second
say "end"
systemctl poweroff
`

// containersConf and storageConf make every podman of the VM (the check's and
// the units Debian's package brings) use one storage driver and no systemd
// D-Bus: minbase images have no D-Bus, and TCG guests have no need for
// overlayfs.
const containersConf = `[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
`

const storageConf = `[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
`

const podmanUnit = `[Unit]
Description=kpreload podman CDI end-to-end check
After=kpreload-drivers.target kpreload-cdi.service
Wants=kpreload-drivers.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/kpreload-podman-e2e
TimeoutStartSec=900

[Install]
WantedBy=multi-user.target
`

// TestPodmanCDI is issue 10's proof with a real container runtime: an image
// carrying both versions of the test driver, each with its userspace built
// from C, Debian's podman and crun, boots in QEMU through its bootloader with
// -device edu; a container started with --device kpreload.dev/edu=all sees
// /dev/kpreload-edu0 and loads libkpreload_edu.so.1 (mounted by the CDI spec,
// found through the ld cache the spec's hook made), whose version equals the
// loaded module's (1.0.0, as the image's instance YAML asks); after
// kpreload switch 2.0.0 a new container sees 2.0.0 in both.
func TestPodmanCDI(t *testing.T) {
	if testing.Short() {
		t.Skip("mmdebstrap with podman and a UEFI boot under TCG; -short")
	}
	testenv.KernelTree(t, testKernel)
	kpreload, initBin := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 40*time.Minute))
	defer cancel()
	cache, recipes := bothVersionsCache(t)
	files := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(files, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	instance := write("instance.yaml", "resources:\n  driver:\n    version: \"1.0.0\"\n", 0o644)
	out := t.TempDir()
	start := time.Now()
	m, err := Build(ctx, Options{
		Name: "podman", OutDir: out, Kernels: []string{testKernel}, Recipes: recipes, CacheDir: cache,
		Instance: instance, SizeMB: 2048, ESPSizeMB: 128, Formats: []string{FormatQCOW2},
		Packages: []string{"podman", "crun"},
		Files: map[string]string{
			"/usr/local/sbin/kpreload-podman-e2e":             write("script", podmanScript, 0o755),
			"/etc/systemd/system/kpreload-podman-e2e.service": write("unit", podmanUnit, 0o644),
			"/etc/containers/containers.conf":                 write("containers.conf", containersConf, 0o644),
			"/etc/containers/storage.conf":                    write("storage.conf", storageConf, 0o644),
		},
		Enable:         []string{"kpreload-podman-e2e.service"},
		Cmdline:        "console=ttyS0 panic=-1 kpreload.report=" + qemu.ReportDevice,
		KpreloadBinary: kpreload, InitBinary: initBin, TempDir: t.TempDir(),
		Progress: func(msg string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), msg) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1.0.0", "2.0.0"} {
		if got := strings.Join(m.Userspace[v], " "); got != "source:testdriver-userspace" {
			t.Errorf("userspace of %s = %q, want built from testdriver-userspace", v, got)
		}
	}
	cfg := qemu.Config{
		Firmware: qemu.FirmwareUEFI,
		RootDisk: m.Files[0].Path,
		Devices:  []string{"edu"},
		Memory:   2048,
		Until:    regexp.MustCompile(`E2E: end`),
		Timeout:  testenv.Deadline(t, 15*time.Minute),
	}
	res, err := (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, cfg)
	if err != nil && res != nil && res.TimedOut && !strings.Contains(readConsole(t, res), "E2E: begin") {
		t.Logf("first boot hung before the check started (%v); booting again", err)
		res, err = (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, cfg)
	}
	if res != nil {
		// Kept for whoever debugs a failure: the whole console of the check.
		if b, rerr := os.ReadFile(res.Console); rerr == nil {
			os.WriteFile(filepath.Join(os.TempDir(), "kpreload-podman-e2e-console.log"), b, 0o644)
		}
	}
	if err != nil {
		t.Fatalf("UEFI boot: %v\n%s", err, e2eLines(readConsole(t, res)))
	}
	lines := e2eLines(readConsole(t, res))
	t.Logf("booted and checked in %s:\n%s", res.Duration.Round(time.Second), lines)
	for _, want := range []string{
		`"driver":"kpreload-edu","version":"1.0.0"`,
		"node /dev/kpreload-edu0 kpreload-edu 1.0.0 id 0x010000ed",
		"specs kpreload-edu.yaml",
		`report cdi "cdi":{"path":"/var/run/cdi/kpreload-edu.yaml","sha256":"`,
		"first library 1.0.0 (libkpreload_edu.so.1)",
		"first device /dev/kpreload-edu0: kpreload-edu 1.0.0 id 0x010000ed",
		"first rc=0",
		"switch ok",
		`"driver":"kpreload-edu","version":"2.0.0"`,
		"second library 2.0.0 (libkpreload_edu.so.1)",
		"second device /dev/kpreload-edu0: kpreload-edu 2.0.0 id 0x010000ed",
		"second rc=0",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("the in-VM check lacks %q", want)
		}
	}
}

func readConsole(t *testing.T, res *qemu.Result) string {
	t.Helper()
	if res == nil {
		return ""
	}
	b, _ := os.ReadFile(res.Console)
	return string(b)
}

// e2eLines keeps the console lines of the in-VM check.
func e2eLines(console string) string {
	var out []string
	for _, l := range strings.Split(console, "\n") {
		if i := strings.Index(l, "E2E: "); i >= 0 {
			out = append(out, strings.TrimRight(l[i+len("E2E: "):], "\r"))
		}
	}
	return strings.Join(out, "\n")
}
