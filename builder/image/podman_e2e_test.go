package image

import (
	"os"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/qemu"
)

// podmanScriptPath is where the shared image (ciImage) carries podmanScript.
const podmanScriptPath = "/usr/local/sbin/kpreload-podman-e2e"

// podmanScript runs inside the booted image, from the first cloud-init
// instance's user-data (runcmd: cloud-final, after multi-user.target, so the
// test driver is active and its CDI spec written by kpreload-cdi), with the
// version to switch to as its argument, and prints every finding on the
// console behind "E2E: ", through the kernel log (/dev/kmsg, unthrottled): a
// write to /dev/ttyS0 dies once the serial getty starts and hangs the line
// up. The container root is a tarball of the VM's own loader, libc, sh and
// cat, imported offline: the driver's library and program come from the CDI
// spec, nothing else.
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
if kpreload switch "$1" >/tmp/switch.log 2>&1; then say "switch ok"; else say "switch failed: $(tail -5 /tmp/switch.log)"; fi
say "ready $(tr -d '\n ' </run/kpreload/ready)"
for n in /dev/kpreload-edu*; do say "node $n $(cat $n)"; done
say "specs $(ls /var/run/cdi)"
container second
T=$(systemctl get-default)
for i in $(seq 120); do systemctl is-active -q $T && break; sleep 1; done
say "default target $(systemctl is-active $T)"
say "drivers target $(systemctl is-active kpreload-drivers.target)"
say "end"
`

// podmanMaskedUnits are the units Debian's podman package enables (its API
// service and socket, podman-restart, and a daily auto-update whose timer
// fires at first boot): each runs podman in both cloud-init instances' TCG
// boots, and the CDI check, which runs podman itself, reads none of them.
// ciImage masks them with an empty unit file in /etc (systemd.unit(5)).
var podmanMaskedUnits = []string{"podman.service", "podman.socket", "podman-restart.service", "podman-auto-update.service", "podman-auto-update.timer"}

// containersConf and storageConf make every podman of the VM use one storage
// driver and no systemd D-Bus: minbase images have no D-Bus, and TCG guests
// have no need for overlayfs.
const containersConf = `[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
`

const storageConf = `[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
`

// checkPodmanLines checks the in-VM podman CDI check's lines (podmanScript's
// findings, e2eLines of the console): first is the version active at boot,
// second the one podmanScript switched to.
func checkPodmanLines(t *testing.T, lines, first, second string) {
	t.Helper()
	t.Logf("podman CDI check:\n%s", lines)
	for _, want := range []string{
		`"driver":"kpreload-edu","version":"` + first + `"`,
		"node /dev/kpreload-edu0 kpreload-edu " + first + " id 0x010000ed",
		"specs kpreload-edu.yaml",
		`report cdi "cdi":{"path":"/var/run/cdi/kpreload-edu.yaml","sha256":"`,
		"first library " + first + " (libkpreload_edu.so.1)",
		"first device /dev/kpreload-edu0: kpreload-edu " + first + " id 0x010000ed",
		"first rc=0",
		"switch ok",
		`"driver":"kpreload-edu","version":"` + second + `"`,
		"second library " + second + " (libkpreload_edu.so.1)",
		"second device /dev/kpreload-edu0: kpreload-edu " + second + " id 0x010000ed",
		"second rc=0",
		"default target active",
		"drivers target active",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("the in-VM podman CDI check lacks %q", want)
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
