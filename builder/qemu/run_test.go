package qemu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeDriver stands in for QEMU: it writes the given console and report-channel text to
// the files named by the -serial arguments, optionally waits for the context, and
// records every command line.
type fakeDriver struct {
	console, report string
	hang            bool // wait until the context ends, like a hung guest
	code            int
	err             error
	calls           [][]string
}

func (f *fakeDriver) Run(ctx context.Context, args []string) (int, error) {
	f.calls = append(f.calls, args)
	var serials []string
	for i, a := range args {
		if a == "-serial" && i+1 < len(args) {
			serials = append(serials, strings.TrimPrefix(args[i+1], "file:"))
		}
	}
	for i, text := range []string{f.console, f.report} {
		if i < len(serials) && text != "" {
			if err := os.WriteFile(serials[i], []byte(text), 0o644); err != nil {
				return -1, err
			}
		}
	}
	if f.hang {
		<-ctx.Done()
		return -1, ctx.Err()
	}
	return f.code, f.err
}

const (
	reportLine   = `kpreload-report: {"format":1,"kernel":"6.1.0","drivers_ready":1.5,"root":{"spec":"/dev/vda","device":"/dev/vda","fstype":"ext4","mounted":1.6},"switch_root":1.7}`
	rootInitLine = `kpreload-rootinit: {"format":1,"pid":1,"start":1.8,"end":1.9,"cmdline":"console=ttyS0","root":{"device":"/dev/vda","fstype":"ext4"},"modules":["virtio_blk"],"pci":[{"address":"0000:00:03.0","vendor":"1234","device":"11e8","driver":"kpreload_edu"}],"kmsg":[]}`
	bootConsole  = "SeaBIOS\r\n[    0.000000] Linux version 6.1.0-56-cloud-amd64\r\n" +
		"[    0.000000] Command line: console=ttyS0 kpreload.report=/dev/ttyS1\r\n" +
		"[    0.010000] Kernel command line: console=ttyS0 kpreload.report=/dev/ttyS1\r\n" +
		"[    0.900000] Run /init as init process\r\n" +
		reportLine + "\r\n[    1.700000] kpreload: switch_root\r\n[    1.750000] Run /sbin/init as init process\r\n" +
		"[    1.950000] reboot: Power down\r\n"
)

func TestRunReadsReportChannel(t *testing.T) {
	drv := &fakeDriver{console: bootConsole, report: reportLine + "\r\n" + rootInitLine + "\r\n"}
	r := &Runner{Driver: drv, WorkDir: t.TempDir()}
	res, err := r.Run(context.Background(), Config{Kernel: "/k", RootDisk: "/d"})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Report == nil || res.Report.DriversReady != 1.5 || res.Report.Root.Device != "/dev/vda" {
		t.Errorf("Run: Report = %+v, want drivers_ready 1.5 and root /dev/vda", res.Report)
	}
	if res.RootInit == nil || res.RootInit.Start != 1.8 || len(res.RootInit.PCI) != 1 || res.RootInit.PCI[0].Driver != "kpreload_edu" {
		t.Errorf("Run: RootInit = %+v, want start 1.8 and one edu device bound to kpreload_edu", res.RootInit)
	}
	if len(res.Warnings) != 0 || res.Panicked || res.TimedOut || res.ExitCode != 0 || res.Accel != "tcg" {
		t.Errorf("Run: warnings %q, panicked %v, timed out %v, exit %d, accel %q; want none, false, false, 0, tcg",
			res.Warnings, res.Panicked, res.TimedOut, res.ExitCode, res.Accel)
	}
	want := []KernelLine{
		{0, "Linux version 6.1.0-56-cloud-amd64"},
		{0.9, "Run /init as init process"},
		{1.7, "kpreload: switch_root"},
		{1.75, "Run /sbin/init as init process"},
		{1.95, "reboot: Power down"},
	}
	if !reflect.DeepEqual(res.Kernel, want) {
		t.Errorf("Run: Kernel = %+v, want %+v", res.Kernel, want)
	}
	if len(drv.calls) != 1 || !reflect.DeepEqual(drv.calls[0], res.Args) {
		t.Errorf("driver calls = %q, want exactly Result.Args", drv.calls)
	}
	if filepath.Base(res.Console) != "console.log" || filepath.Base(res.ReportLog) != "report.log" {
		t.Errorf("Run: logs %s, %s, want console.log and report.log", res.Console, res.ReportLog)
	}
}

func TestRunFallsBackToConsole(t *testing.T) {
	drv := &fakeDriver{console: bootConsole + rootInitLine + "\r\n"}
	dir := t.TempDir()
	r := &Runner{Driver: drv}
	res, err := r.Run(context.Background(), Config{Kernel: "/k", ConsoleLog: filepath.Join(dir, "boot.log")})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Report == nil || res.RootInit == nil {
		t.Fatalf("Run with records only on the console: Report %v, RootInit %v, want both", res.Report, res.RootInit)
	}
	if want := filepath.Join(dir, "boot.report.log"); res.ReportLog != want {
		t.Errorf("Run: ReportLog = %s, want %s", res.ReportLog, want)
	}
	if len(res.Warnings) != 2 {
		t.Errorf("Run: Warnings = %q, want two saying the console was used", res.Warnings)
	}
}

func TestRunPanic(t *testing.T) {
	console := "[    0.000000] Linux version 6.1\r\n[    1.100000] VFS: Unable to mount root fs on unknown-block(0,0)\r\n" +
		"[    1.100100] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)\r\n" +
		"[    1.200000] ---[ end Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0) ]---\r\n"
	r := &Runner{Driver: &fakeDriver{console: console}, WorkDir: t.TempDir()}
	res, err := r.Run(context.Background(), Config{Kernel: "/k"})
	if err == nil || !strings.Contains(err.Error(), "kernel panicked: Kernel panic - not syncing: VFS: Unable to mount root fs") {
		t.Errorf("Run(panicking kernel) error = %v, want one quoting the panic", err)
	}
	if res == nil || !res.Panicked || res.Report != nil {
		t.Fatalf("Run(panicking kernel) = %+v, want Panicked and no report", res)
	}
	if !strings.Contains(err.Error(), "end Kernel panic") {
		t.Errorf("Run(panicking kernel) error = %v, want the last console lines in it", err)
	}
}

func TestRunTimeout(t *testing.T) {
	var lines strings.Builder
	for i := range 30 {
		lines.WriteString("[    1.000000] line " + string(rune('A'+i%26)) + "\n")
	}
	lines.WriteString("[    2.000000] the very last line\n")
	var ticks int
	r := &Runner{Driver: &fakeDriver{console: lines.String(), hang: true}, WorkDir: t.TempDir(),
		Progress: func(time.Duration) { ticks++ }}
	start := time.Now()
	res, err := r.Run(context.Background(), Config{Kernel: "/k", Timeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "did not finish within 200ms") || !strings.Contains(err.Error(), "the very last line") {
		t.Errorf("Run(hung guest) error = %v, want a timeout quoting the last console line", err)
	}
	if strings.Count(err.Error(), "\n") != 20 {
		t.Errorf("Run(hung guest) error has %d console lines, want 20", strings.Count(err.Error(), "\n"))
	}
	if res == nil || !res.TimedOut || res.Panicked {
		t.Errorf("Run(hung guest) = %+v, want TimedOut and not Panicked", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run(hung guest) took %s, want about 200ms", d)
	}
}

func TestRunQemuFailure(t *testing.T) {
	r := &Runner{Driver: &fakeDriver{code: 1, err: errors.New("qemu exited with status 1: could not load kernel")}, WorkDir: t.TempDir()}
	res, err := r.Run(context.Background(), Config{Kernel: "/k"})
	if err == nil || !strings.Contains(err.Error(), "could not load kernel") {
		t.Errorf("Run(failing qemu) error = %v, want QEMU's message", err)
	}
	if res == nil || res.ExitCode != 1 {
		t.Errorf("Run(failing qemu) = %+v, want ExitCode 1", res)
	}
}

func TestRunBadConfig(t *testing.T) {
	drv := &fakeDriver{}
	r := &Runner{Driver: drv, WorkDir: t.TempDir()}
	for _, c := range []Config{{}, {Kernel: "/k", Accel: "xen"}, {Kernel: "/k", RootBus: "ide"}} {
		if _, err := r.Run(context.Background(), c); err == nil {
			t.Errorf("Run(%+v) = nil error, want one", c)
		}
	}
	if len(drv.calls) != 0 {
		t.Errorf("Run with bad configs started QEMU %d times, want 0", len(drv.calls))
	}
}

func TestKVMFallback(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "kvm")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	old := kvmDevice
	kvmDevice = dev
	defer func() { kvmDevice = old }()

	tests := []struct {
		name      string
		accel     string
		probe     *fakeDriver // what the probe boot shows
		wantAccel string
		wantWarn  string
	}{
		{"kernel starts", "kvm", &fakeDriver{console: "[ 0.000000] Linux version 6.1\n", hang: true}, "kvm", ""},
		{"hangs after firmware", "kvm", &fakeDriver{console: "Booting from ROM..\n", hang: true}, "tcg", "no kernel output within"},
		{"qemu aborts", "auto", &fakeDriver{code: 134, err: errors.New("qemu exited with status 134: failed to set MSR")}, "tcg", "failed to set MSR"},
	}
	for _, tt := range tests {
		r := &Runner{Driver: tt.probe, WorkDir: t.TempDir(), ProbeTimeout: 500 * time.Millisecond}
		start := time.Now()
		res, err := r.Run(context.Background(), Config{Kernel: "/k", Accel: tt.accel, Timeout: 300 * time.Millisecond})
		if res == nil {
			t.Fatalf("Run(%s) = nil result, error %v", tt.name, err)
		}
		if res.Accel != tt.wantAccel {
			t.Errorf("Run(%s): Accel = %q, want %q", tt.name, res.Accel, tt.wantAccel)
		}
		warned := strings.Join(res.Warnings, "\n")
		if (tt.wantWarn == "") != (warned == "") || !strings.Contains(warned, tt.wantWarn) {
			t.Errorf("Run(%s): Warnings = %q, want one containing %q", tt.name, res.Warnings, tt.wantWarn)
		}
		if len(tt.probe.calls) != 2 || !reflect.DeepEqual(tt.probe.calls[0][:4], []string{"-machine", "q35", "-accel", "kvm"}) {
			t.Errorf("Run(%s): QEMU calls = %q, want a KVM probe then the boot", tt.name, tt.probe.calls)
		}
		if tt.wantAccel == "kvm" && time.Since(start) > 2*time.Second {
			t.Errorf("Run(%s) took %s: the probe should stop once the kernel is seen", tt.name, time.Since(start))
		}
	}
	kvmDevice = filepath.Join(t.TempDir(), "missing")
	ok, detail := ProbeKVM(context.Background(), &fakeDriver{}, "/k", t.TempDir(), time.Second)
	if ok || !strings.Contains(detail, "cannot open") {
		t.Errorf("ProbeKVM(no /dev/kvm) = %v, %q, want false and why", ok, detail)
	}
}

// TestDryRunIsRunsCommand: DryRun gives the command line Run then runs, for
// a direct boot and an image through OVMF alike, and starts nothing itself.
func TestDryRunIsRunsCommand(t *testing.T) {
	for _, c := range []Config{
		{Kernel: "vmlinuz", Initramfs: "initrd.img", RootDisk: "root.img", Devices: []string{"edu"}, Accel: "tcg"},
		{Firmware: FirmwareUEFI, RootDisk: "disk.qcow2", Snapshot: true, Accel: "tcg"},
	} {
		dir := t.TempDir()
		drv := &fakeDriver{console: bootConsole}
		r := &Runner{Driver: drv, WorkDir: dir}
		got, err := r.DryRun(c)
		if err != nil {
			t.Fatalf("DryRun(%+v): %v", c, err)
		}
		if len(drv.calls) != 0 {
			t.Fatalf("DryRun ran QEMU: %q", drv.calls)
		}
		r.Run(context.Background(), c)
		if len(drv.calls) != 1 || !slices.Equal(drv.calls[0], got) {
			t.Errorf("DryRun(%+v) = %q; Run ran %q", c, got, drv.calls)
		}
	}
}

// monitorDriver is a fake QEMU with a human monitor on the -monitor socket:
// it records the commands it is sent and powers off once a device_add
// comes, or when its context ends.
type monitorDriver struct {
	answer string // what it answers to device_add
	cmds   chan string
}

func (d *monitorDriver) Run(ctx context.Context, args []string) (int, error) {
	var sock string
	for i, a := range args {
		if a == "-monitor" && i+1 < len(args) {
			sock = strings.TrimSuffix(strings.TrimPrefix(args[i+1], "unix:"), ",server=on,wait=off")
		}
	}
	if sock == "" {
		return 1, errors.New("no monitor")
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return 1, err
	}
	defer ln.Close()
	go func() { <-ctx.Done(); ln.Close() }()
	conn, err := ln.Accept()
	if err != nil {
		return -1, ctx.Err()
	}
	defer conn.Close()
	fmt.Fprint(conn, "QEMU 7.2 monitor\r\n(qemu) ")
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return -1, err
		}
		line = strings.TrimSpace(line)
		d.cmds <- line
		ans := ""
		if strings.HasPrefix(line, "device_add") {
			ans = d.answer
		}
		fmt.Fprintf(conn, "%s\r\n%s(qemu) ", line, ans)
		if strings.HasPrefix(line, "device_add") {
			return 0, nil
		}
	}
}

// TestRunRootLate plugs the root disk in through the monitor RootLate after
// QEMU starts, and fails the run when the monitor refuses it.
func TestRunRootLate(t *testing.T) {
	for _, tt := range []struct{ name, answer, wantErr string }{
		{"plugged", "", ""},
		{"refused", "Error: Bus 'hotplug0' not found\r\n", "plug the root disk in after 200ms: monitor answered"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			drv := &monitorDriver{answer: tt.answer, cmds: make(chan string, 10)}
			r := &Runner{Driver: drv, WorkDir: t.TempDir()}
			res, err := r.Run(context.Background(), Config{Kernel: "/k", RootDisk: "/d.img", RootLate: 200 * time.Millisecond, Timeout: 20 * time.Second})
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Run: %v, want error %q", err, tt.wantErr)
			}
			close(drv.cmds)
			var cmds []string
			for c := range drv.cmds {
				cmds = append(cmds, c)
			}
			want := []string{"drive_add 0 if=none,id=root,format=raw,file=/d.img", "device_add virtio-blk-pci,drive=root,bus=" + HotplugBus}
			if !slices.Equal(cmds, want) {
				t.Errorf("monitor commands %q, want %q", cmds, want)
			}
			if tt.wantErr == "" && (res.RootPlugged < 200*time.Millisecond || res.RootPlugged > 10*time.Second) {
				t.Errorf("RootPlugged %s, want just after 200ms", res.RootPlugged)
			}
		})
	}
}
