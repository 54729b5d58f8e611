package pid1

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/live/coldplug"
)

// driverPlan is one driver decision and the loads it leads to. /init takes
// it once, early (before the root is mounted, when the initramfs index is
// complete: startEarly) or after the root mount (drivers): the two differ
// in when they run, hence in the indexes and request files they can see
// and in whether the loads run beside the root's lookup.
type driverPlan struct {
	// early says the plan runs before the root is mounted: its loads run
	// in a goroutine of their own while the root is found.
	early bool
	// indexes are the boot indexes decided over, in the order their chosen
	// sets load.
	indexes []planIndex
	// files are where the request is read after the kernel command line.
	files []instance.File
	// beforeRequest, when set, runs after the decision's PCI scan and
	// before the request is read (the wait for qemu_fw_cfg's load).
	beforeRequest func()
}

// planIndex is a boot index a plan decides over.
type planIndex struct {
	idx *bootindex.Index
	// dir is the directory of the index file.
	dir string
	// from is "initramfs" or "rootfs": the sets' origin and their loads' phase.
	from string
}

// sets returns the plan's sets for the decision and how many are driver sets.
func (p driverPlan) sets() (sets []selection.Set, drivers int) {
	for _, ix := range p.indexes {
		for i := range ix.idx.Sets {
			s := &ix.idx.Sets[i]
			sets = append(sets, selection.Set{Set: s, Dir: ix.dir, From: ix.from})
			if !selection.IsKernelSet(s) {
				drivers++
			}
		}
	}
	return sets, drivers
}

// planAndLoad reads the request, takes the driver decision over the plan's
// sets (when there are driver sets or a request) and starts loading the
// chosen ones; join waits for the loads and records them. The console (a
// serial port under QEMU) is slow to write to: the decision is printed once
// the loads have started, which for loads that run in join is before them.
func (b *Boot) planAndLoad(p driverPlan) (join func()) {
	sets, driverSets := p.sets()
	// One scan of the PCI bus serves the decision and the first match of
	// the chosen sets (a GPU driver's aliases are PCI ones).
	var bus []coldplug.Device
	var busErr error
	scanned := false
	scan := func() {
		if !scanned {
			bus, busErr = coldplug.ScanBus(b.o.SysDir, "pci")
			scanned = true
		}
	}
	if p.beforeRequest != nil {
		scan() // beside what beforeRequest waits for
		p.beforeRequest()
	}
	req, reqErrs := instance.Find(b.cmd.Flag, p.files)
	for _, e := range reqErrs {
		b.errorf("%v", e)
	}
	var d *selection.Decision
	if p.early || driverSets > 0 || req.Source != instance.SourceDefault {
		scan()
		devs, err := pciDevices(b.o.SysDir, bus, busErr)
		d = b.decideOn(req, reqErrs, sets, devs, err)
		if p.early {
			b.event("driver selection early, before the root (complete initramfs index; request from %s): %s", req.Source, chosenList(d))
		} else {
			b.event("driver selection (request from %s): %s", req.Source, chosenList(d))
		}
	}
	if p.early {
		join = b.loadEarly(p.indexes[0], bus, busErr)
	} else {
		if busErr == nil && scanned {
			b.prescan, b.prescanBus = bus, "pci"
		}
		// The driver sets' declared firmware is checked where the kernel
		// will look for it, the root's /lib/firmware included.
		b.ld.FirmwareDirs = b.firmwareFromRoot()
		join = func() { b.loadAfterRoot(p) }
	}
	if d != nil {
		b.printDecision(d)
		if driverSets == 0 && req.Source != instance.SourceDefault {
			b.warnf("the instance request (%s) asks for a driver, but no driver sets are cached for kernel %s", req.Source, b.release)
		}
	}
	return join
}

// keep returns the filter of the sets that may load: the driver sets the
// decision chose, and the kernel's own sets when kernel is set.
func (b *Boot) keep(kernel bool) func(*bootindex.Set) bool {
	return func(s *bootindex.Set) bool {
		if selection.IsKernelSet(s) {
			return kernel
		}
		return b.decision != nil && b.decision.Keep(s)
	}
}

// chosenIndex returns an index of ix's chosen driver sets (and its kernel
// sets when kernel is set): what a pass matches devices against, or
// resolves dependencies in.
func (b *Boot) chosenIndex(ix planIndex, kernel bool) *coldplug.Index {
	out := coldplug.NewIndex()
	out.Add(ix.dir, ix.idx, b.keep(kernel))
	return out
}

// loadAfterRoot loads the chosen sets of each index in turn: a coldplug pass
// over them (the initramfs's only when a decision was taken), then the
// kpreload.load= modules the index holds.
func (b *Boot) loadAfterRoot(p driverPlan) {
	for _, phase := range []string{"initramfs", "rootfs"} {
		for _, ix := range p.indexes {
			if ix.from != phase || (phase == "initramfs" && b.decision == nil) {
				continue
			}
			b.index.Add(ix.dir, ix.idx, b.keep(false))
			// Match every device again, against the index's chosen sets only.
			key := phase
			if phase == "initramfs" {
				key = "initramfs-drivers"
			}
			b.coldplug(phase, key, b.chosenIndex(ix, false))
			if phase == "rootfs" {
				b.event("root cache: %d sets for %s", len(ix.idx.Sets), b.release)
			}
		}
		b.requested(phase)
	}
}

// decideOn takes the driver decision over sets for the request and the PCI
// devices scanned (err, the scan's error), and records it in the report.
func (b *Boot) decideOn(req instance.Request, reqErrs []error, sets []selection.Set, devs []pci.Device, err error) *selection.Decision {
	if err != nil {
		b.errorf("%v", err)
	}
	// The machine as /init sees it: its own indexes and bus scan, in the
	// one shape kpreload plan, switch and user-data apply gather.
	m := selection.Machine{Kernel: b.release, Vermagic: b.vermagic, Sets: sets, Devices: devs, Signatures: b.sb}
	d := m.Decide(req)
	d.Time = b.o.Now()
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

// chosenList names each driver's chosen version, or its refusal, for an event.
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
