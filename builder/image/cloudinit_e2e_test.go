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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/report"
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

// guestReport is what the test reads back of the boot report over ssh.
const guestReport = `echo user=$(id -un); echo size=$(df -B1 --output=size / | tail -n1); echo machine-id=$(cat /etc/machine-id); ` +
	`sudo -n true && echo sudo=ok; echo report=$(sudo -n cat /run/kpreload/report.json | base64 -w0); echo ready=$(sudo -n cat /run/kpreload/ready | base64 -w0)`

// TestCloudInitImage builds an image with --cloud-init carrying the test
// driver 1.0.0 and 2.0.0, whose own instance file asks for 1.0.0, and boots
// it twice as a cloud would launch two instances of it, each with a NoCloud
// seed on virtio whose user-data asks for 2.0.0 under the kpreload: key:
//
//  1. A plain #cloud-config on a disk made larger than the image: /init reads
//     the seed and 2.0.0 is bound before the real init (the seed wins over
//     the image's file, and kpreload-user-data.service leaves it); ssh reaches
//     the default user with the seed's key over a port forwarded to the
//     host's loopback; the root filesystem fills the disk; the instance has a
//     machine-id of its own.
//  2. The same request inside a MIME multipart archive, which only cloud-init
//     reads: 1.0.0 (the image's file) at boot, the report noting why; then
//     kpreload-user-data.service switches to 2.0.0, and the report says both.
//     This instance's SSH host keys differ from the first's.
func TestCloudInitImage(t *testing.T) {
	ctx, kpreload, initBin, progress := e2eStart(t, "mmdebstrap and two TCG boots with cloud-init", 40*time.Minute)
	cache, recipes := bothVersionsCache(t)
	out := t.TempDir()
	cmdline := "console=ttyS0 panic=-1 kpreload.report=" + qemu.ReportDevice
	m, err := Build(ctx, Options{
		Name: "cloud", OutDir: out, Kernels: []string{testKernel}, Recipes: recipes, CacheDir: cache,
		Instance:  filepath.Join(testenv.RepoRoot(t), "images", "instance-testdriver.yaml"),
		CloudInit: true, SizeMB: 1536, ESPSizeMB: 64, Formats: []string{FormatRaw}, Cmdline: cmdline,
		KpreloadBinary: kpreload, InitBinary: initBin, TempDir: t.TempDir(), Progress: progress,
	})
	if err != nil {
		t.Fatal(err)
	}

	// The first instance's disk is larger than the image, as a cloud makes it.
	dir := t.TempDir()
	disk := filepath.Join(dir, "instance.raw")
	if out, err := exec.Command("cp", "--sparse=always", m.Files[0].Path, disk).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	const diskBytes = 3 << 30
	if out, err := exec.Command("qemu-img", "resize", "-f", "raw", disk, strconv.Itoa(diskBytes)).CombinedOutput(); err != nil {
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
	cloudConfig := "#cloud-config\nssh_authorized_keys:\n  - " + strings.TrimSpace(string(pub)) + "\n" +
		"kpreload:\n  resources:\n    driver:\n      version: \"2.0.0\"\n"

	type instanceRun struct {
		res  *qemu.Result
		said map[string]string
		rep  report.Report
		keys [][]string
	}
	boot := func(name, rootDisk, userData, instanceID string) instanceRun {
		t.Helper()
		port := freePort(t)
		var said map[string]string
		res, err := (&qemu.Runner{WorkDir: t.TempDir()}).Run(ctx, qemu.Config{
			Firmware: qemu.FirmwareUEFI, RootDisk: rootDisk, Snapshot: true,
			Drives:       []string{testenv.NoCloudSeed(t, userData, instanceID)},
			HostForwards: []string{fmt.Sprintf("tcp:127.0.0.1:%d-:22", port)},
			Devices:      []string{"edu"}, Until: cloudInitDone, Timeout: testenv.Deadline(t, 600*time.Second),
			AtUntil: func(ctx context.Context) error {
				var err error
				said, _, err = sshRun(ctx, key, port, guestReport)
				return err
			},
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
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

	// 1. A plain #cloud-config seed: /init honours it.
	one := boot("instance 1", disk, cloudConfig, "kpreload-test-1")
	checkImageBoot(t, one.res, testKernel, cmdline)
	if got := chosen(one.res.Report); got != "2.0.0" || one.res.Report.Selection.Source != "seed" {
		t.Errorf("instance 1: /init chose %q from %q (%s), want 2.0.0 from the seed", got, one.res.Report.Selection.Source, one.res.Report.Selection.Origin)
	}
	if ud := one.rep.UserData; ud == nil || ud.Action != "none" || !strings.Contains(ud.Reason, "seed") {
		t.Errorf("instance 1: report user_data %+v, want none: the seed's request stands", ud)
	}
	if size, err := strconv.ParseInt(one.said["size"], 10, 64); err != nil || size < 2<<30 {
		t.Errorf("instance 1: root filesystem is %q bytes: want it grown to the %d-byte disk (the image's is 1.5 GiB)", one.said["size"], diskBytes)
	}

	// 2. The same request in a MIME multipart archive: applied after boot.
	mime := "Content-Type: multipart/mixed; boundary=\"==kpreload==\"\nMIME-Version: 1.0\n\n" +
		"--==kpreload==\nContent-Type: text/cloud-config; charset=\"us-ascii\"\nMIME-Version: 1.0\n\n" +
		cloudConfig + "\n--==kpreload==--\n"
	two := boot("instance 2", m.Files[0].Path, mime, "kpreload-test-2")
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
