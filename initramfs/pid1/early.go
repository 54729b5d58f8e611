package pid1

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/live/fwcfg"
	"github.com/kpreload/kpreload/live/loader"
	"github.com/kpreload/kpreload/live/report"
)

// earlyResult is what the early driver loads did while the root was found.
type earlyResult struct {
	modules []report.Module
	// devices maps a device key (path, NUL, modalias) to the modules matched.
	devices map[string][]string
	keys    map[string]report.Device
}

// startEarly takes the driver decision before the first coldplug and starts
// loading the chosen sets in a goroutine, beside the kernel's own modules and
// while the root is found, when that decision cannot change after the root
// mount: the initramfs index is marked complete (the image's root cache holds
// no set this initramfs lacks) and the request comes from the command line,
// fw_cfg (qemu_fw_cfg is loaded first when its device is there), the
// initramfs's copy of the image's instance file, or nowhere (the default).
// Otherwise it returns nil and the decision waits for the root, as before;
// the report says which.
func (b *Boot) startEarly() <-chan earlyResult {
	if b.initIdx == nil {
		return nil
	}
	if b.flag("kpreload.early", "1") == "0" {
		b.event("driver decision after the root mount: kpreload.early=0")
		b.fwCfgBeforeRoot()
		return nil
	}
	if !b.initIdx.Complete {
		b.event("driver decision after the root mount: the initramfs index is not marked complete (the root's cache may hold other sets)")
		b.fwCfgBeforeRoot()
		return nil
	}
	fwFile, fwCfgLoaded := b.fwCfgRequest()
	var sets []selection.Set
	for i := range b.initIdx.Sets {
		sets = append(sets, selection.Set{Set: &b.initIdx.Sets[i], Dir: b.initDir, From: "initramfs"})
	}
	// One scan of the PCI bus serves the decision and, when every alias of
	// the chosen sets is a PCI one, the early match: the devices a driver set
	// matches (PCI GPUs) are there before /init runs, and the first coldplug
	// round scans everything while the sets load.
	pciBus, pciBusErr := coldplug.ScanBus("/sys", "pci")
	pciDevs, pciErr := pciDevices("/sys", pciBus, pciBusErr)
	fwCfgLoaded()
	files := []instance.File{fwFile, {Source: instance.SourceImage, Path: instance.InitramfsPath}}
	req, reqErrs := instance.Find(b.cmd.Flag, files)
	for _, e := range reqErrs {
		b.errorf("%v", e)
	}
	d := b.decideOn(req, reqErrs, sets, pciDevs, pciErr)
	b.event("driver selection early, before the root (complete initramfs index; request from %s): %s", req.Source, chosenList(d))

	keep := func(s *bootindex.Set) bool { return selection.IsKernelSet(s) || d.Keep(s) }
	resolve := coldplug.NewIndex()
	resolve.Add(b.initDir, b.initIdx, keep)
	match := coldplug.NewIndex()
	match.Add(b.initDir, b.initIdx, func(s *bootindex.Set) bool { return !selection.IsKernelSet(s) && d.Keep(s) })
	// A loader of its own: the main goroutine's keeps loading the root's
	// storage and filesystem modules meanwhile.
	ld := &loader.Loader{
		Release: b.ld.Release, Vermagic: b.ld.Vermagic, SysRoot: b.ld.SysRoot, Now: b.ld.Now, Params: b.ld.Params,
		VerifyDigest: b.ld.VerifyDigest, SigEnforced: b.ld.SigEnforced, Isolate: b.ld.Isolate, Timeout: b.ld.Timeout, Nice: b.ld.Nice,
		Phase: "initramfs-early", FirmwareDirs: b.firmwareDirs(""),
	}
	// Otherwise one whole scan serves both the early match and the first
	// coldplug round.
	var devs []coldplug.Device
	var scanErr error
	switch bus := scanBus(match); {
	case bus == "": // no aliases: nothing to match
	case bus == "pci":
		devs, scanErr = pciBus, pciBusErr
	default:
		devs, scanErr = coldplug.Scan("/sys")
		if scanErr == nil {
			b.prescan, b.prescanBus = devs, "*"
		}
	}
	out := make(chan earlyResult, 1)
	go func() {
		res := earlyResult{devices: map[string][]string{}, keys: map[string]report.Device{}}
		defer func() {
			if r := recover(); r != nil {
				res.modules = append(res.modules, report.Module{Name: "early-load", Result: "failed", Reason: fmt.Sprintf("early driver load crashed: %v", r)})
			}
			out <- res
		}()
		if scanErr != nil {
			return
		}
		var want []string
		seen := map[string]bool{}
		for _, dev := range devs {
			names := match.Match(dev.Modalias)
			if len(names) == 0 {
				continue
			}
			key := dev.Path + "\x00" + dev.Modalias
			res.devices[key] = names
			res.keys[key] = report.Device{Path: dev.Path, Modalias: dev.Modalias, Driver: dev.Driver}
			for _, n := range names {
				if !seen[n] {
					seen[n] = true
					want = append(want, n)
				}
			}
		}
		if len(want) > 0 {
			res.modules = ld.Load(resolve, want)
		}
	}()
	// The console (a serial port under QEMU) is slow to write to: the
	// decision is printed once its loads have started.
	b.printDecision(d)
	return out
}

// pciDevices turns a coldplug scan of the PCI bus into the devices the
// decision takes, their ids parsed from the modaliases already read. Where
// the scan failed or a modalias does not parse, it reads the bus again with
// pci.Scan, which falls back to the id files.
func pciDevices(sysRoot string, bus []coldplug.Device, scanErr error) ([]pci.Device, error) {
	if scanErr != nil {
		return pci.Scan(sysRoot)
	}
	devs := make([]pci.Device, 0, len(bus))
	for _, c := range bus {
		d, err := pci.ParseModalias(c.Modalias)
		if err != nil {
			return pci.Scan(sysRoot)
		}
		d.Address, d.Driver = filepath.Base(c.Path), c.Driver
		devs = append(devs, d)
	}
	return devs, nil
}

// fwCfgModule is the kernel module that shows QEMU's fw_cfg in sysfs.
const fwCfgModule = "qemu_fw_cfg"

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
	f = instance.File{Source: instance.SourceFwCfg, Path: instance.FwCfgPath}
	wait = func() {}
	if _, _, found, err := instance.FromCmdline(b.cmd.Flag); found && err == nil {
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
	data, err := fwcfg.ReadFile(instance.FwCfgName)
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
	if _, _, found, err := instance.FromCmdline(b.cmd.Flag); found && err == nil {
		return // the command line's request wins: fw_cfg is not read
	}
	if b.attempted[fwCfgModule] || !b.fwCfgDevice() {
		return
	}
	if f, ok := b.fwCfgPorts(); ok {
		b.fwFile = &f
	}
}

// FwCfgPortsOrigin is the origin a request read through fw_cfg's I/O ports has.
const FwCfgPortsOrigin = "fw_cfg " + instance.FwCfgName + " (I/O ports)"

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
				t := Now()
				done <- []report.Module{{Name: fwCfgModule, Result: "failed", Reason: fmt.Sprintf("load crashed: %v", r), Start: t, End: t, Phase: "initramfs"}}
			}
		}()
		done <- b.ld.Load(b.index, []string{fwCfgModule})
	}()
	return func() { b.record(<-done) }
}

// fwCfgDevice reports whether QEMU's fw_cfg device is there and
// qemu_fw_cfg, as the index holds it, matches it. Only qemu_fw_cfg's own
// aliases are tried: matching against every module of the index costs more
// than the lookup by name.
func (b *Boot) fwCfgDevice() bool {
	paths, _ := filepath.Glob("/sys/bus/acpi/devices/QEMU0002:*/modalias")
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

// finishEarly records what the early loads did, checks the root agrees with
// the early decision (warning when its cache or instance file says otherwise:
// regenerate the initramfs), loads kpreload.load= modules and activates.
func (b *Boot) finishEarly(res earlyResult) {
	b.rep.Modules = append(b.rep.Modules, res.modules...)
	for _, m := range res.modules {
		b.attempted[m.Name] = true
		if m.End > b.rep.DriversReady {
			b.rep.DriversReady = m.End
		}
		for _, fw := range m.MissingFirmware {
			b.warnf("%s declares firmware %s, which is not in the initramfs: its init may fail", m.Name, fw)
		}
	}
	for key, names := range res.devices {
		i, ok := b.devIndex[key]
		if !ok {
			b.rep.Devices = append(b.rep.Devices, res.keys[key])
			i = len(b.rep.Devices) - 1
			b.devIndex[key] = i
		}
		dev := &b.rep.Devices[i]
		dev.Modules = append(dev.Modules, names...)
		dev.Decision = "matched (initramfs, early)"
	}
	b.event("early driver loads joined: %d modules", len(res.modules))

	rootPath := bootindex.Path(filepath.Join(NewRoot, bootindex.RootCacheDir), b.release)
	if rootIdx, err := bootindex.Read(rootPath); err == nil {
		have := map[string]bool{}
		for _, s := range b.initIdx.Sets {
			have[s.ID] = true
		}
		for _, s := range rootIdx.Sets {
			if !have[s.ID] && !selection.IsKernelSet(&s) {
				b.warnf("the root's cache has %s %s (set %.12s), which this initramfs (marked complete) lacks: not considered this boot; regenerate the initramfs", s.Driver, s.Version, s.ID)
			}
		}
	}
	if root, err := os.ReadFile(filepath.Join(NewRoot, instance.ImagePath)); err == nil {
		if copy, cerr := os.ReadFile(instance.InitramfsPath); cerr != nil || !bytes.Equal(root, copy) {
			b.warnf("the root's %s differs from the initramfs's copy the early decision used: regenerate the initramfs", instance.ImagePath)
		}
	}
	keepDriver := func(s *bootindex.Set) bool {
		return !selection.IsKernelSet(s) && b.decision != nil && b.decision.Keep(s)
	}
	b.index.Add(b.initDir, b.initIdx, keepDriver)
	b.requested("initramfs")
	b.activate()
}

// firmwareDirs lists where the kernel's firmware loader looks, custom path first.
func (b *Boot) firmwareDirs(custom string) []string {
	var out []string
	if custom != "" {
		out = append(out, custom)
	}
	return append(out, "/lib/firmware/updates/"+b.release, "/lib/firmware/updates", "/lib/firmware/"+b.release, "/lib/firmware")
}
