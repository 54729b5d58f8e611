// Package qemu boots a kernel, an initramfs and a root disk in QEMU (or a whole disk
// image through UEFI firmware and its own bootloader), waits for the machine to power
// itself off or for the console to show a pattern, and reads back what kpreload's /init
// and the test root filesystem's init reported on a dedicated serial port (falling back
// to the console).
package qemu

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kpreload/kpreload/report"
)

// Defaults used when a Config field is left zero.
const (
	DefaultMachine = "q35"
	DefaultMemory  = 1024 // MiB
	DefaultCPUs    = 2
	DefaultTimeout = 120 * time.Second
	DefaultRootBus = "virtio"
	DefaultAccel   = "tcg"
)

// TCGModel is the virtual CPU of a TCG boot: QEMU's AMD-vendored qemu64 with
// the x86-64-v2 instructions every cloud CPU has (SSSE3, SSE4.1, SSE4.2 with
// its crc32, which Debian's crc32c-intel needs, POPCNT, CMPXCHG16B), rather
// than max. Without max's AVX, AVX-512 and newer sets for the guest's
// kernel and libraries to pick, a boot takes less host CPU under TCG
// (bench/results/qemu-cpu-model-2026-12-07.md), which most of make test's
// time is; AMD-vendored, the guest needs no page-table isolation, as with
// max. It has no TSC-deadline timer either (see Args). It keeps RDRAND and
// RDSEED, which every cloud CPU has: without them the guest's random pool is
// ready only seconds into the boot (about 7 s under TCG), and a program that
// asks it for random bytes before then, as Go's programs may at start, waits.
const TCGModel = "qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16,+rdrand,+rdseed"

// ReportDevice is the guest device of the second serial port, the clean report channel
// passed to the guest as kpreload.report=.
const ReportDevice = "/dev/ttyS1"

// Firmware values of Config.
const (
	// FirmwareDirect boots Config.Kernel directly (QEMU's -kernel; SeaBIOS).
	FirmwareDirect = ""
	// FirmwareUEFI boots Config.RootDisk through OVMF (UEFI firmware on pflash) and
	// the disk's own bootloader: no -kernel, -initrd or -append.
	FirmwareUEFI = "uefi"
	// FirmwareBIOS boots Config.RootDisk through SeaBIOS and the disk's own
	// boot code in its MBR (GRUB): no -kernel, -initrd or -append.
	FirmwareBIOS = "bios"
	// FirmwareUEFISecure boots Config.RootDisk through OVMF built for Secure
	// Boot (OVMF_CODE_4M.secboot.fd: q35 with SMM, its variable store on
	// secure pflash). OVMFVars is the variable store: default
	// OVMF_VARS_4M.ms.fd (Microsoft's keys enrolled, Secure Boot on), or a
	// store with the image's module key as a MOK (kpreload image build
	// --secure-boot writes <name>.ovmf-vars.fd).
	FirmwareUEFISecure = "uefi-secure"
)

// OVMF firmware files (package ovmf) tried in order when Config.OVMFCode is empty:
// the 4 MiB build first, with its matching variable store template.
var ovmfPairs = [][2]string{
	{OVMFCode4M, "/usr/share/OVMF/OVMF_VARS_4M.fd"},
	{SecureBootCode, SecureBootVars},
	{"/usr/share/OVMF/OVMF_CODE.fd", "/usr/share/OVMF/OVMF_VARS.fd"},
}

// Config describes one boot.
type Config struct {
	// Kernel is the bzImage/vmlinuz to boot (required unless Firmware is FirmwareUEFI,
	// which forbids it).
	Kernel string
	// Initramfs is the initrd image; empty boots without one.
	Initramfs string
	// MonitorSocket, when set, is a Unix socket path where QEMU serves its human
	// monitor (see Monitor), for tests that change the machine while it boots
	// (a disk that appears late); empty means no monitor. The machine then also
	// gets an empty PCIe root port, HotplugBus, to plug devices into (q35's
	// root bus takes no hotplug).
	MonitorSocket string
	// RootDisk is a raw (or .qcow2) disk image attached on RootBus; empty attaches none.
	// With FirmwareUEFI it is the disk the firmware boots from (required).
	RootDisk string
	// RootLate, when above 0, attaches RootDisk this long after QEMU starts
	// instead of at its start: a root volume that appears while the machine
	// boots, as a cloud's network block volumes and NVMe namespaces can.
	// Run gives the machine a monitor (MonitorSocket, beside the console
	// log unless set) and plugs the disk in there (RootPlugCommands) on
	// HotplugBus, where the guest's PCIe hotplug finds it. It needs a direct
	// kernel boot and RootBus virtio or nvme; the guest's root= names it
	// as at start (/dev/vda with no Drives), or better by UUID.
	RootLate time.Duration
	// RootDiskFormat is RootDisk's format as QEMU's block drivers name it:
	// "raw", "qcow2", "vmdk" or "vpc" (VHD). Empty takes it from the file's
	// name (DiskFormat). QEMU is always told the format: it never probes.
	RootDiskFormat string
	// Firmware is FirmwareDirect (default), FirmwareUEFI or FirmwareBIOS. With
	// FirmwareUEFI or FirmwareBIOS the
	// kernel command line comes from the disk's bootloader, so Append is refused and
	// the harness's own parameters (console=ttyS0 kpreload.report=/dev/ttyS1) must be
	// in the image's boot entry.
	Firmware string
	// OVMFCode is the UEFI firmware code image (read-only pflash); empty picks
	// OVMF_CODE_4M.fd, else OVMF_CODE.fd, from /usr/share/OVMF.
	OVMFCode string
	// OVMFVars is the variable store template; Run boots with a copy of it in the run's
	// work directory, so runs never share or change it. Empty picks the template that
	// matches OVMFCode (OVMF_VARS_4M.fd or OVMF_VARS.fd).
	OVMFVars string
	// Until, when set, ends the run as soon as the console log matches it (QEMU is
	// stopped, which is not an error): a real systemd guest does not power off, so
	// tests wait for e.g. "Reached target .*Multi-User System". A run that ends
	// otherwise without a match is an error.
	Until *regexp.Regexp
	// UntilUp ends the run, as Until does, on kpreload-up.service's record
	// on the report channel (report.UpUp: the system reached its default
	// target). Once kpreload-boot-ok.service's record says that record will
	// come (report.UpBooting), Until's console match no longer ends the run:
	// images with kpreload's units end on their own line, others on Until.
	UntilUp bool
	// Snapshot boots the root disk through a temporary copy-on-write overlay:
	// what the guest writes is dropped and the disk file is never changed.
	Snapshot bool
	// GuestForwards give the guest a network (QEMU's user-mode network on
	// virtio-net, restrict=on: nothing reaches the host or beyond) whose only
	// way out are these forwards, each "tcp:GUESTADDR:PORT-tcp:127.0.0.1:PORT"
	// (a connection to GUESTADDR:PORT in the guest reaches the host's
	// 127.0.0.1:PORT), such as a registry on the host's loopback.
	GuestForwards []string
	// HostForwards give the guest the same network and forward host ports
	// to it, each "tcp:127.0.0.1:HOSTPORT-:GUESTPORT" (QEMU's hostfwd), such
	// as ssh to the guest's port 22 from the host's loopback.
	HostForwards []string
	// AtUntil, when set, runs once the console matches Until, while the
	// machine still runs (ssh into it, say); the run ends when it returns,
	// and its error is the run's.
	AtUntil func(ctx context.Context) error
	// Drives are more disk images (raw, or by name as DiskFormat says) attached
	// read-only on virtio after the root disk: a seed, a package to install.
	Drives []string
	// RootBus is how the root disk is attached: "virtio" (default, /dev/vda), "nvme"
	// (/dev/nvme0n1) or "scsi" (virtio-scsi, /dev/sda).
	RootBus string
	// Devices are extra -device arguments, e.g. "edu".
	Devices []string
	// Append is added to the kernel command line after the harness's own parameters
	// (console=ttyS0 panic=-1 kpreload.report=/dev/ttyS1, and root= for the root disk
	// unless Append has one), so it can override them.
	Append string
	// Memory is the guest memory in MiB (default 1024).
	Memory int
	// CPUs is the number of virtual CPUs (default 2).
	CPUs int
	// Accel is "tcg" (default), "kvm" (used only if a short probe boot shows it works,
	// else TCG with a warning) or "auto" (probe, then choose quietly).
	Accel string
	// Timeout bounds the whole boot (default 120 s); QEMU is killed when it runs out.
	Timeout time.Duration
	// ConsoleLog is where the first serial port (the kernel console) is written; empty
	// puts console.log in the run's work directory.
	ConsoleLog string
	// ReportLog is where the second serial port (the report channel) is written; empty
	// puts report.log next to the console log.
	ReportLog string
	// FwCfg maps fw_cfg item names to host files (-fw_cfg name=opt/NAME,file=FILE); a
	// name already starting with "opt/" is used as is.
	FwCfg map[string]string
	// Machine is the QEMU machine type (default "q35").
	Machine string
	// ICount, when above 0, runs TCG with a virtual clock driven by the
	// instruction count (-icount shift=ICount,sleep=off): each guest
	// instruction takes 2^ICount ns of guest time and idle time is skipped,
	// so the guest's timings do not move with the host's load. For A/B
	// comparisons (scripts/ab-init.sh), not for figures against real time:
	// a TCG guest's first run of new code (translation) costs nothing there.
	// It needs Accel "tcg" and one CPU (SMP bring-up stalls under it here).
	ICount int

	// varsCopy is the per-run copy of the UEFI variable store Run made.
	varsCopy string
}

// Secure Boot firmware (package ovmf): the code built with SMM and Secure
// Boot, and the variable store with Microsoft's keys enrolled.
const (
	SecureBootCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	SecureBootVars = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
)

// FindOVMF returns the OVMF code image and variable store template to use: code
// and vars when given, else the first installed pair of /usr/share/OVMF.
func FindOVMF(code, vars string) (string, string, error) {
	if code != "" {
		if vars == "" {
			for _, p := range ovmfPairs {
				if p[0] == code {
					vars = p[1]
				}
			}
			if vars == "" {
				return "", "", fmt.Errorf("qemu: OVMF code %s: name its variable store template too (OVMFVars)", code)
			}
		}
		for _, f := range []string{code, vars} {
			if _, err := os.Stat(f); err != nil {
				return "", "", fmt.Errorf("qemu: UEFI firmware: %w", err)
			}
		}
		return code, vars, nil
	}
	for _, p := range ovmfPairs {
		if _, err := os.Stat(p[0]); err != nil {
			continue
		}
		if vars == "" {
			vars = p[1]
		}
		if _, err := os.Stat(vars); err != nil {
			return "", "", fmt.Errorf("qemu: UEFI variable store template: %w", err)
		}
		return p[0], vars, nil
	}
	return "", "", fmt.Errorf("qemu: no OVMF firmware in /usr/share/OVMF (install the ovmf package: scripts/deps.sh)")
}

// withDefaults returns c with its zero fields filled in.
func (c Config) withDefaults() Config {
	if c.Machine == "" {
		c.Machine = DefaultMachine
	}
	if c.Memory == 0 {
		c.Memory = DefaultMemory
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.RootBus == "" {
		c.RootBus = DefaultRootBus
	}
	if c.Accel == "" {
		c.Accel = DefaultAccel
	}
	return c
}

// RootDevice is the guest's block device for the root disk on each bus.
var RootDevice = map[string]string{
	"virtio": "/dev/vda",
	"nvme":   "/dev/nvme0n1",
	"scsi":   "/dev/sda",
}

// KernelCmdline is the command line the guest gets for c (after defaults).
func KernelCmdline(c Config) string {
	c = c.withDefaults()
	parts := []string{"console=ttyS0", "panic=-1", "kpreload.report=" + ReportDevice}
	if c.RootDisk != "" && !hasParam(c.Append, "root") {
		parts = append(parts, "root="+RootDevice[c.RootBus])
	}
	if a := strings.TrimSpace(c.Append); a != "" {
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// hasParam reports whether the command line sets key=.
func hasParam(cmdline, key string) bool {
	for _, f := range strings.Fields(cmdline) {
		if strings.HasPrefix(f, key+"=") {
			return true
		}
	}
	return false
}

// Args builds the QEMU command line (without the binary) for c, writing the console to
// consoleLog and the report channel to reportLog. c.Accel must be "tcg" or "kvm" here:
// Run resolves "auto" and probes "kvm" before calling it.
//
// With FirmwareUEFI, c.OVMFCode must name the firmware and the variable store is
// c.OVMFVars itself unless Run made a per-run copy (Run always does).
func Args(c Config, consoleLog, reportLog string) ([]string, error) {
	c = c.withDefaults()
	uefi := false
	switch c.Firmware {
	case FirmwareDirect:
		if c.Kernel == "" {
			return nil, errors.New("qemu: no kernel given")
		}
	case FirmwareUEFI, FirmwareBIOS, FirmwareUEFISecure:
		uefi = c.Firmware != FirmwareBIOS
		switch {
		case c.Kernel != "" || c.Initramfs != "":
			return nil, fmt.Errorf("qemu: %s boot takes the kernel and initramfs from the disk's bootloader: leave Kernel and Initramfs empty", c.Firmware)
		case strings.TrimSpace(c.Append) != "":
			return nil, fmt.Errorf("qemu: %s boot takes the kernel command line from the disk's boot entry: put the parameters there, not in Append", c.Firmware)
		case c.RootDisk == "":
			return nil, fmt.Errorf("qemu: %s boot needs a disk image to boot (RootDisk)", c.Firmware)
		case !uefi:
		case c.OVMFCode == "":
			return nil, errors.New("qemu: UEFI boot needs the OVMF firmware code image (OVMFCode; see FindOVMF)")
		}
		if c.varsCopy == "" {
			c.varsCopy = c.OVMFVars
		}
		if uefi && c.varsCopy == "" {
			return nil, errors.New("qemu: UEFI boot needs a UEFI variable store (OVMFVars)")
		}
	default:
		return nil, fmt.Errorf("qemu: firmware %q: want %q (direct kernel boot), %q, %q or %q", c.Firmware, FirmwareDirect, FirmwareUEFI, FirmwareUEFISecure, FirmwareBIOS)
	}
	if consoleLog == "" || reportLog == "" {
		return nil, errors.New("qemu: console and report log paths are required")
	}
	if c.Memory < 0 || c.CPUs < 0 {
		return nil, fmt.Errorf("qemu: memory %d MiB and CPUs %d must not be negative", c.Memory, c.CPUs)
	}
	if _, ok := RootDevice[c.RootBus]; !ok {
		return nil, fmt.Errorf("qemu: root bus %q: want virtio, nvme or scsi", c.RootBus)
	}
	if c.ICount != 0 {
		if c.ICount < 0 || c.ICount > 10 {
			return nil, fmt.Errorf("qemu: icount shift %d: want 1 to 10 (2^N ns per instruction)", c.ICount)
		}
		if c.Accel != "tcg" || c.CPUs != 1 {
			return nil, fmt.Errorf("qemu: icount needs -accel tcg and 1 CPU, have %s and %d CPUs", c.Accel, c.CPUs)
		}
	}
	machine := c.Machine
	if c.Firmware == FirmwareUEFISecure {
		// Secure Boot OVMF keeps its variables in SMM-protected flash.
		machine += ",smm=on"
	}
	args := []string{"-machine", machine}
	switch c.Accel {
	case "tcg":
		// No TSC-deadline timer under TCG: vCPU TSCs drift apart there ("Marking TSC
		// unstable due to TSCs unsynchronized"), and a deadline computed against
		// another vCPU's TSC can leave an idle vCPU asleep for good (RCU stalls).
		// One TCG thread for all vCPUs: with thread=multi the 6.12 kernel once died
		// patching its own code ("Fatal exception in interrupt" on a half-patched
		// NOP in sched_clock_cpu), a cross-vCPU self-modifying-code race of
		// multi-threaded TCG. On this project's 2-core hosts, with tests booting in
		// parallel, it costs nothing measurable (builder/qemu + initramfs/e2e:
		// 27.9 + 44.6 s single, 26.1 + 43.9 s multi).
		// The CPU is TCGModel rather than max: see there.
		args = append(args, "-accel", "tcg,thread=single", "-cpu", TCGModel)
		if c.ICount > 0 {
			args = append(args, "-icount", fmt.Sprintf("shift=%d,sleep=off", c.ICount))
		}
	case "kvm":
		args = append(args, "-accel", "kvm", "-cpu", "host")
	default:
		return nil, fmt.Errorf("qemu: accelerator %q: want tcg or kvm (auto is resolved by Run)", c.Accel)
	}
	args = append(args,
		"-m", fmt.Sprint(c.Memory),
		"-smp", fmt.Sprint(c.CPUs),
		"-nodefaults", "-no-user-config",
		"-display", "none", "-monitor", monitorArg(c.MonitorSocket),
		"-no-reboot",
		"-serial", "file:"+consoleLog,
		"-serial", "file:"+reportLog,
	)
	if c.Firmware == FirmwareUEFISecure {
		args = append(args, "-global", "driver=cfi.pflash01,property=secure,value=on")
	}
	if uefi {
		args = append(args,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+optEscape(c.OVMFCode),
			"-drive", "if=pflash,format=raw,unit=1,file="+optEscape(c.varsCopy),
		)
	} else if c.Firmware == FirmwareDirect {
		args = append(args, "-kernel", c.Kernel)
		if c.Initramfs != "" {
			args = append(args, "-initrd", c.Initramfs)
		}
		args = append(args, "-append", KernelCmdline(c))
	}
	if c.MonitorSocket != "" {
		args = append(args, "-device", "pcie-root-port,id="+HotplugBus+",chassis=1,slot=1")
	}
	if c.RootLate > 0 {
		if _, err := RootPlugCommands(c); err != nil {
			return nil, err
		}
	} else if c.RootDisk != "" {
		format := c.RootDiskFormat
		if format == "" {
			format = DiskFormat(c.RootDisk)
		}
		if !slices.Contains(diskFormats, format) {
			return nil, fmt.Errorf("qemu: root disk format %q: want one of %s", format, strings.Join(diskFormats, ", "))
		}
		drive := "if=none,id=root,format=" + format + ",file=" + optEscape(c.RootDisk)
		if c.Snapshot {
			drive += ",snapshot=on"
		}
		args = append(args, "-drive", drive)
		switch c.RootBus {
		case "virtio":
			args = append(args, "-device", "virtio-blk-pci,drive=root")
		case "nvme":
			args = append(args, "-device", "nvme,serial=kpreload-root,drive=root")
		case "scsi":
			args = append(args, "-device", "virtio-scsi-pci,id=scsi0", "-device", "scsi-hd,bus=scsi0.0,drive=root")
		}
	}
	if len(c.GuestForwards) > 0 || len(c.HostForwards) > 0 {
		netdev := "user,id=net0,restrict=on"
		for _, f := range c.GuestForwards {
			if strings.ContainsAny(f, ", ") || !strings.HasPrefix(f, "tcp:") {
				return nil, fmt.Errorf("qemu: guest forward %q: want tcp:GUESTADDR:PORT-tcp:127.0.0.1:PORT", f)
			}
			netdev += ",guestfwd=" + f
		}
		for _, f := range c.HostForwards {
			if strings.ContainsAny(f, ", ") || !strings.HasPrefix(f, "tcp:127.0.0.1:") {
				return nil, fmt.Errorf("qemu: host forward %q: want tcp:127.0.0.1:HOSTPORT-:GUESTPORT", f)
			}
			netdev += ",hostfwd=" + f
		}
		args = append(args, "-netdev", netdev, "-device", "virtio-net-pci,netdev=net0")
	}
	for i, d := range c.Drives {
		format := DiskFormat(d)
		id := fmt.Sprintf("drive%d", i)
		args = append(args, "-drive", "if=none,id="+id+",readonly=on,format="+format+",file="+optEscape(d), "-device", "virtio-blk-pci,drive="+id)
	}
	for _, d := range c.Devices {
		if d = strings.TrimSpace(d); d == "" {
			return nil, errors.New("qemu: empty -device argument")
		}
		args = append(args, "-device", d)
	}
	if c.Firmware != FirmwareDirect {
		// The report channel, for images whose boot entry names none
		// (kpreload.report= on the command line still wins).
		args = append(args, "-fw_cfg", "name="+report.ChannelFwCfgName+",string="+ReportDevice)
	}
	for _, name := range slices.Sorted(maps.Keys(c.FwCfg)) {
		if "opt/"+strings.TrimPrefix(name, "opt/") == report.ChannelFwCfgName {
			return nil, fmt.Errorf("qemu: fw_cfg name %q is the harness's own (the report channel)", name)
		}
		item := name
		if !strings.HasPrefix(item, "opt/") {
			item = "opt/" + item
		}
		if strings.Contains(item, ",") {
			return nil, fmt.Errorf("qemu: fw_cfg name %q must not contain a comma", name)
		}
		args = append(args, "-fw_cfg", "name="+item+",file="+optEscape(c.FwCfg[name]))
	}
	return args, nil
}

// diskFormats are the disk formats a Config may name (QEMU's block drivers).
var diskFormats = []string{"raw", "qcow2", "vmdk", "vpc"}

// DiskFormat is the format of a disk image file by its name: qcow2 for
// .qcow2, vmdk for .vmdk, vpc for .vhd, raw otherwise.
func DiskFormat(path string) string {
	switch {
	case strings.HasSuffix(path, ".qcow2"):
		return "qcow2"
	case strings.HasSuffix(path, ".vmdk"):
		return "vmdk"
	case strings.HasSuffix(path, ".vhd"):
		return "vpc"
	}
	return "raw"
}

// optEscape doubles commas, QEMU's escape inside a key=value option list.
func optEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// RootPlugCommands are the monitor commands that attach c's root disk to a
// running machine (Config.RootLate): the drive, then its device on
// HotplugBus.
func RootPlugCommands(c Config) ([]string, error) {
	c = c.withDefaults()
	switch {
	case c.RootDisk == "":
		return nil, errors.New("qemu: a late root needs a root disk (RootDisk)")
	case c.Firmware != FirmwareDirect:
		return nil, fmt.Errorf("qemu: a late root needs a direct kernel boot: %s firmware boots from the disk", c.Firmware)
	case c.MonitorSocket == "":
		return nil, errors.New("qemu: a late root is plugged in through the monitor: set MonitorSocket (Run does)")
	case c.Snapshot:
		return nil, errors.New("qemu: a late root cannot be a snapshot")
	case strings.ContainsAny(c.RootDisk, " \t\n\"'"):
		return nil, fmt.Errorf("qemu: a late root's path %q has a space or quote, which the monitor's command line splits on", c.RootDisk)
	}
	format := c.RootDiskFormat
	if format == "" {
		format = DiskFormat(c.RootDisk)
	}
	if !slices.Contains(diskFormats, format) {
		return nil, fmt.Errorf("qemu: root disk format %q: want one of %s", format, strings.Join(diskFormats, ", "))
	}
	drive := "drive_add 0 if=none,id=root,format=" + format + ",file=" + optEscape(c.RootDisk)
	switch c.RootBus {
	case "virtio":
		return []string{drive, "device_add virtio-blk-pci,drive=root,bus=" + HotplugBus}, nil
	case "nvme":
		return []string{drive, "device_add nvme,serial=kpreload-root,drive=root,bus=" + HotplugBus}, nil
	}
	return nil, fmt.Errorf("qemu: a late root on %s: want virtio or nvme (PCIe hotplug)", c.RootBus)
}

// HotplugBus is the PCIe root port a machine with a monitor has for devices
// plugged in while it runs: device_add ...,bus=HotplugBus.
const HotplugBus = "hotplug0"

// monitorArg is QEMU's -monitor value: a Unix socket server, or none.
func monitorArg(socket string) string {
	if socket == "" {
		return "none"
	}
	return "unix:" + optEscape(socket) + ",server=on,wait=off"
}
