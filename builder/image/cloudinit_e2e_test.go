package image

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/boottest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// freePort returns a TCP port free on the host's loopback.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// hostKeyFingerprints are the SSH host key fingerprints cloud-init prints on
// the console, such as "256 SHA256:abc... root@host (ED25519)".
var hostKeyFingerprints = regexp.MustCompile(`(?m)^.*?(\d+ SHA256:\S+ \S+ \((?:ED25519|ECDSA|RSA)\))`)

// cloudInitDone is cloud-init's last console line of a boot.
var cloudInitDone = regexp.MustCompile(`Cloud-init v\. \S+ finished at`)

// sshRun runs a command in the guest as the default user over the forwarded
// port and returns its output's "key=value" lines.
func sshRun(ctx context.Context, key string, port int, command string) (map[string]string, string, error) {
	cmd := exec.CommandContext(ctx, "ssh", "-i", key, "-p", strconv.Itoa(port), "-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=30", "-o", "LogLevel=ERROR",
		"debian@127.0.0.1", command)
	b, err := cmd.CombinedOutput()
	said := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			said[k] = v
		}
	}
	if err != nil {
		return said, string(b), fmt.Errorf("ssh: %w: %s", err, b)
	}
	return said, string(b), nil
}

// guestReport is what the test reads back of the boot report over ssh, and
// cloud-init's own verdict once it is done (cloud-init status --wait --long:
// its exit status, 2 for a degraded run, and its lines).
const guestReport = `echo user=$(id -un); echo size=$(df -B1 --output=size / | tail -n1); echo machine-id=$(cat /etc/machine-id); ` +
	`sudo -n true && echo sudo=ok; echo report=$(sudo -n cat /run/kpreload/report.json | base64 -w0); echo ready=$(sudo -n cat /run/kpreload/ready | base64 -w0); ` +
	`s=$(sudo -n cloud-init status --wait --long 2>&1); echo cloud-init-rc=$?; echo cloud-init-status=$(printf '%s\n' "$s" | base64 -w0)`

// cloudInitWarnings are console lines of cloud-init's that make its status
// degraded: the request under a key its schema does not know, and no ip.
var cloudInitWarnings = regexp.MustCompile(`failed schema validation|Could not print networks|'kpreload' was unexpected`)

// cloudInitProblems says what is wrong with cloud-init's verdict read by
// guestReport: not done, an exit status other than 0 (22.4 has no degraded
// state; 23.4 and later exit 2 with recoverable errors), errors listed, or
// one of cloudInitWarnings on the console. It returns the status text too.
func cloudInitProblems(said map[string]string, console string) (status string, problems []string) {
	b, err := base64.StdEncoding.DecodeString(said["cloud-init-status"])
	if err != nil {
		return "", []string{fmt.Sprintf("cloud-init status %q: %v", said["cloud-init-status"], err)}
	}
	status = string(b)
	if rc := said["cloud-init-rc"]; rc != "0" {
		problems = append(problems, "cloud-init status exited "+rc)
	}
	if !regexp.MustCompile(`(?m)^status: done$`).MatchString(status) {
		problems = append(problems, "status is not done")
	}
	for _, l := range strings.Split(status, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.Contains(l, "degraded"):
			problems = append(problems, l)
		case strings.HasPrefix(l, "errors:") && l != "errors: []", strings.HasPrefix(l, "recoverable_errors:") && l != "recoverable_errors: {}":
			problems = append(problems, l+" (errors listed)")
		}
	}
	for _, m := range cloudInitWarnings.FindAllString(console, -1) {
		problems = append(problems, "console: "+m)
	}
	return status, problems
}

// checkCloudInitClean fails t with cloudInitProblems.
func checkCloudInitClean(t *testing.T, name string, said map[string]string, console string) {
	t.Helper()
	status, problems := cloudInitProblems(said, console)
	t.Logf("%s: cloud-init status --long (exit %s):\n%s", name, said["cloud-init-rc"], strings.TrimSpace(status))
	if len(problems) > 0 {
		t.Errorf("%s: cloud-init's verdict is not clean: %q; want done, exit 0, no errors or recoverable errors", name, problems)
	}
}

// TestCloudInitImage boots the shared image (ciImage: --cloud-init, the
// test driver 1.0.0 and 2.0.0, whose own instance file asks for 1.0.0) twice
// as a cloud would launch two instances of it, each with a NoCloud seed on
// virtio whose user-data asks for 2.0.0 in a write_files entry for
// /etc/kpreload/instance.yaml, then the trixie image (ciTrixieImage, the same
// drivers and file) once with the same seed. In every boot cloud-init's own
// verdict is clean: cloud-init status --long says done with no errors or
// recoverable errors (no schema warning, no missing ip), exit status 0:
//
//  1. A plain #cloud-config on a copy of the image's qcow2 made larger than
//     the image (QEMU told its format): /init reads the seed and 2.0.0 is
//     bound before the real init (the seed wins over the image's file, and
//     kpreload-user-data.service leaves it); ssh reaches the default user
//     with the seed's key over a port forwarded to the host's loopback; the
//     root filesystem fills the disk; the instance has a machine-id of its
//     own. The same boot carries TestBuildAndBootImage's boot checks: the
//     image boots through OVMF and systemd-boot to its default target with
//     the driver bound before the real init (checkImageBoot), and the
//     seed's runcmd runs the podman CDI check (podmanScript): containers see
//     the driver's device and library at 2.0.0, then at 1.0.0 after
//     kpreload switch.
//  2. The same request inside a MIME multipart archive, which only cloud-init
//     reads, on the raw image: 1.0.0 (the image's file) at boot, the report
//     noting why; then kpreload-user-data.service switches to 2.0.0, and the
//     report says both. This instance's SSH host keys differ from the first's.
//  3. Trixie (cloud-init 25.1, which rejects the deprecated kpreload: key in
//     its schema check) with the first instance's plain #cloud-config: /init
//     reads the seed and 2.0.0 is bound before the real init.
func TestCloudInitImage(t *testing.T) {
	ctx, _, _, progress := e2eStart(t, "mmdebstrap and two TCG boots with cloud-init", 40*time.Minute)
	img := ciImage(t)
	m := img.m
	cmdline := ciCmdline
	progress(fmt.Sprintf("shared image ready (built in %s by the first test that needed it)", img.took.Round(time.Second)))

	// The first instance's disk is a copy of the qcow2, larger than the image,
	// as a cloud makes it.
	dir := t.TempDir()
	qcow2, _ := formats.QEMU(formats.QCOW2)
	disk := filepath.Join(dir, "instance.qcow2")
	if out, err := exec.Command("cp", "--sparse=always", OutputPath(img.out, "ci", formats.QCOW2), disk).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	const diskBytes = 3 << 30
	if out, err := exec.Command("qemu-img", "resize", "-f", qcow2, disk, strconv.Itoa(diskBytes)).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img resize: %v\n%s", err, out)
	}
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kpreload-test", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	// One host key type: cloud-init's default list adds RSA-3072, DSA and ECDSA,
	// three key generations in each TCG boot that nothing here reads. One type
	// shows as well that each instance makes its own keys: cloud-init deletes
	// every host key the image might carry before it generates any.
	cloudConfig := "#cloud-config\nssh_authorized_keys:\n  - " + strings.TrimSpace(string(pub)) + "\n" +
		"ssh_genkeytypes: [ed25519]\n" +
		"write_files:\n  - path: /etc/kpreload/instance.yaml\n    content: |\n      resources:\n        driver:\n          version: \"2.0.0\"\n"
	// The first instance's seed also runs the podman CDI check, switching to
	// 1.0.0 (cloud-final: after multi-user.target, before cloud-init's last line).
	podmanConfig := cloudConfig + "runcmd:\n  - [" + podmanScriptPath + ", \"1.0.0\"]\n"

	type instanceRun struct {
		res  *qemu.Result
		said map[string]string
		rep  report.Report
		keys [][]string
	}
	boot := func(name string, cfg qemu.Config, userData, instanceID string) instanceRun {
		t.Helper()
		var said map[string]string
		run := func() (*qemu.Result, error) {
			port := freePort(t)
			c := cfg
			c.Firmware, c.Snapshot, c.Devices, c.Until = qemu.FirmwareUEFI, true, []string{"edu"}, cloudInitDone
			c.Drives = []string{testenv.NoCloudSeed(t, userData, instanceID)}
			c.HostForwards = []string{fmt.Sprintf("tcp:127.0.0.1:%d-:22", port)}
			c.AtUntil = func(ctx context.Context) error {
				var err error
				said, _, err = sshRun(ctx, key, port, guestReport)
				return err
			}
			return (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, c)
		}
		res, err := run()
		if err != nil && res != nil && res.TimedOut && !strings.Contains(readConsole(t, res), "Welcome to") {
			// TCG guests on this busy shared host now and then hang for good (as the boot
			// benchmark notes); one boot hung before systemd started is retried.
			t.Logf("%s: boot hung before systemd started (%v); booting again", name, err)
			res, err = run()
		}
		if res != nil && strings.Contains(userData, "runcmd:") {
			// Kept for whoever debugs a failure: the whole console of the podman boot.
			if b, rerr := os.ReadFile(res.Console); rerr == nil {
				os.WriteFile(filepath.Join(os.TempDir(), "kpreload-image-e2e-console.log"), b, 0o644)
			}
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, e2eLines(readConsole(t, res)))
		}
		r := instanceRun{res: res, said: said}
		b, err := base64.StdEncoding.DecodeString(said["report"])
		if err == nil {
			err = json.Unmarshal(b, &r.rep)
		}
		if err != nil {
			t.Fatalf("%s: the report read over ssh: %v (%q)", name, err, said["report"])
		}
		console, _ := os.ReadFile(res.Console)
		r.keys = hostKeyFingerprints.FindAllStringSubmatch(string(console), -1)
		checkCloudInitClean(t, name, said, string(console))
		t.Logf("%s: %q in %s; %s", name, res.UntilMatch, res.Duration.Round(time.Second), res.Report.Summary())
		if said["user"] != "debian" || said["sudo"] != "ok" {
			t.Errorf("%s: ssh said user %q, sudo %q: want the default user debian, with sudo", name, said["user"], said["sudo"])
		}
		if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(said["machine-id"]) {
			t.Errorf("%s: machine-id %q: want one made at first boot", name, said["machine-id"])
		}
		return r
	}
	chosen := func(rep *report.Report) string {
		if d := selectionOf(rep, "kpreload-edu"); d != nil && d.Chosen != nil {
			return d.Chosen.Version
		}
		return ""
	}

	// 1. A plain #cloud-config seed: /init honours it. The copy of the qcow2
	// boots through its bootloader, QEMU told its format.
	one := boot("instance 1", qemu.Config{RootDisk: disk, RootDiskFormat: qcow2, Memory: 2048, Timeout: testenv.Deadline(t, 15*time.Minute)},
		podmanConfig, "kpreload-test-1")
	if !slices.Contains(one.res.Args, "if=none,id=root,format="+qcow2+",file="+disk+",snapshot=on") {
		t.Errorf("instance 1: QEMU's arguments %q lack the qcow2 root disk with format=%s", one.res.Args, qcow2)
	}
	checkImageBoot(t, one.res, testKernel, cmdline)
	if !strings.Contains(one.res.Report.Cmdline, "root=UUID="+m.RootUUID) {
		t.Errorf("instance 1: report cmdline %q: want root=UUID=%s (the image's boot entry)", one.res.Report.Cmdline, m.RootUUID)
	}
	// systemd's status line, or (once the serial getty has hung the console
	// up) the podman check's systemctl through the kernel log.
	lines := e2eLines(readConsole(t, one.res))
	if !defaultTarget.MatchString(readConsole(t, one.res)) && !strings.Contains(lines, "default target active") {
		t.Errorf("instance 1: console lacks systemd reaching the default target (%s)", one.res.Console)
	}
	checkPodmanLines(t, lines, "2.0.0", "1.0.0")
	if got := chosen(one.res.Report); got != "2.0.0" || one.res.Report.Selection.Source != "seed" {
		t.Errorf("instance 1: /init chose %q from %q (%s), want 2.0.0 from the seed", got, one.res.Report.Selection.Source, one.res.Report.Selection.Origin)
	}
	if ud := one.rep.UserData; ud == nil || ud.Action != "none" || !strings.Contains(ud.Reason, "seed") {
		t.Errorf("instance 1: report user_data %+v, want none: the seed's request stands", ud)
	}
	if size, err := strconv.ParseInt(one.said["size"], 10, 64); err != nil || size < 5<<29 {
		t.Errorf("instance 1: root filesystem is %q bytes: want it grown to the %d-byte disk (the image's is %d MiB with its ESP)", one.said["size"], diskBytes, ciImageSizeMB)
	}

	// 2. The same request in a MIME multipart archive: applied after boot.
	mime := "Content-Type: multipart/mixed; boundary=\"==kpreload==\"\nMIME-Version: 1.0\n\n" +
		"--==kpreload==\nContent-Type: text/cloud-config; charset=\"us-ascii\"\nMIME-Version: 1.0\n\n" +
		cloudConfig + "\n--==kpreload==--\n"
	two := boot("instance 2", qemu.Config{RootDisk: OutputPath(img.out, "ci", formats.Raw), Timeout: testenv.Deadline(t, 600*time.Second)}, mime, "kpreload-test-2")
	if got := chosen(two.res.Report); got != "1.0.0" || two.res.Report.Selection.Source != "image" ||
		!strings.Contains(strings.Join(two.res.Report.Selection.Notes, " "), "not a plain #cloud-config") {
		t.Errorf("instance 2: /init chose %q from %q, notes %q: want 1.0.0 from the image's file, noting the seed's MIME user-data",
			got, two.res.Report.Selection.Source, two.res.Report.Selection.Notes)
	}
	if ud := two.rep.UserData; ud == nil || ud.Action != "switched" || ud.From != "1.0.0" || ud.To != "2.0.0" {
		t.Errorf("instance 2: report user_data %+v, want switched from 1.0.0 to 2.0.0", ud)
	}
	var ready struct {
		Version string `json:"version"`
	}
	if b, err := base64.StdEncoding.DecodeString(two.said["ready"]); err != nil || json.Unmarshal(b, &ready) != nil || ready.Version != "2.0.0" {
		t.Errorf("instance 2: /run/kpreload/ready %q, want 2.0.0 active", two.said["ready"])
	}

	// 3. Trixie's cloud-init, the seed of the first instance.
	tx := ciTrixieImage(t)
	progress(fmt.Sprintf("trixie image ready (built in %s)", tx.took.Round(time.Second)))
	three := boot("instance 3 (trixie)", qemu.Config{RootDisk: OutputPath(tx.out, "ci-trixie", formats.Raw), Timeout: testenv.Deadline(t, 600*time.Second)}, cloudConfig, "kpreload-test-3")
	checkDriverBoundBeforeInit(t, "instance 3 (trixie)", three.res)
	if got := chosen(three.res.Report); got != "2.0.0" || three.res.Report.Selection.Source != "seed" || three.res.Report.Kernel != trixieKernel {
		t.Errorf("instance 3 (trixie): /init chose %q from %q on kernel %q, want 2.0.0 from the seed on %s", got, three.res.Report.Selection.Source, three.res.Report.Kernel, trixieKernel)
	}
	if ud := three.rep.UserData; ud == nil || ud.Action != "none" || !strings.Contains(ud.Reason, "seed") {
		t.Errorf("instance 3 (trixie): report user_data %+v, want none: the seed's request stands", ud)
	}

	if len(one.keys) == 0 || len(two.keys) == 0 {
		t.Fatalf("host key fingerprints on the consoles: %d and %d, want cloud-init's", len(one.keys), len(two.keys))
	}
	for _, a := range one.keys {
		for _, b := range two.keys {
			if a[1] == b[1] {
				t.Errorf("both instances have host key %s", a[1])
			}
		}
	}
	t.Logf("host keys: instance 1 %q, instance 2 %q", one.keys[0][1], two.keys[0][1])
}

// checkDriverBoundBeforeInit checks that the test driver was loaded after the
// root and bound before the real init ran: the probe's kernel line before
// systemd's start line where it logs to the kernel (bookworm's does), else
// before its first target (trixie's systemd writes its start line to the
// console without a printk time).
func checkDriverBoundBeforeInit(t *testing.T, name string, res *qemu.Result) {
	t.Helper()
	if res.Report == nil {
		t.Fatalf("%s: no kpreload report on the report channel; warnings %v; console %s", name, res.Warnings, res.Console)
	}
	boottest.CheckEduLoaded(t, res.Report, "rootfs")
	probe, ok := qemu.Find(res.Kernel, "bound, id 0x010000ed")
	systemd, sok := qemu.Find(res.Kernel, "running in system mode")
	if !sok {
		systemd, sok = qemu.Find(res.Kernel, "Reached target ")
	}
	if !ok || !sok || probe.Time >= systemd.Time {
		t.Errorf("%s: test driver probe line %+v (found %v), systemd's start %+v (found %v): want the probe logged before the real init ran", name, probe, ok, systemd, sok)
	}
}
