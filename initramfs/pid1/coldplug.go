package pid1

import (
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/report"
)

// coldplug matches every device's modalias against match and loads what
// matches (dependencies are resolved against the whole index), repeating while
// loads create new devices. phase labels the loads; key names the pass (each
// device is matched once per key).
func (b *Boot) coldplug(phase, key string, match *coldplug.Index) {
	b.ld.Phase = phase
	seen := b.seen[key]
	if seen == nil {
		seen = map[string]bool{}
		b.seen[key] = seen
	}
	bus := scanBus(match)
	if bus == "" {
		// No aliases to match, but the pass still records every device once.
		bus = "*"
	}
	// A prescan serves only the pass that follows it: a later one rescans.
	defer func() { b.prescan = nil }()
	for round := 1; round <= 8; round++ {
		var devs []coldplug.Device
		var err error
		if b.prescan != nil && bus == b.prescanBus {
			devs, b.prescan = b.prescan, nil
		} else {
			devs, err = coldplug.ScanNew(b.o.SysDir, bus, seen)
		}
		if err != nil {
			b.errorf("coldplug scan: %v", err)
			return
		}
		var want []string
		fresh := 0
		for _, d := range devs {
			if seen[d.Path] {
				continue
			}
			seen[d.Path] = true
			fresh++
			names, load := matchDevice(match, d, b.attempted)
			dev := b.device(d)
			if len(names) > 0 {
				dev.Modules = append(dev.Modules, names...)
				dev.Decision = "matched (" + phase + ")"
			} else if d.Driver != "" && len(dev.Modules) == 0 {
				dev.Decision = "bound to built-in driver"
			}
			want = append(want, load...)
			if len(names) == 0 || d.Driver != "" {
				// Only a device whose driver loads now has children still to come:
				// a bound one (a built-in virtio_pci) has made them already.
				continue
			}
			for _, child := range childAliases(d.Modalias) {
				if ahead := newNames(match.Match(child), b.attempted); len(ahead) > 0 {
					want = append(want, ahead...)
					b.event("%s will appear below %s: loading %s in the same round", child, filepath.Base(d.Path), strings.Join(ahead, ", "))
				}
			}
		}
		if fresh == 0 {
			break
		}
		b.event("%s coldplug round %d: %d new devices, %d modules to load", key, round, fresh, len(want))
		if len(want) == 0 {
			continue
		}
		b.load(want)
	}
	b.refreshDrivers()
}

// matchDevice returns the modules of match whose aliases match the device,
// and those of them not yet in attempted, which it adds there: the ones to
// load. Every pass of /init, early or after the root, matches through it.
func matchDevice(match *coldplug.Index, d coldplug.Device, attempted map[string]bool) (names, load []string) {
	names = match.Match(d.Modalias)
	return names, newNames(names, attempted)
}

// newNames returns the names not yet in attempted, adding them there.
func newNames(names []string, attempted map[string]bool) []string {
	var out []string
	for _, n := range names {
		if !attempted[n] {
			attempted[n] = true
			out = append(out, n)
		}
	}
	return out
}

// device returns the report's entry for d, adding one ("no module matches"
// yet) the first time d is seen.
func (b *Boot) device(d coldplug.Device) *report.Device {
	key := d.Path + "\x00" + d.Modalias
	i, ok := b.devIndex[key]
	if !ok {
		b.rep.Devices = append(b.rep.Devices, report.Device{Path: d.Path, Modalias: d.Modalias, Driver: d.Driver, Decision: "no module matches"})
		i = len(b.rep.Devices) - 1
		b.devIndex[key] = i
	}
	return &b.rep.Devices[i]
}

// scanBus returns the bus a coldplug pass needs to scan for match: "pci" when
// every alias in it is a PCI one (as a GPU driver set's are), "" when it has no
// aliases, else "*" (every bus). A device on another bus cannot match, so it is
// not read: under emulation a whole scan costs tens of milliseconds.
func scanBus(match *coldplug.Index) string {
	switch kinds := match.AliasKinds(); {
	case len(kinds) == 0:
		return ""
	case len(kinds) == 1 && kinds[0] == "pci":
		return "pci"
	}
	return "*"
}

// load loads modules (resolving dependencies against the whole index) and records them.
func (b *Boot) load(names []string) {
	b.record(b.ld.Load(b.index, names), b.ld.FirmwareDirs)
}

// record adds what a load did to the report: the modules, their missing
// firmware (looked for in fwDirs) and the time the last one was ready.
func (b *Boot) record(mods []report.Module, fwDirs []string) {
	b.rep.Modules = append(b.rep.Modules, mods...)
	for _, m := range mods {
		b.attempted[m.Name] = true
		for _, fw := range m.MissingFirmware {
			b.warnf("%s declares firmware %s, which is in none of %s: its init may fail", m.Name, fw, strings.Join(fwDirs, ", "))
		}
		if m.End > b.rep.DriversReady {
			b.rep.DriversReady = m.End
		}
	}
}

// requested loads the modules named by kpreload.load= (comma-separated) that
// the index holds and that were not loaded yet, even when no device asks for
// them: a driver whose hardware is absent still gets its init run (NVIDIA's
// module then fails with ENODEV, which proves it links against this kernel).
// Names the index does not know yet are tried again in the next phase.
func (b *Boot) requested(phase string) {
	want := b.takeRequested(b.index)
	if len(want) == 0 {
		if phase == "rootfs" {
			for _, n := range b.loadFlag() {
				if !b.attempted[n] {
					b.warnf("kpreload.load: module %s is in no cached set for %s", n, b.release)
				}
			}
		}
		return
	}
	b.ld.Phase = phase
	b.event("%s: loading %s (kpreload.load)", phase, strings.Join(want, ", "))
	b.load(want)
}

// loadFlag returns the module names kpreload.load= gives (comma-separated),
// normalized, in order.
func (b *Boot) loadFlag() []string {
	var out []string
	for _, n := range strings.Split(b.flag("kpreload.load", ""), ",") {
		if n = modname.Normalize(strings.TrimSpace(n)); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// takeRequested returns the kpreload.load= modules ix holds that were not
// given to a loader yet, and marks them given: requested's for its phase,
// and the early loads' (loadEarly), whose decision is final before the root
// is there, so a driver asked for without its device loads beside the
// devices' drivers rather than after the root mount.
func (b *Boot) takeRequested(ix *coldplug.Index) []string {
	var want []string
	for _, n := range b.loadFlag() {
		if b.attempted[n] || len(ix.ByName(n)) == 0 {
			continue
		}
		b.attempted[n] = true
		want = append(want, n)
	}
	return want
}

// refreshDrivers records which driver each device ended up bound to.
func (b *Boot) refreshDrivers() {
	for i := range b.rep.Devices {
		if d := coldplug.BoundDriver(b.rep.Devices[i].Path); d != "" {
			b.rep.Devices[i].Driver = d
		}
	}
}
