package bootcmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

func TestPrintBootSummary(t *testing.T) {
	res := &qemu.Result{
		Accel: "tcg", Duration: 7300 * time.Millisecond, Console: "/w/console.log",
		Kernel: []qemu.KernelLine{{Time: 0, Text: "Linux version 6.1.0-56-cloud-amd64 (debian-kernel@lists.debian.org)"}, {Time: 0.9, Text: "Run /init as init process"}},
		Report: &report.Report{
			DriversReady: 1.5, SwitchRoot: 1.7,
			Root: report.Root{Device: "/dev/vda", FSType: "ext4", Mounted: 1.6},
			Modules: []report.Module{
				{Name: "virtio_blk", Result: "loaded", Start: 1.2, End: 1.25, Phase: "initramfs"},
				{Name: "nvidia", Result: "refused", Reason: "vermagic mismatch", Start: 1.3, End: 1.3},
				{Name: "edu", Result: "failed", Errno: "ENODEV", Start: 1.31, End: 1.4},
			},
			Devices: []report.Device{{Path: "/sys/bus/virtio/devices/virtio0", Modalias: "virtio:d00000002v00001AF4", Modules: []string{"virtio_blk"}}},
		},
		RootInit: &report.RootInit{Start: 1.8, Root: report.MountEntry{Device: "/dev/vda", FSType: "ext4", BlockDevice: "/dev/vda"},
			PCI: []report.PCIDevice{
				{Address: "0000:00:03.0", Vendor: "1234", Device: "11e8", Driver: "kpreload_edu", EduID: "0x010000ed"},
				{Address: "0000:00:00.0", Vendor: "8086", Device: "29c0"},
			}},
	}
	var b bytes.Buffer
	printBootSummary(&b, res)
	got := b.String()
	for _, want := range []string{
		"booted 6.1.0-56-cloud-amd64 under tcg: powered off after 7.3s (wall)\n",
		"  /init started at 0.900 s after kernel start\n",
		"  drivers ready at 1.500 s after kernel start\n",
		"  root /dev/vda (ext4) mounted at 1.600 s\n",
		"  real init ran at 1.800 s (root /dev/vda, ext4)\n",
		"  modules (1 loaded, 3 considered), seconds after kernel start:\n",
		"      1.200 ->   1.250  virtio_blk             loaded         initramfs; for virtio0\n",
		"      1.300 ->   1.300  nvidia                 refused        vermagic mismatch\n",
		"      1.310 ->   1.400  edu                    failed         ENODEV\n",
		"  devices bound (1 of 2 PCI):\n    0000:00:03.0 1234:11e8 -> kpreload_edu (edu_id 0x010000ed)\n",
		"  kpreload: 1 devices, 1 modules loaded, 1 refused, 1 failed;",
		"  Startup finished in 0.900s (kernel) + 0.900s (initramfs) = 1.800s (to the real init; target not recorded); drivers ready at 1.500s\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("printBootSummary output lacks %q; got:\n%s", want, got)
		}
	}
}

// TestPrintBootSummaryImage checks an image boot's summary: it ended at
// --until's match, and systemd's milestones are given in kernel time when
// the console has them, or it says how to get them.
func TestPrintBootSummaryImage(t *testing.T) {
	target := "Reached target multi-user.target - Multi-User System"
	tests := []struct {
		name   string
		kernel []qemu.KernelLine
		wants  []string
	}{
		{"kmsg timestamps", []qemu.KernelLine{{Time: 4.5, Text: "systemd[1]: systemd 252 running in system mode (+PAM)"}, {Time: 13.6, Text: "systemd[1]: " + target}}, []string{
			"under tcg: stopped when the console showed \"Reached target multi-user.target - Multi-User System\" (systemd reached its default target) after 19.5s (wall)\n",
			"  systemd (/sbin/init) started at 4.500 s\n",
			"  \"" + target + "\" at 13.600 s\n",
		}},
		{"no timestamps", nil, []string{
			"  \"" + target + "\": no kernel timestamp (add systemd.log_target=kmsg to the image's command line)\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			printBootSummary(&b, &qemu.Result{Accel: "tcg", Duration: 19500 * time.Millisecond, Kernel: tt.kernel, UntilMatched: true, UntilMatch: target})
			for _, want := range tt.wants {
				if got := b.String(); !strings.Contains(got, want) {
					t.Errorf("summary lacks %q; got:\n%s", want, got)
				}
			}
		})
	}
}

// TestPrintBootSummaryUp: a boot that kpreload-up.service's record ended
// says so, with the record's time, and its timeline's target and
// boot --json's "up" name it.
func TestPrintBootSummaryUp(t *testing.T) {
	line := `kpreload-up: {"format":1,"state":"up","unit":"kpreload-up.service","target":"multi-user.target","time":14.25}`
	_, up, _ := report.ScanUp([]byte(line + "\n"))
	if up == nil {
		t.Fatalf("ScanUp read no record from %s", line)
	}
	res := &qemu.Result{Accel: "tcg", Duration: 21 * time.Second, UntilMatched: true, UntilMatch: line, Up: up,
		Kernel: []qemu.KernelLine{{Time: 13.5, Text: "systemd[1]: Reached target multi-user.target - Multi-User System."}}}
	var b bytes.Buffer
	printBootSummary(&b, res)
	for _, want := range []string{
		"under tcg: stopped when kpreload-up.service reported the system up (multi-user.target) on the report channel after 21.0s (wall)\n",
		"  \"Reached target multi-user.target - Multi-User System.\" at 13.500 s\n",
		"  kpreload-up.service reported the system up (multi-user.target) at 14.250 s (its uptime)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q; got:\n%s", want, b.String())
		}
	}
	if got, want := res.EndedBy(), "kpreload-up.service reported the system up (multi-user.target)"; got != want {
		t.Errorf("up = %q, want %q", got, want)
	}
	if bt := Timeline(res); bt.Up != 14.25 || bt.Target != "multi-user.target (kpreload-up.service)" {
		t.Errorf("timeline up at %v, target %q; want the up record's", bt.Up, bt.Target)
	}
}

func TestBootRequiresKernel(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := cli.Execute([]string{"boot"}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "--kernel (or --image) is required") {
		t.Errorf("kpreload boot (no kernel) = exit %d, stderr %q, want failure naming --kernel and --image", code, errOut.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"boot", "--image", "x.qcow2", "--kernel", "vmlinuz"}, "excludes --kernel"},
		{[]string{"boot", "--image", filepath.Join(t.TempDir(), "absent.qcow2")}, "--image: stat"},
		{[]string{"boot", "--kernel", "vmlinuz", "--until", "("}, "--until: error parsing regexp"},
	} {
		out.Reset()
		errOut.Reset()
		if code := cli.Execute(c.args, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("kpreload %v = exit %d, stderr %q, want failure saying %q", c.args, code, errOut.String(), c.want)
		}
	}
}

// TestRootdiskAndBootCommands runs the real commands: build a root disk, boot the 6.1
// kernel from it over NVMe (built in, so no initramfs is needed) and check that the
// command prints the root init's record and fails for want of a kpreload report.
func TestRootdiskAndBootCommands(t *testing.T) {
	const kver = "6.1.0-56-cloud-amd64"
	kernel := filepath.Join(testenv.KernelTree(t, kver), "boot", "vmlinuz-"+kver)
	dir := t.TempDir()
	img := filepath.Join(dir, "root.img")
	var out, errOut bytes.Buffer
	if code := cli.Execute([]string{"rootdisk", "-o", img, "--size", "32M", "--label", "kp-cli"}, &out, &errOut); code != 0 {
		t.Fatalf("kpreload rootdisk: exit %d: %s", code, errOut.String())
	}
	if want := img + ": ext4, 32 MiB, label kp-cli, UUID random"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("kpreload rootdisk output = %q, want it to start %q", out.String(), want)
	}
	out.Reset()
	errOut.Reset()
	code := cli.Execute([]string{"boot", "--kernel", kernel, "--root-disk", img, "--root-bus", "nvme", "--device", "edu",
		"--append", "rootwait", "--work-dir", dir, "--json"}, &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "no boot report came back") {
		t.Errorf("kpreload boot without a kpreload /init = exit %d, stderr %q, want failure saying no report came back", code, errOut.String())
	}
	var got JSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("kpreload boot --json output: %v\n%s", err, out.String())
	}
	if got.RootInit == nil || got.RootInit.Root.BlockDevice != "/dev/nvme0n1" || got.RootInit.Kernel != kver || got.Report != nil {
		t.Errorf("kpreload boot --json = rootinit %+v, report %v; want a root init on /dev/nvme0n1 under %s and no report", got.RootInit, got.Report, kver)
	}
	if got.WallSeconds <= 0 || got.Console != filepath.Join(dir, "console.log") || got.Error == "" {
		t.Errorf("kpreload boot --json: wall %v, console %q, error %q; want > 0, %s, the error", got.WallSeconds, got.Console, got.Error, filepath.Join(dir, "console.log"))
	}
	if !strings.Contains(errOut.String(), "booting... ") && got.WallSeconds > 6 {
		t.Errorf("kpreload boot ran %.1fs without progress lines on a non-terminal stderr: %q", got.WallSeconds, errOut.String())
	}
}

func TestBootRejectsBadInstance(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "instance.yaml")
	if err := os.WriteFile(bad, []byte("resources:\n  driver:\n    version: [535]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := cli.Execute([]string{"boot", "--kernel", "/nonexistent/vmlinuz", "--instance", bad}, &out, &errOut)
	if want := "--instance: " + bad + ":3: resources.driver.version: want a version"; code == 0 || !strings.Contains(errOut.String(), want) {
		t.Errorf("kpreload boot --instance (bad) = exit %d, stderr %q, want failure containing %q", code, errOut.String(), want)
	}
}

func TestPrintSelection(t *testing.T) {
	var b bytes.Buffer
	printSelection(&b, &report.Selection{
		Source: "fw_cfg", Origin: "/sys/firmware/qemu_fw_cfg/by_name/opt/kpreload/instance.yaml/raw", Time: 5.484,
		Request: report.SelectionRequest{Version: "2.0.0", Flavor: "auto"},
		Drivers: []report.SelectionDriver{
			{Driver: "kpreload-edu", Rule: "version 2.0.0", Chosen: &report.SelectionCandidate{Version: "2.0.0", Flavor: "open", From: "initramfs"}, Loaded: true, Active: true, Userspace: "/opt/kpreload/drivers/2.0.0"},
			{Driver: "nvidia", Refusal: "no nvidia driver will be loaded: asked branch 535"},
		},
		Warnings: []string{"resources.gpu.count asks for 4 GPUs, 1 NVIDIA GPU(s) present"},
	})
	want := "  driver selection at 5.484 s, request from fw_cfg (/sys/firmware/qemu_fw_cfg/by_name/opt/kpreload/instance.yaml/raw): version 2.0.0, flavour auto\n" +
		"    kpreload-edu: 2.0.0 open from initramfs chosen (version 2.0.0); loaded, active, userspace /opt/kpreload/drivers/2.0.0\n" +
		"    nvidia: no nvidia driver will be loaded: asked branch 535\n" +
		"    warning: resources.gpu.count asks for 4 GPUs, 1 NVIDIA GPU(s) present\n"
	if got := b.String(); got != want {
		t.Errorf("printSelection:\n%s\nwant:\n%s", got, want)
	}
	b.Reset()
	printSelection(&b, nil)
	if b.Len() != 0 {
		t.Errorf("printSelection(nil) wrote %q", b.String())
	}
}

// TestBootDryRunInProcess: boot --dry-run prints the QEMU command line of
// a direct boot and of an image's, as text and JSON, starting nothing.
func TestBootDryRunInProcess(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"vmlinuz", "initrd.img", "root.img", "d.qcow2"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := func(f string) string { return filepath.Join(dir, f) }
	out, _ := cli.MustRun(t, 0, "boot", "--kernel", p("vmlinuz"), "--initramfs", p("initrd.img"), "--root-disk", p("root.img"), "--device", "edu",
		"--append", "quiet loglevel=3", "--work-dir", p("logs"), "--dry-run")
	clitest.WantIn(t, "boot --dry-run", out, "-kernel "+p("vmlinuz"), "-device edu", "'console=ttyS0")
	out, _ = cli.MustRun(t, 0, "boot", "--image", p("d.qcow2"), "--work-dir", p("logs"), "--firmware", "bios", "--dry-run", "--json")
	var cmd struct {
		Command []string `json:"command"`
	}
	if err := json.Unmarshal([]byte(out), &cmd); err != nil || len(cmd.Command) < 2 || !strings.Contains(strings.Join(cmd.Command, " "), "d.qcow2") {
		t.Errorf("boot --image --dry-run --json = %q, %v; want the command booting d.qcow2", out, err)
	}
	_, errOut := cli.MustRun(t, 1, "boot", "--kernel", p("absent"), "--dry-run")
	clitest.WantIn(t, "boot --kernel absent --dry-run", errOut, "absent")
}

// TestBootHelpExamples runs the examples of boot exactly as written, with
// no program on $PATH (no QEMU can start), in a directory holding the files
// they name (vmlinuz, initrd.img, root.img, instance.yaml, out/ci-testdriver.qcow2
// and images/ of this checkout): each prints QEMU's command line for them.
func TestBootHelpExamples(t *testing.T) {
	images, err := filepath.Abs("../../../../images")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	t.Setenv("TMPDIR", t.TempDir())
	if err := os.Symlink(images, "images"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"vmlinuz", "initrd.img", "root.img", "out/ci-testdriver.qcow2"} {
		clitest.MustWrite(t, f, "not booted")
	}
	inst, err := os.ReadFile("images/instance-testdriver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clitest.MustWrite(t, "instance.yaml", string(inst))
	t.Setenv("PATH", t.TempDir())
	lines := cli.ExamplesOf(t, "kpreload boot")
	for _, l := range lines {
		code, out, errOut := runCLI(strings.Fields(l)[1:]...)
		if code != 0 {
			t.Fatalf("example %q: exit %d: %s%s", l, code, out, errOut)
		}
		want := []string{"qemu-system-x86_64 ", " -device edu"}
		if strings.Contains(l, "--kernel vmlinuz") {
			want = append(want, " -kernel vmlinuz -initrd initrd.img ", "file=root.img")
		}
		if strings.Contains(l, "--image") {
			want = append(want, "file=out/ci-testdriver.qcow2,snapshot=on", "OVMF_VARS.fd")
		}
		if strings.Contains(l, "--instance") {
			want = append(want, "-fw_cfg name=opt/kpreload/instance.yaml,file=/")
		}
		if strings.Contains(l, "--work-dir logs") {
			want = append(want, "-serial file:logs/console.log")
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("example %q printed\n%s\nwant %q in it", l, out, w)
			}
		}
	}
	if len(lines) != 3 {
		t.Errorf("boot examples %q; the test knows 3", lines)
	}
}
