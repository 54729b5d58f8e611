package pid1

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/report"
)

// earlyResult is what the early driver loads did while the root was found.
type earlyResult struct {
	modules []report.Module
	// matched are the devices the chosen sets matched, in scan order.
	matched []earlyMatch
}

// earlyMatch is a device and the modules of the chosen sets it matched.
type earlyMatch struct {
	dev   coldplug.Device
	names []string
}

// startEarly takes the driver decision before the first coldplug and starts
// loading the chosen sets in a goroutine, beside the kernel's own modules and
// while the root is found, when that decision cannot change after the root
// mount: the initramfs index is marked complete (the image's root cache holds
// no set this initramfs lacks) and the request comes from the command line,
// fw_cfg (qemu_fw_cfg is loaded first when its device is there), the
// initramfs's copy of the image's instance file, or nowhere (the default).
// It returns the function that waits for those loads and records them.
// Otherwise it returns nil and the decision waits for the root (drivers);
// the report says which.
func (b *Boot) startEarly() (join func()) {
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
	return b.planAndLoad(driverPlan{
		early:         true,
		indexes:       []planIndex{{idx: b.initIdx, dir: b.initDir, from: "initramfs"}},
		files:         []instance.File{fwFile, {Source: instance.SourceImage, Path: b.initramfsPath(instance.InitramfsPath)}},
		beforeRequest: fwCfgLoaded,
	})
}

// loadEarly starts loading ix's chosen sets with a loader of its own (the
// main goroutine's keeps loading the root's storage and filesystem modules
// meanwhile) for the devices they match: the PCI bus scanned for the
// decision when every alias of the chosen sets is a PCI one (the devices a
// driver set matches, PCI GPUs, are there before /init runs), else one whole
// scan, which serves the first coldplug round too. The kpreload.load=
// modules the chosen sets hold load there too, after the devices' drivers:
// the root holds nothing that could change them. join waits for the loads
// and records them.
func (b *Boot) loadEarly(ix planIndex, pciBus []coldplug.Device, pciErr error) (join func()) {
	resolve := b.chosenIndex(ix, true)
	match := b.chosenIndex(ix, false)
	asked := b.takeRequested(match)
	if len(asked) > 0 {
		b.event("initramfs-early: loading %s (kpreload.load)", strings.Join(asked, ", "))
	}
	ld := b.newLoader("initramfs-early")
	ld.FirmwareDirs = b.firmwareDirs("")
	var devs []coldplug.Device
	var scanErr error
	switch bus := scanBus(match); {
	case bus == "": // no aliases: nothing to match
	case bus == "pci":
		devs, scanErr = pciBus, pciErr
	default:
		devs, scanErr = coldplug.Scan(b.o.SysDir)
		if scanErr == nil {
			b.prescan, b.prescanBus = devs, "*"
		}
	}
	out := make(chan earlyResult, 1)
	go func() {
		var res earlyResult
		defer func() {
			if r := recover(); r != nil {
				res.modules = append(res.modules, report.Module{Name: "early-load", Result: "failed", Reason: fmt.Sprintf("early driver load crashed: %v", r)})
			}
			out <- res
		}()
		var want []string
		seen := map[string]bool{}
		if scanErr == nil {
			for _, dev := range devs {
				names, load := matchDevice(match, dev, seen)
				if len(names) > 0 {
					res.matched = append(res.matched, earlyMatch{dev, names})
					want = append(want, load...)
				}
			}
		}
		want = append(want, newNames(asked, seen)...)
		if len(want) > 0 {
			res.modules = ld.Load(resolve, want)
		}
	}()
	return func() {
		res := <-out
		b.record(res.modules, ld.FirmwareDirs)
		for _, m := range res.matched {
			dev := b.device(m.dev)
			dev.Modules = append(dev.Modules, m.names...)
			dev.Decision = "matched (initramfs, early)"
		}
		b.event("early driver loads joined: %d modules", len(res.modules))
	}
}

// finishEarly checks the root agrees with the early decision (warning when
// its cache or instance file says otherwise: regenerate the initramfs) and
// loads the kpreload.load= modules of the initramfs.
func (b *Boot) finishEarly() {
	rootPath := bootindex.Path(filepath.Join(b.o.NewRoot, bootindex.RootCacheDir), b.release)
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
	if root, err := b.readImageFile(); err == nil {
		if copy, cerr := instance.ReadPath(b.initramfsPath(instance.InitramfsPath)); cerr != nil || !bytes.Equal(root, copy) {
			b.warnf("the root's %s differs from the initramfs's copy the early decision used: regenerate the initramfs", instance.ImagePath)
		}
	}
	b.index.Add(b.initDir, b.initIdx, b.keep(false))
	b.requested("initramfs")
}
