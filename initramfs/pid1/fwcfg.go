package pid1

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/report"
)

// fwCfgModule is the kernel module that shows QEMU's fw_cfg in sysfs.
const fwCfgModule = "qemu_fw_cfg"

// FwCfgPortsOrigin is the origin a request read through fw_cfg's I/O ports has.
const FwCfgPortsOrigin = "fw_cfg " + instance.FwCfgName + " (I/O ports)"

// fwCfgSysfs is the request's fw_cfg item as qemu_fw_cfg shows it in sysfs.
func (b *Boot) fwCfgSysfs() instance.File {
	return instance.File{Source: instance.SourceFwCfg, Path: b.sysPath(instance.FwCfgPath)}
}

// fwCfgRequest returns where the early decision reads an instance request
// from QEMU's fw_cfg, and a function to call before that read. Nothing is
// done when QEMU's fw_cfg device (ACPI QEMU0002, as QEMU presents it on x86)
// is absent or the command line carries a request, which wins over fw_cfg's.
// Otherwise the item is read through the device's I/O ports (fwcfg.ReadFile;
// qemu_fw_cfg, needed for nothing else here, is then left to the real
// system's udev). Where that cannot be done (not x86, lockdown,
// kpreload.fwcfg=module), qemu_fw_cfg starts loading now, beside the PCI
// scans of the decision, and the item is read from sysfs once it has loaded. The caller must not load
// modules or record anything in the report before calling wait.
func (b *Boot) fwCfgRequest() (f instance.File, wait func()) {
	f = b.fwCfgSysfs()
	wait = func() {}
	if b.cmdlineRequest() {
		return f, wait
	}
	if b.attempted[fwCfgModule] || !b.fwCfgDevice() {
		return f, wait
	}
	if pf, ok := b.fwCfgPorts(); ok {
		return pf, wait
	}
	return f, b.startFwCfg()
}

// cmdlineRequest reports whether the kernel command line carries a valid
// instance request, which wins over every other source.
func (b *Boot) cmdlineRequest() bool {
	_, _, found, err := instance.FromCmdline(b.cmd.Flag)
	return found && err == nil
}

// fwCfgPorts reads the instance request's fw_cfg item through the device's
// I/O ports (fwcfg.ReadFile) and returns it as the request's fw_cfg file,
// whose Read hands back what was read; qemu_fw_cfg, needed for nothing else
// here, is then not loaded from the initramfs (the real system's udev loads
// it from the root like any other). It returns false, having loaded
// nothing, where the ports cannot be used (not x86, lockdown) or
// kpreload.fwcfg=module asks for the module; the event says why.
func (b *Boot) fwCfgPorts() (instance.File, bool) {
	if b.flag("kpreload.fwcfg", "") == "module" {
		return instance.File{}, false
	}
	data, err := b.o.System.ReadFwCfg(instance.FwCfgName)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		b.event("fw_cfg through its I/O ports: %v; loading qemu_fw_cfg first", err)
		return instance.File{}, false
	}
	b.attempted[fwCfgModule] = true
	b.event("fw_cfg read through its I/O ports: qemu_fw_cfg is not loaded from the initramfs")
	return instance.File{Source: instance.SourceFwCfg, Path: FwCfgPortsOrigin,
		Read: func() ([]byte, error) { return data, err }}, true
}

// fwCfgBeforeRoot is the decision-after-the-root path's fw_cfg read: the
// request's item is read through fw_cfg's I/O ports before the first
// coldplug, so that qemu_fw_cfg does not load beside the root's storage
// modules (under emulation a module load costs the CPU they need), and the
// decision after the root mount reads what was read then (b.fwFile). Where
// the ports cannot be used, coldplug loads qemu_fw_cfg as before and the
// decision reads sysfs.
func (b *Boot) fwCfgBeforeRoot() {
	if b.cmdlineRequest() {
		return // the command line's request wins: fw_cfg is not read
	}
	if b.attempted[fwCfgModule] || !b.fwCfgDevice() {
		return
	}
	if f, ok := b.fwCfgPorts(); ok {
		b.fwFile = &f
	}
}

// startFwCfg starts loading qemu_fw_cfg and returns a function that waits
// for the load and records it.
func (b *Boot) startFwCfg() (wait func()) {
	b.attempted[fwCfgModule] = true
	b.ld.Phase = "initramfs"
	done := make(chan []report.Module, 1)
	go func() {
		defer func() {
			// A panic in a goroutine would end pid 1: record it instead.
			if r := recover(); r != nil {
				t := b.o.Now()
				done <- []report.Module{{Name: fwCfgModule, Result: "failed", Reason: fmt.Sprintf("load crashed: %v", r), Start: t, End: t, Phase: "initramfs"}}
			}
		}()
		done <- b.ld.Load(b.index, []string{fwCfgModule})
	}()
	return func() { b.record(<-done, b.ld.FirmwareDirs) }
}

// fwCfgDevice reports whether QEMU's fw_cfg device is there and
// qemu_fw_cfg, as the index holds it, matches it. Only qemu_fw_cfg's own
// aliases are tried: matching against every module of the index costs more
// than the lookup by name.
func (b *Boot) fwCfgDevice() bool {
	paths, _ := filepath.Glob(filepath.Join(b.o.SysDir, "bus/acpi/devices/QEMU0002:*/modalias"))
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		alias := strings.TrimSpace(string(raw))
		for _, c := range b.index.ByName(fwCfgModule) {
			if c.Matches(alias) {
				return true
			}
		}
	}
	return false
}
