// Package qemu boots a kernel, an initramfs and a root disk in QEMU, waits for the
// machine to power itself off, and reads back what kpreload's /init and the test root
// filesystem's init reported on a dedicated serial port (falling back to the console).
package qemu

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
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

// ReportDevice is the guest device of the second serial port, the clean report channel
// passed to the guest as kpreload.report=.
const ReportDevice = "/dev/ttyS1"

// Config describes one boot.
type Config struct {
	// Kernel is the bzImage/vmlinuz to boot (required).
	Kernel string
	// Initramfs is the initrd image; empty boots without one.
	Initramfs string
	// RootDisk is a raw (or .qcow2) disk image attached on RootBus; empty attaches none.
	RootDisk string
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
func Args(c Config, consoleLog, reportLog string) ([]string, error) {
	c = c.withDefaults()
	if c.Kernel == "" {
		return nil, errors.New("qemu: no kernel given")
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
	args := []string{"-machine", c.Machine}
	switch c.Accel {
	case "tcg":
		// No TSC-deadline timer under TCG: vCPU TSCs drift apart there ("Marking TSC
		// unstable due to TSCs unsynchronized"), and a deadline computed against
		// another vCPU's TSC can leave an idle vCPU asleep for good (RCU stalls).
		args = append(args, "-accel", "tcg,thread=multi", "-cpu", "max,tsc-deadline=off")
	case "kvm":
		args = append(args, "-accel", "kvm", "-cpu", "host")
	default:
		return nil, fmt.Errorf("qemu: accelerator %q: want tcg or kvm (auto is resolved by Run)", c.Accel)
	}
	args = append(args,
		"-m", fmt.Sprint(c.Memory),
		"-smp", fmt.Sprint(c.CPUs),
		"-nodefaults", "-no-user-config",
		"-display", "none", "-monitor", "none",
		"-no-reboot",
		"-serial", "file:"+consoleLog,
		"-serial", "file:"+reportLog,
		"-kernel", c.Kernel,
	)
	if c.Initramfs != "" {
		args = append(args, "-initrd", c.Initramfs)
	}
	args = append(args, "-append", KernelCmdline(c))
	if c.RootDisk != "" {
		format := "raw"
		if strings.HasSuffix(c.RootDisk, ".qcow2") {
			format = "qcow2"
		}
		args = append(args, "-drive", "if=none,id=root,format="+format+",file="+optEscape(c.RootDisk))
		switch c.RootBus {
		case "virtio":
			args = append(args, "-device", "virtio-blk-pci,drive=root")
		case "nvme":
			args = append(args, "-device", "nvme,serial=kpreload-root,drive=root")
		case "scsi":
			args = append(args, "-device", "virtio-scsi-pci,id=scsi0", "-device", "scsi-hd,bus=scsi0.0,drive=root")
		}
	}
	for _, d := range c.Devices {
		if d = strings.TrimSpace(d); d == "" {
			return nil, errors.New("qemu: empty -device argument")
		}
		args = append(args, "-device", d)
	}
	for _, name := range slices.Sorted(maps.Keys(c.FwCfg)) {
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

// optEscape doubles commas, QEMU's escape inside a key=value option list.
func optEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }
