package pid1

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/devnodes"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/live/report"
)

// requestFiles are the places, after the kernel command line, where an instance
// request can be: QEMU fw_cfg (qemu_fw_cfg was loaded by the first coldplug,
// through its ACPI modalias QEMU0002), a cloud-init seed disk's user-data,
// then the file baked into the image.
func (b *Boot) requestFiles() []instance.File {
	return []instance.File{
		{Source: instance.SourceFwCfg, Path: instance.FwCfgPath},
		b.seedFile(),
		{Source: instance.SourceImage, Path: filepath.Join(NewRoot, instance.ImagePath)},
	}
}

// requestFilesRead is requestFiles with fw_cfg's item as read through its
// I/O ports before the first coldplug, when it was (fwCfgBeforeRoot).
func (b *Boot) requestFilesRead() []instance.File {
	files := b.requestFiles()
	if b.fwFile != nil {
		files[0] = *b.fwFile
	}
	return files
}

// drivers chooses, then loads, the driver sets of the initramfs and of the root
// filesystem's cache. It runs once root is mounted: the root's cache may hold
// versions the initramfs lacks and /etc/kpreload/instance.yaml is only readable
// then, so one decision over every cached set (rather than an early one over the
// initramfs alone that the root could contradict) is the one that holds. Only
// the chosen set of each driver is given to coldplug and the loader: other
// versions of the same driver never load. When the decision was taken early
// (an initramfs index marked complete, see startEarly), drivers collects what
// was loaded meanwhile instead.
func (b *Boot) drivers(early <-chan earlyResult) {
	if early != nil {
		b.finishEarly(<-early)
		return
	}
	rootPath := bootindex.Path(filepath.Join(NewRoot, bootindex.RootCacheDir), b.release)
	rootIdx, err := bootindex.Read(rootPath)
	if err != nil {
		rootIdx = nil
		if errors.Is(err, fs.ErrNotExist) {
			b.event("no module cache on root for %s", b.release)
		} else {
			b.errorf("%v", err)
		}
	}
	rootDir := filepath.Dir(rootPath)

	var sets []selection.Set
	if b.initIdx != nil {
		for i := range b.initIdx.Sets {
			sets = append(sets, selection.Set{Set: &b.initIdx.Sets[i], Dir: b.initDir, From: "initramfs"})
		}
	}
	if rootIdx != nil {
		for i := range rootIdx.Sets {
			sets = append(sets, selection.Set{Set: &rootIdx.Sets[i], Dir: rootDir, From: "rootfs"})
		}
	}
	driverSets := 0
	for _, s := range sets {
		if !selection.IsKernelSet(s.Set) {
			driverSets++
		}
	}

	req, reqErrs := instance.Find(b.cmd.Flag, b.requestFilesRead())
	for _, e := range reqErrs {
		b.errorf("%v", e)
	}
	if driverSets > 0 || req.Source != instance.SourceDefault {
		d := b.decide(req, reqErrs, sets)
		b.printDecision(d)
		if driverSets == 0 {
			b.warnf("the instance request (%s) asks for a driver, but no driver sets are cached for kernel %s", req.Source, b.release)
		}
		b.event("driver selection (request from %s): %s", req.Source, chosenList(d))
	}

	// The driver sets' declared firmware is checked where the kernel will
	// look for it, the root's /lib/firmware included (firmwareFromRoot).
	b.ld.FirmwareDirs = b.firmwareFromRoot()

	keepDriver := func(s *bootindex.Set) bool {
		return !selection.IsKernelSet(s) && b.decision != nil && b.decision.Keep(s)
	}
	if b.initIdx != nil && b.decision != nil {
		b.index.Add(b.initDir, b.initIdx, keepDriver)
		match := coldplug.NewIndex()
		match.Add(b.initDir, b.initIdx, keepDriver)
		b.coldplug("initramfs", "initramfs-drivers", match)
	}
	b.requested("initramfs")
	if rootIdx != nil {
		b.index.Add(rootDir, rootIdx, keepDriver)
		// Match every device again, against the root cache's chosen sets only.
		match := coldplug.NewIndex()
		match.Add(rootDir, rootIdx, keepDriver)
		b.coldplug("rootfs", "rootfs", match)
		b.event("root cache: %d sets for %s", len(rootIdx.Sets), b.release)
	}
	b.requested("rootfs")
	b.activate()
}

// decide takes the driver decision over sets for the request and records it
// in the report. Its scan of the PCI bus also serves the first round of the
// driver sets' coldplug, which follows at once and, their aliases being PCI
// ones (as a GPU driver's are), scans only that bus.
func (b *Boot) decide(req instance.Request, reqErrs []error, sets []selection.Set) *selection.Decision {
	bus, busErr := coldplug.ScanBus("/sys", "pci")
	devs, err := pciDevices("/sys", bus, busErr)
	if busErr == nil {
		b.prescan, b.prescanBus = bus, "pci"
	}
	return b.decideOn(req, reqErrs, sets, devs, err)
}

// decideOn is decide over PCI devices already scanned (err, the scan's error).
func (b *Boot) decideOn(req instance.Request, reqErrs []error, sets []selection.Set, devs []pci.Device, err error) *selection.Decision {
	if err != nil {
		b.errorf("%v", err)
	}
	d := selection.Decide(selection.Input{Kernel: b.release, Vermagic: b.ld.Vermagic, Request: req, Sets: sets, Devices: devs, Signatures: &b.sb})
	d.Time = Now()
	for _, e := range reqErrs {
		d.Errors = append(d.Errors, e.Error())
	}
	b.decision = d
	b.rep.Selection = &d.Selection
	return d
}

// printDecision writes the decision's lines to the console.
func (b *Boot) printDecision(d *selection.Decision) {
	for _, l := range d.Lines() {
		fmt.Fprintln(b.console, l)
	}
}

func chosenList(d *selection.Decision) string {
	var parts []string
	for _, dd := range d.Drivers {
		if dd.Chosen != nil {
			parts = append(parts, dd.Driver+" "+dd.Chosen.Version)
		} else {
			parts = append(parts, dd.Driver+" refused")
		}
	}
	if len(parts) == 0 {
		return "no driver sets"
	}
	return strings.Join(parts, ", ")
}

// activate publishes the driver that loaded: device nodes for NVIDIA, the
// /run/kpreload/driver link to its userspace and the /run/kpreload/ready record.
// One driver is active: the requested GPU driver when it loaded, else the first
// requested one that did, else any chosen one that did.
func (b *Boot) activate() {
	d := b.decision
	if d == nil {
		return
	}
	loaded := map[string][]string{}
	for _, m := range b.rep.Modules {
		if m.Result == "loaded" && m.Set != "" {
			loaded[m.Set] = append(loaded[m.Set], m.Name)
		}
	}
	var active *report.SelectionDriver
	rank := func(dd *report.SelectionDriver) int {
		switch {
		case dd.Requested && selection.IsNVIDIA(dd.Driver):
			return 0
		case dd.Requested:
			return 1
		}
		return 2
	}
	for i := range d.Drivers {
		dd := &d.Drivers[i]
		if dd.Chosen == nil || len(loaded[dd.Chosen.ID]) == 0 {
			continue
		}
		dd.Loaded = true
		if active == nil || rank(dd) < rank(active) {
			active = dd
		}
	}
	if active == nil {
		b.event("no chosen driver set loaded a module: no driver activated")
		return
	}
	c := active.Chosen
	ready, marked, problems := activate.Publish(activate.Publication{
		Ready: activate.Ready{Driver: active.Driver, Version: c.Version, Flavor: c.Flavor, Set: c.ID, Kernel: b.release,
			Modules: loaded[c.ID], By: "init", Time: Now()},
		RunDir: activate.RunDir, Root: NewRoot, DriversDir: activate.DriversDir,
		PlanNodes: func() ([]devnodes.Node, error) { return devnodes.Plan("/proc", "/dev") },
	})
	for _, err := range problems {
		if errors.Is(err, activate.ErrNoUserspace) && !selection.IsNVIDIA(active.Driver) {
			b.event("%s %s: no userspace in the image (%s/%s): %s not made", active.Driver, c.Version, activate.DriversDir, c.Version, activate.LinkPath(activate.RunDir))
			continue
		}
		b.warnf("%s %s: %v", active.Driver, c.Version, err)
	}
	active.DeviceNodes, active.Userspace = ready.DeviceNodes, ready.Userspace
	if !marked {
		return
	}
	active.Active = true
	b.event("%s %s active: %s written", active.Driver, c.Version, activate.ReadyPath(activate.RunDir))
}
