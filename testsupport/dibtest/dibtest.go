// Package dibtest is the tests' image another tool made: a Debian 12 VM image
// built by diskimage-builder (disk-image-create), once per machine, as
// OpenStack users build theirs. builder/adopt's install --stage and the Packer
// provisioner in Packer's QEMU builder (builder/packer-plugin-kpreload/e2e) both start from
// it; both boot what they made with `kpreload boot --image … --firmware bios
// --device edu --json` and check it with CheckBoundBeforeSystemd. GrubRoot is a
// smaller image, mmdebstrap's Debian root with GRUB, for the tests that run
// a real root's GRUB tools in their sandbox without a VM. It imports
// testenv, boottest, report and internal/flock only, so the builder's tests use it.
package dibtest

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/internal/flock"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/boottest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// The image's login: a non-root user with this password and passwordless
// sudo (diskimage-builder's devuser element), reachable over SSH.
const (
	User     = "devuser"
	Password = "devuser"
)

// Elements and Env are how the image is made: a Debian 12 VM image
// (Debian's generic -amd64 kernel, GRUB for BIOS, cloud console settings in
// GRUB_CMDLINE_LINUX_DEFAULT), User with sudo, an SSH server whose host
// keys are made at first boot (runtime-ssh-host-keys: DIB removes the ones
// the package made) and DHCP on every NIC (dhcp-all-interfaces: ifupdown
// and dhclient; debian-minimal alone configures an eth0 that systemd's
// interface names never give, with no DHCP client to bring it up), as
// OpenStack users build them; dhclient-lease-dir, an element of this
// package's (elements/), works around dhcp-all-interfaces writing to
// Fedora's /var/lib/dhclient, which fails on Debian once an IPv6 router
// answers (QEMU's user network does) and leaves the NIC without an address. DIB 3.13 names bookworm's security suite in
// the old layout (bookworm/updates, which the archive answers with 400):
// DIB_DEBIAN_SECURITY_SUBPATH gives today's name, and the security archive
// is read from deb.debian.org's mirror of it, as scripts/deps.sh does.
var (
	Elements = []string{"vm", "debian-minimal", "devuser", "openssh-server", "runtime-ssh-host-keys", "dhcp-all-interfaces", "dhclient-lease-dir"}
	Env      = []string{"DIB_RELEASE=bookworm", "DIB_DEBIAN_SECURITY_MIRROR=http://deb.debian.org/debian-security", "DIB_DEBIAN_SECURITY_SUBPATH=-security", "DIB_DEV_USER_USERNAME=" + User, "DIB_DEV_USER_PWDLESS_SUDO=yes", "DIB_DEV_USER_PASSWORD=" + Password}
)

// blockDevice is DIB's block-device configuration: the filesystem on the
// whole disk, since this kernel has no loop partition scanning for DIB's
// partitioning.
//
//go:embed block-device.yaml
var blockDevice []byte

// elements are this package's own DIB elements, found through ELEMENTS_PATH.
//
//go:embed elements
var elements embed.FS

// writeElements writes elements under dir (scripts executable) and returns
// the path DIB's ELEMENTS_PATH takes; with dir "" it only hashes them into h.
func writeElements(h io.Writer, dir string) (string, error) {
	root := filepath.Join(dir, "elements")
	err := fs.WalkDir(elements, "elements", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := elements.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "element file %s %x\n", p, sha256.Sum256(b))
		if dir == "" {
			return nil
		}
		mode := os.FileMode(0o644)
		if strings.Contains(p, ".d/") {
			mode = 0o755
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, mode)
	})
	if err != nil {
		return "", fmt.Errorf("the tests' DIB elements: %w", err)
	}
	return root, nil
}

// Image returns the raw disk image diskimage-builder made, built once per
// machine and kept under $KPRELOAD_CACHE/dib/<key>/debian.raw, where key is
// the SHA-256 of DIB's version, Elements, Env, the block-device
// configuration and this package's elements. The build holds a lock, so tests running at once build it
// once. Callers change a copy, never the image itself.
func Image(ctx context.Context, t testing.TB) string {
	t.Helper()
	dic, err := exec.LookPath("disk-image-create")
	if err != nil {
		t.Fatalf("no disk-image-create (python3-diskimage-builder; scripts/deps.sh installs it): %v", err)
	}
	version, err := exec.Command(dic, "--version").Output()
	if err != nil {
		t.Fatalf("disk-image-create --version: %v", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "dib %s\nelements %q\nenv %q\nblock %s\n", strings.TrimSpace(string(version)), Elements, Env, blockDevice)
	if _, err := writeElements(h, ""); err != nil {
		t.Fatal(err)
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]
	return Cached(ctx, t, "dib", key, func(dir, out string, log *os.File) error {
		block := filepath.Join(dir, "block-device.yaml")
		if err := os.WriteFile(block, blockDevice, 0o644); err != nil {
			return err
		}
		elementsPath, err := writeElements(io.Discard, dir)
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "nice", append([]string{"-n", "10", dic, "--no-tmpfs", "-t", "raw", "-o", filepath.Join(out, "debian")}, Elements...)...)
		// The test's own environment, passed on to DIB with the image's settings.
		cmd.Env = append(cmd.Environ(), append(Env, "DIB_BLOCK_DEVICE_CONFIG=file://"+block, "ELEMENTS_PATH="+elementsPath)...)
		cmd.Dir = out
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("disk-image-create: %w", err)
		}
		return nil
	})
}

// Cached returns $KPRELOAD_CACHE/<kind>/<key>/debian.raw, made by build the
// first time: build runs with the key's directory dir and an empty
// directory out under it, leaves debian.raw in out, and writes its output to
// log (kept as dir/build.log). The build holds a lock on dir, so tests
// running at once make an image once; a build that fails is done again the
// next time. Callers change a copy, never the image itself.
func Cached(ctx context.Context, t testing.TB, kind, key string, build func(dir, out string, log *os.File) error) string {
	t.Helper()
	dir := filepath.Join(testenv.CacheRoot(), kind, key)
	img := filepath.Join(dir, "debian.raw")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := flock.Lock(ctx, lock, time.Second, nil); err != nil {
		t.Fatalf("lock %s: %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		t.Logf("%s image %s (cached, key %s)", kind, img, key)
		return img
	}
	out := filepath.Join(dir, "build")
	os.RemoveAll(out)
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "build.log")
	lf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = build(dir, out, lf)
	lf.Close()
	if err != nil {
		b, _ := os.ReadFile(logFile)
		t.Fatalf("build the %s image: %v; the last lines of %s:\n%s", kind, err, logFile, lastLines(string(b), 30))
	}
	if err := os.Rename(filepath.Join(out, "debian.raw"), img); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(out)
	if err := os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s image built in %s (key %s; kept for the next run)", kind, time.Since(start).Round(time.Second), key)
	return img
}

// Copy copies the cached image to dst (sparse), for a test to change.
func Copy(t testing.TB, img, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "--sparse=always", img, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp %s %s: %v\n%s", img, dst, err, out)
	}
}

// Kernel returns the one kernel release in the image's /boot (debugfs, no
// mount), its filesystem on the whole disk as diskimage-builder's is here.
func Kernel(t testing.TB, img string) string {
	t.Helper()
	return KernelAt(t, img, 0)
}

// KernelAt is Kernel for a root filesystem that starts offset bytes into
// the image (a partition's).
func KernelAt(t testing.TB, img string, offset int64) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "ls /boot", fmt.Sprintf("%s?offset=%d", img, offset)).Output()
	if err != nil {
		t.Fatalf("debugfs ls /boot: %v", err)
	}
	m := regexp.MustCompile(`vmlinuz-(\S+-amd64)`).FindAllStringSubmatch(string(out), -1)
	if len(m) != 1 {
		t.Fatalf("kernels in the image's /boot: %q, want one", m)
	}
	return m[0][1]
}

// Boot runs "kpreload boot --image IMG --firmware bios --device edu
// --persist --json" plus args (bin is the kpreload binary; boot n of the
// test, for its messages and work directory) and returns its JSON. A boot
// that fails fails the test with kpreload's error and the console's path.
func Boot(ctx context.Context, t testing.TB, bin, img string, n int, args ...string) BootResult {
	t.Helper()
	argv := append([]string{"boot", "--image", img, "--firmware", "bios", "--device", "edu", "--persist", "--json",
		"--work-dir", filepath.Join(t.TempDir(), fmt.Sprint("boot", n)), "--timeout", testenv.Deadline(t, 5*time.Minute).String()}, args...)
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, argv...).Output()
	var res BootResult
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		t.Fatalf("boot %d: %v; output %s", n, jerr, out)
	}
	t.Logf("boot %d: %s, ended by %q (%s)", n, time.Since(start).Round(time.Second), res.UntilMatch, res.Up)
	if err != nil {
		t.Fatalf("boot %d: %v: %s (console %s)", n, err, res.Error, res.Console)
	}
	return res
}

// BootResult is the part of `kpreload boot --json` the tests read.
type BootResult struct {
	Report     *report.Report `json:"report"`
	Console    string         `json:"console"`
	ReportLog  string         `json:"report_log"`
	UntilMatch string         `json:"until_match"`
	Up         string         `json:"up"`
	Error      string         `json:"error"`
}

// CheckBoundBeforeSystemd checks boot n: kpreload's /init ran, the test
// driver (kpreload_edu) was loaded from the root's cache and bound to the
// edu device before switch_root, and the boot came through kpreload's GRUB
// entry for kernel, whose command line carries fallbackFlag (the one-shot
// fallback to the distribution's entry saved: builder/install's
// FallbackFlag, which this package cannot import).
func CheckBoundBeforeSystemd(t testing.TB, n int, res BootResult, kernel, fallbackFlag string) {
	t.Helper()
	rep := res.Report
	if rep == nil {
		t.Fatalf("boot %d: no kpreload report (console %s)", n, res.Console)
	}
	i := slices.IndexFunc(rep.Modules, func(m report.Module) bool { return m.Name == "kpreload_edu" })
	if i < 0 || rep.Modules[i].Result != "loaded" || rep.Modules[i].End > rep.SwitchRoot || rep.SwitchRoot <= 0 {
		t.Fatalf("boot %d: kpreload_edu %+v, switch_root %.3f: want it loaded before switch_root (console %s)", n, rep.Modules, rep.SwitchRoot, res.Console)
	}
	boottest.CheckEduLoaded(t, rep, "")
	if rep.Kernel != kernel || !strings.Contains(rep.Cmdline, fallbackFlag) {
		t.Errorf("boot %d: kernel %s, cmdline %q: want %s through kpreload's entry with its fallback saved (%s)", n, rep.Kernel, rep.Cmdline, kernel, fallbackFlag)
	}
	t.Logf("boot %d: kpreload_edu bound at %.3f s, switch_root at %.3f s", n, rep.Modules[i].End, rep.SwitchRoot)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
