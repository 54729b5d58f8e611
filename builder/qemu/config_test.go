package qemu

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// common is the part of every TCG command line before -kernel.
func common(mem, cpus string) []string {
	return []string{"-machine", "q35", "-accel", "tcg,thread=single", "-cpu", TCGModel, "-m", mem, "-smp", cpus,
		"-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none", "-no-reboot",
		"-serial", "file:/w/console.log", "-serial", "file:/w/report.log"}
}

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestArgs(t *testing.T) {
	const base = "console=ttyS0 panic=-1 kpreload.report=/dev/ttyS1"
	tests := []struct {
		name string
		c    Config
		want []string
	}{
		{
			name: "kernel only",
			c:    Config{Kernel: "/k"},
			want: cat(common("1024", "2"), []string{"-kernel", "/k", "-append", base}),
		},
		{
			name: "virtio root, initramfs, edu, append",
			c:    Config{Kernel: "/k", Initramfs: "/i", RootDisk: "/d.img", Devices: []string{"edu"}, Append: "quiet", Memory: 2048, CPUs: 4},
			want: cat(common("2048", "4"), []string{"-kernel", "/k", "-initrd", "/i",
				"-append", base + " root=/dev/vda quiet",
				"-drive", "if=none,id=root,format=raw,file=/d.img", "-device", "virtio-blk-pci,drive=root",
				"-device", "edu"}),
		},
		{
			name: "nvme root with its own root= and a comma in the path",
			c:    Config{Kernel: "/k", RootDisk: "/a,b.img", RootBus: "nvme", Append: "root=LABEL=kpreload-root"},
			want: cat(common("1024", "2"), []string{"-kernel", "/k",
				"-append", base + " root=LABEL=kpreload-root",
				"-drive", "if=none,id=root,format=raw,file=/a,,b.img", "-device", "nvme,serial=kpreload-root,drive=root"}),
		},
		{
			name: "scsi qcow2 root",
			c:    Config{Kernel: "/k", RootDisk: "/d.qcow2", RootBus: "scsi"},
			want: cat(common("1024", "2"), []string{"-kernel", "/k", "-append", base + " root=/dev/sda",
				"-drive", "if=none,id=root,format=qcow2,file=/d.qcow2",
				"-device", "virtio-scsi-pci,id=scsi0", "-device", "scsi-hd,bus=scsi0.0,drive=root"}),
		},
		{
			name: "vmdk root by its name, snapshot",
			c:    Config{Kernel: "/k", RootDisk: "/d.vmdk", Snapshot: true},
			want: cat(common("1024", "2"), []string{"-kernel", "/k", "-append", base + " root=/dev/vda",
				"-drive", "if=none,id=root,format=vmdk,file=/d.vmdk,snapshot=on", "-device", "virtio-blk-pci,drive=root"}),
		},
		{
			name: "vhd root with its format given",
			c:    Config{Kernel: "/k", RootDisk: "/azure.img", RootDiskFormat: "vpc"},
			want: cat(common("1024", "2"), []string{"-kernel", "/k", "-append", base + " root=/dev/vda",
				"-drive", "if=none,id=root,format=vpc,file=/azure.img", "-device", "virtio-blk-pci,drive=root"}),
		},
		{
			name: "fw_cfg sorted, opt/ prefix added once",
			c:    Config{Kernel: "/k", FwCfg: map[string]string{"opt/kpreload/instance": "/y", "kpreload/a": "/x"}},
			want: cat(common("1024", "2"), []string{"-kernel", "/k", "-append", base,
				"-fw_cfg", "name=opt/kpreload/a,file=/x", "-fw_cfg", "name=opt/kpreload/instance,file=/y"}),
		},
		{
			name: "icount, one CPU",
			c:    Config{Kernel: "/k", CPUs: 1, ICount: 3},
			want: cat(common("1024", "1")[:6], []string{"-icount", "shift=3,sleep=off"}, common("1024", "1")[6:],
				[]string{"-kernel", "/k", "-append", base}),
		},
		{
			name: "kvm, other machine",
			c:    Config{Kernel: "/k", Accel: "kvm", Machine: "pc", Timeout: time.Second},
			want: cat([]string{"-machine", "pc", "-accel", "kvm", "-cpu", "host"}, common("1024", "2")[6:],
				[]string{"-kernel", "/k", "-append", base}),
		},
	}
	for _, tt := range tests {
		got, err := Args(tt.c, "/w/console.log", "/w/report.log")
		if err != nil {
			t.Errorf("Args(%s) error: %v", tt.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Args(%s) =\n  %q\nwant\n  %q", tt.name, got, tt.want)
		}
	}
}

func TestArgsErrors(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		want string
	}{
		{"no kernel", Config{}, "no kernel"},
		{"bad bus", Config{Kernel: "/k", RootDisk: "/d", RootBus: "ide"}, `root bus "ide"`},
		{"bad disk format", Config{Kernel: "/k", RootDisk: "/d.vhd", RootDiskFormat: "vhd"}, `root disk format "vhd": want one of raw, qcow2, vmdk, vpc`},
		{"auto unresolved", Config{Kernel: "/k", Accel: "auto"}, `accelerator "auto"`},
		{"bad accel", Config{Kernel: "/k", Accel: "hvf"}, `accelerator "hvf"`},
		{"empty device", Config{Kernel: "/k", Devices: []string{" "}}, "empty -device"},
		{"comma in fw_cfg name", Config{Kernel: "/k", FwCfg: map[string]string{"a,b": "/x"}}, "comma"},
		{"negative memory", Config{Kernel: "/k", Memory: -1}, "negative"},
		{"icount with two CPUs", Config{Kernel: "/k", ICount: 3}, "1 CPU"},
		{"icount under kvm", Config{Kernel: "/k", Accel: "kvm", CPUs: 1, ICount: 3}, "-accel tcg"},
		{"icount shift too large", Config{Kernel: "/k", CPUs: 1, ICount: 11}, "want 1 to 10"},
		{"late root without a monitor", Config{Kernel: "/k", RootDisk: "/d", RootLate: time.Second}, "set MonitorSocket"},
		{"late root on scsi", Config{Kernel: "/k", RootDisk: "/d", RootBus: "scsi", RootLate: time.Second, MonitorSocket: "/m"}, "want virtio or nvme"},
		{"late root through firmware", Config{Firmware: FirmwareUEFI, OVMFCode: "/c", OVMFVars: "/v", RootDisk: "/d", RootLate: time.Second, MonitorSocket: "/m"}, "direct kernel boot"},
		{"late root with a space", Config{Kernel: "/k", RootDisk: "/a b.img", RootLate: time.Second, MonitorSocket: "/m"}, "space or quote"},
		{"late root as a snapshot", Config{Kernel: "/k", RootDisk: "/d", Snapshot: true, RootLate: time.Second, MonitorSocket: "/m"}, "snapshot"},
	}
	for _, tt := range tests {
		_, err := Args(tt.c, "/w/c", "/w/r")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Args(%s) error = %v, want one mentioning %q", tt.name, err, tt.want)
		}
	}
}

func TestKernelCmdline(t *testing.T) {
	tests := []struct {
		c    Config
		want string
	}{
		{Config{}, "console=ttyS0 panic=-1 kpreload.report=/dev/ttyS1"},
		{Config{RootDisk: "d", RootBus: "nvme", Append: "  rdinit=/init  "}, "console=ttyS0 panic=-1 kpreload.report=/dev/ttyS1 root=/dev/nvme0n1 rdinit=/init"},
		{Config{RootDisk: "d", Append: "root=UUID=x"}, "console=ttyS0 panic=-1 kpreload.report=/dev/ttyS1 root=UUID=x"},
		{Config{RootDisk: "d", Append: "xroot=1"}, "console=ttyS0 panic=-1 kpreload.report=/dev/ttyS1 root=/dev/vda xroot=1"},
	}
	for _, tt := range tests {
		if got := KernelCmdline(tt.c); got != tt.want {
			t.Errorf("KernelCmdline(%+v) = %q, want %q", tt.c, got, tt.want)
		}
	}
}

// TestRootLate checks a late root's command line (a monitor and the hotplug
// port, no root drive) and the monitor commands that plug it in.
func TestRootLate(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		want []string
	}{
		{"virtio", Config{Kernel: "/k", RootDisk: "/a,b.img", MonitorSocket: "/w/m.sock", RootLate: 5 * time.Second},
			[]string{"drive_add 0 if=none,id=root,format=raw,file=/a,,b.img", "device_add virtio-blk-pci,drive=root,bus=" + HotplugBus}},
		{"nvme, qcow2", Config{Kernel: "/k", RootDisk: "/d.qcow2", RootBus: "nvme", MonitorSocket: "/w/m.sock", RootLate: 5 * time.Second},
			[]string{"drive_add 0 if=none,id=root,format=qcow2,file=/d.qcow2", "device_add nvme,serial=kpreload-root,drive=root,bus=" + HotplugBus}},
	}
	for _, tt := range tests {
		got, err := RootPlugCommands(tt.c)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("RootPlugCommands(%s) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
		args, err := Args(tt.c, "/w/console.log", "/w/report.log")
		if err != nil {
			t.Fatalf("Args(%s): %v", tt.name, err)
		}
		line := strings.Join(args, " ")
		for _, want := range []string{"-monitor unix:/w/m.sock,server=on,wait=off", "-device pcie-root-port,id=" + HotplugBus, "root=" + RootDevice[tt.c.withDefaults().RootBus]} {
			if !strings.Contains(line, want) {
				t.Errorf("Args(%s) = %q, want %q in it", tt.name, line, want)
			}
		}
		if strings.Contains(line, "id=root") {
			t.Errorf("Args(%s) = %q attaches the root disk at start", tt.name, line)
		}
	}
}
