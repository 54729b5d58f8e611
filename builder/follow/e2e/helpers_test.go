package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/testsupport/boottest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// forwardEnv, set, makes the test binary a forwarder (see TestMain).
const forwardEnv = "KPRELOAD_FOLLOW_E2E_FORWARD"

// TestMain: with forwardEnv set to HOST:PORT the test binary is not a test
// but the command QEMU's user network spawns for each guest connection to
// a forwarded address (guestfwd=…-cmd:): it joins its standard input and
// output (the guest's connection) to HOST:PORT on the host's loopback. A
// chardev forward (-tcp:) carries one host connection for all the guest's,
// which apt, opening one per process, would lose.
func TestMain(m *testing.M) {
	if addr := os.Getenv(forwardEnv); addr != "" {
		os.Exit(forward(addr))
	}
	os.Exit(m.Run())
}

func forward(addr string) int {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 1
	}
	go func() {
		io.Copy(c, os.Stdin)
		c.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(os.Stdout, c)
	return 0
}

// guestForward returns a QEMU guest forward from guest (IP:PORT) to host
// (127.0.0.1:PORT), one forwarder process per connection (TestMain).
func guestForward(t *testing.T, guest, host string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "fwd")
	text := "#!/bin/sh\n" + forwardEnv + "=" + host + " exec " + self + "\n"
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return "tcp:" + guest + "-cmd:" + script
}

// kernelDeb returns the linux-image .deb of kernel in the download cache
// (scripts/kernels.sh fills it; testenv.KernelTree runs it).
func kernelDeb(t *testing.T, kernel string) string {
	t.Helper()
	testenv.KernelTree(t, kernel)
	debs, _ := filepath.Glob(filepath.Join(testenv.CacheRoot(), "debs", "linux-image-"+kernel+"-unsigned_*_amd64.deb"))
	if len(debs) != 1 {
		t.Fatalf("the linux-image .deb of %s is not in %s/debs (found %v): run scripts/kernels.sh %s", kernel, testenv.CacheRoot(), debs, kernel)
	}
	return debs[0]
}

// runCycle runs one cycle of following the archive for kernel with the real
// `kpreload follow`: the test driver's cell built by the real dkms and pushed,
// signed with key, to the registry. It returns when the cell is in the
// registry, and fails unless the cycle says so with exit status 2 ("new
// cells") and a table row for kernel marked new. downloads is the cycle's
// download cache (testenv.DownloadCache: the machine's kernels and bookworm
// lists, which a cycle does not refresh, so the test pays no apt-get update).
func runCycle(ctx context.Context, t *testing.T, kpreload, recipes, cache, downloads, registry, key, kernel string) {
	t.Helper()
	start := time.Now()
	cmd := exec.CommandContext(ctx, kpreload, "follow", "testdriver:"+kernel, "--recipes", recipes, "--cache", cache,
		"--remote", "oci://"+registry+"/cells", "--plain-http", "--sign", key, "--wait", "--json")
	cmd.Env = append(os.Environ(), "KPRELOAD_CACHE="+downloads, "DOCKER_CONFIG="+t.TempDir())
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("cycle for %s: want exit status 2 (new cells), got %v%s\n%s", kernel, err, stderrOf(err), out)
	}
	var rep struct {
		Cells []struct {
			Kernel string `json:"kernel"`
			New    bool   `json:"new"`
		} `json:"cells"`
		New int `json:"new"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("cycle for %s: --json: %v\n%s", kernel, err, out)
	}
	pushed := false
	for _, c := range rep.Cells {
		pushed = pushed || (c.Kernel == kernel && c.New)
	}
	if !pushed {
		t.Fatalf("cycle for %s pushed no new cell for it:\n%s", kernel, out)
	}
	t.Logf("cycle for %s: built and pushed in %s", kernel, time.Since(start).Round(time.Second))
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// waitConsole waits until the console log file holds re.
func waitConsole(ctx context.Context, file string, re *regexp.Regexp) error {
	for {
		if b, _ := os.ReadFile(file); re.Match(b) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// checkImageBoot checks a boot's report and console: kernel booted by its
// kpreload entry (the image's cmdline), the report came back on the channel
// the harness named through fw_cfg (not kpreload.report=, not the console),
// root ext4 on /dev/vda2, the test driver loaded by /init from the root's
// cache and bound before the real init's first line, and systemd reaching
// Debian 12's boot and kpreload-drivers.target.
func checkImageBoot(t *testing.T, name string, res *qemu.Result, kernel, cmdline string) {
	t.Helper()
	rep := res.Report
	if rep == nil {
		t.Fatalf("%s: no kpreload report; warnings %v; console %s", name, res.Warnings, res.Console)
	}
	t.Logf("%s: report: %s", name, rep.Summary())
	if rep.Kernel != kernel || !strings.Contains(rep.Cmdline, cmdline) {
		t.Errorf("%s: report kernel %q cmdline %q: want %s booted by its entry (%s)", name, rep.Kernel, rep.Cmdline, kernel, cmdline)
	}
	if strings.Contains(rep.Cmdline, "kpreload.report=") || slices.Contains(res.Warnings, "report read from the console, not the report channel") {
		t.Errorf("%s: cmdline %q, warnings %q: want the report on the channel fw_cfg named", name, rep.Cmdline, res.Warnings)
	}
	if rep.Root.FSType != "ext4" || rep.Root.Device != "/dev/vda2" || rep.Root.Mounted <= 0 {
		t.Errorf("%s: root = %+v, want ext4 on /dev/vda2 mounted", name, rep.Root)
	}
	boottest.CheckEduLoaded(t, rep, "rootfs")
	// The probe's kernel line and systemd's first line carry the same
	// (printk) clock.
	console, _ := os.ReadFile(res.Console)
	probe, ok := qemu.Find(res.Kernel, "bound, id 0x010000ed")
	systemd, sok := qemu.FirstPrintk(console, "systemd[1]:")
	if !ok || !sok || probe.Time >= systemd {
		t.Errorf("%s: test driver probe %+v (found %v), systemd's first line at %.3f (found %v): want the driver bound before the real init", name, probe, ok, systemd, sok)
	}
	for _, want := range []string{"Welcome to", "Debian GNU/Linux 12"} {
		if !strings.Contains(string(console), want) {
			t.Errorf("%s: console lacks %q (%s)", name, want, res.Console)
		}
	}
	if !driversReady.Match(console) {
		t.Errorf("%s: console lacks systemd reaching kpreload-drivers.target (%s)", name, res.Console)
	}
}

// driversReady is systemd reaching kpreload-drivers.target; systemd shortens
// the unit name to the console's width, so match its start and its
// description.
var driversReady = regexp.MustCompile(`Reached target .*kpreload-dr.*GPU drivers loaded and ready`)

// writeTimings writes the chain's timings to the file named by
// KPRELOAD_FOLLOW_TIMINGS, when set (scripts/bench-follow.sh reads it).
func writeTimings(t *testing.T, toCell, toVM time.Duration) {
	t.Helper()
	file := os.Getenv("KPRELOAD_FOLLOW_TIMINGS")
	if file == "" {
		return
	}
	b, err := json.Marshal(map[string]float64{"upload_to_cell_s": toCell.Seconds(), "upload_to_vm_s": toVM.Seconds()})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
		t.Fatalf("KPRELOAD_FOLLOW_TIMINGS: %v", err)
	}
}
