package main

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/internal/mountinfo"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

func TestParseKmsg(t *testing.T) {
	tests := []struct {
		in   string
		want report.KmsgLine
		ok   bool
	}{
		{"6,1234,1500123,-;kpreload: loaded nvidia\n SUBSYSTEM=pci\n", report.KmsgLine{Time: 1.500123, Level: 6, Text: "kpreload: loaded nvidia"}, true},
		{"4,5,2000000,c,more;NVRM: No NVIDIA GPU found.", report.KmsgLine{Time: 2, Level: 4, Text: "NVRM: No NVIDIA GPU found."}, true},
		{"30,7,10,-;facility bits are masked", report.KmsgLine{Time: 0.00001, Level: 6, Text: "facility bits are masked"}, true},
		{"no separator", report.KmsgLine{}, false},
		{"x,1,2,-;bad prio", report.KmsgLine{}, false},
		{"6,1;too few fields", report.KmsgLine{}, false},
	}
	for _, tt := range tests {
		got, ok := parseKmsg([]byte(tt.in))
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseKmsg(%q) = %+v, %v, want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCmdlineValue(t *testing.T) {
	tests := []struct{ cmdline, key, want string }{
		{"console=ttyS0 kpreload.report=/dev/ttyS1 panic=-1", "kpreload.report", "/dev/ttyS1"},
		{"console=ttyS0 kpreload.report=\"/dev/ttyS2\"", "kpreload.report", "/dev/ttyS2"},
		{"console=ttyS0 xkpreload.report=/dev/ttyS1", "kpreload.report", ""},
		{"", "kpreload.report", ""},
	}
	for _, tt := range tests {
		if got := cmdlineValue(tt.cmdline, tt.key); got != tt.want {
			t.Errorf("cmdlineValue(%q, %q) = %q, want %q", tt.cmdline, tt.key, got, tt.want)
		}
	}
}

func TestRootMount(t *testing.T) {
	mounts := "rootfs / rootfs rw 0 0\n" +
		"proc /proc proc rw,nosuid 0 0\n" +
		"/dev/vda / ext4 rw,relatime 0 0\n" +
		"/dev/disk\\040a /mnt ext4 rw 0 0\n"
	p := filepath.Join(t.TempDir(), "mounts")
	writeFile(t, p, mounts)
	got, err := rootMount(p)
	want := report.MountEntry{Device: "/dev/vda", FSType: "ext4", Options: "rw,relatime"}
	if err != nil || got != want {
		t.Errorf("rootMount(%q) = %+v, %v, want %+v, nil", mounts, got, err, want)
	}
	writeFile(t, p, "proc /proc proc rw 0 0\n")
	if _, err := rootMount(p); err == nil {
		t.Errorf("rootMount(no / entry) = nil error, want one")
	}
	if got := mountinfo.Unescape(`/dev/disk\040a\`); got != `/dev/disk a\` {
		t.Errorf("unescapeMount = %q, want %q", got, `/dev/disk a\`)
	}
}

// fakeRoot builds a tree shaped like a booted system's /proc, /sys, /run and /dev.
func fakeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "proc/uptime"), "3.14 5.00\n")
	writeFile(t, filepath.Join(root, "proc/cmdline"), "console=ttyS0 root=/dev/vda kpreload.report=/dev/ttyS1\n")
	writeFile(t, filepath.Join(root, "proc/mounts"), "/dev/vda / ext4 rw 0 0\n")
	writeFile(t, filepath.Join(root, "proc/modules"), "kpreload_edu 16384 0 - Live 0x0\nvirtio_blk 20480 1 - Live 0x0\n")
	writeFile(t, filepath.Join(root, report.Path), `{"format":1,"drivers_ready":1.25}`+"\n")
	writeFile(t, filepath.Join(root, "dev/kmsg"), strings.Join([]string{
		"6,1,100,-;Linux version 6.1.0",
		"6,1,101,-;Command line: console=ttyS0 kpreload.report=/dev/ttyS1",
		"5,1,102,-;Kernel command line: console=ttyS0 kpreload.report=/dev/ttyS1",
		"6,2,1250000,-;kpreload: 2 modules loaded",
		"4,3,1300000,-;NVRM: No NVIDIA GPU found.",
		"6,4,1400000,-;random other line",
	}, "\n"))
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "sys/dev/block", fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)), "uevent"),
		"MAJOR=259\nMINOR=0\nDEVNAME=nvme0n1\nDEVTYPE=disk\n")
	sys := filepath.Join(root, "sys/devices/pci0000:00")
	pci := filepath.Join(root, "sys/bus/pci/devices")
	drv := filepath.Join(root, "sys/bus/pci/drivers")
	for _, d := range []struct{ addr, vendor, device, class, driver, eduID string }{
		{"0000:00:03.0", "0x1234", "0x11e8", "0x00ff00", "kpreload_edu", "0x010000ed"},
		{"0000:00:02.0", "0x1af4", "0x1001", "0x010000", "virtio-pci", ""},
		{"0000:00:01.0", "0x8086", "0x29c0", "0x060000", "", ""},
	} {
		dir := filepath.Join(sys, d.addr)
		writeFile(t, filepath.Join(dir, "vendor"), d.vendor+"\n")
		writeFile(t, filepath.Join(dir, "device"), d.device+"\n")
		writeFile(t, filepath.Join(dir, "class"), d.class+"\n")
		if d.driver != "" {
			if err := os.MkdirAll(filepath.Join(drv, d.driver), 0o755); err != nil {
				t.Fatal(err)
			}
			symlink(t, filepath.Join(drv, d.driver), filepath.Join(dir, "driver"))
		}
		if d.eduID != "" {
			writeFile(t, filepath.Join(dir, "edu_id"), d.eduID+"\n")
		}
		if err := os.MkdirAll(pci, 0o755); err != nil {
			t.Fatal(err)
		}
		symlink(t, dir, filepath.Join(pci, d.addr))
	}
	return root
}

func TestCollect(t *testing.T) {
	rec := collect(sysRoot{dir: fakeRoot(t)}, []string{"mount earlier: failed"})
	if rec.Start != 3.14 || rec.End != 3.14 {
		t.Errorf("collect: Start, End = %v, %v, want 3.14, 3.14", rec.Start, rec.End)
	}
	if want := "console=ttyS0 root=/dev/vda kpreload.report=/dev/ttyS1"; rec.Cmdline != want {
		t.Errorf("collect: Cmdline = %q, want %q", rec.Cmdline, want)
	}
	if want := (report.MountEntry{Device: "/dev/vda", FSType: "ext4", Options: "rw", BlockDevice: "/dev/nvme0n1"}); rec.Root != want {
		t.Errorf("collect: Root = %+v, want %+v", rec.Root, want)
	}
	if want := `{"format":1,"drivers_ready":1.25}`; string(rec.Report) != want {
		t.Errorf("collect: Report = %s, want %s", rec.Report, want)
	}
	if want := []string{"kpreload_edu", "virtio_blk"}; !reflect.DeepEqual(rec.Modules, want) {
		t.Errorf("collect: Modules = %q, want %q", rec.Modules, want)
	}
	wantPCI := []report.PCIDevice{
		{Address: "0000:00:01.0", Vendor: "8086", Device: "29c0", Class: "060000"},
		{Address: "0000:00:02.0", Vendor: "1af4", Device: "1001", Class: "010000", Driver: "virtio-pci"},
		{Address: "0000:00:03.0", Vendor: "1234", Device: "11e8", Class: "00ff00", Driver: "kpreload_edu", EduID: "0x010000ed"},
	}
	if !reflect.DeepEqual(rec.PCI, wantPCI) {
		t.Errorf("collect: PCI = %+v, want %+v", rec.PCI, wantPCI)
	}
	wantKmsg := []report.KmsgLine{
		{Time: 1.25, Level: 6, Text: "kpreload: 2 modules loaded"},
		{Time: 1.3, Level: 4, Text: "NVRM: No NVIDIA GPU found."},
	}
	if !reflect.DeepEqual(rec.Kmsg, wantKmsg) {
		t.Errorf("collect: Kmsg = %+v, want %+v", rec.Kmsg, wantKmsg)
	}
	if want := []string{"mount earlier: failed"}; !reflect.DeepEqual(rec.Errors, want) {
		t.Errorf("collect: Errors = %q, want %q", rec.Errors, want)
	}
}

func TestCollectRecordsErrors(t *testing.T) {
	rec := collect(sysRoot{dir: t.TempDir()}, nil)
	for _, want := range []string{"uptime: ", "cmdline: ", "root mount: ", "modules: ", "pci: ", "kmsg: "} {
		found := false
		for _, e := range rec.Errors {
			found = found || strings.HasPrefix(e, want)
		}
		if !found {
			t.Errorf("collect(empty root).Errors = %q, want an entry starting %q", rec.Errors, want)
		}
	}
	if rec.Report != nil {
		t.Errorf("collect(empty root).Report = %s, want absent", rec.Report)
	}
}

// TestRealKmsg reads this machine's real /dev/kmsg without blocking: it must end.
func TestRealKmsg(t *testing.T) {
	lines, err := readKmsg("/dev/kmsg", func(string) bool { return true })
	if err != nil {
		t.Fatalf("readKmsg(/dev/kmsg) error: %v", err)
	}
	if len(lines) == 0 {
		t.Errorf("readKmsg(/dev/kmsg) returned no lines, want the host's kernel log")
	}
}

// TestBinaryOnHost builds the real static binary and runs it as a normal process: it
// prints the record on stdout and exits without touching the machine.
func TestBinaryOnHost(t *testing.T) {
	bin := testenv.GoBuildStatic(t, t.TempDir(), "rootinit", "./cmd/kpreload-rootinit")
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a PT_INTERP program header, want a static binary", bin)
		}
	}
	ef.Close()
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run %s: %v", bin, err)
	}
	line := strings.TrimSpace(string(out))
	raw, ok := strings.CutPrefix(line, report.RootInitPrefix)
	if !ok {
		t.Fatalf("output = %q, want a line starting %q", line, report.RootInitPrefix)
	}
	rec, err := report.DecodeRootInit(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	if want := unix.ByteSliceToString(uts.Release[:]); rec.Kernel != want {
		t.Errorf("rootinit on host: Kernel = %q, want %q", rec.Kernel, want)
	}
	if rec.Start <= 0 || rec.End < rec.Start {
		t.Errorf("rootinit on host: Start, End = %v, %v, want 0 < Start <= End", rec.Start, rec.End)
	}
	if rec.PID == 1 || rec.Cmdline == "" || len(rec.Modules) == 0 && len(rec.PCI) == 0 {
		t.Errorf("rootinit on host: PID %d, cmdline %q, %d modules, %d PCI devices; want PID != 1, a cmdline, some modules or PCI devices",
			rec.PID, rec.Cmdline, len(rec.Modules), len(rec.PCI))
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
