// Package coldplug finds the devices the kernel has already created (every
// /sys/bus/*/devices/*/modalias) and matches them to modules of a boot index,
// the way udev's coldplug and modprobe would, without either.
package coldplug

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/modalias"
	"github.com/kpreload/kpreload/kmodcache/modname"
)

// Device is a device seen in sysfs with its modalias.
type Device struct {
	// Path is the device's sysfs path under the bus, e.g. /sys/bus/pci/devices/0000:00:04.0.
	Path     string
	Modalias string
	// Driver is the name of the bound driver, or "" when none is bound.
	Driver string
}

// Scan reads every /sys/bus/*/devices/*/modalias under sysRoot (usually "/sys") and
// returns the devices sorted by path. Unreadable entries are skipped: a device that
// vanishes during the scan is not an error.
func Scan(sysRoot string) ([]Device, error) { return ScanBus(sysRoot, "*") }

// ScanBus is Scan limited to one bus (sysRoot/bus/<bus>/devices/*/modalias), or to
// every bus when bus is "*". Reading a modalias costs a few system calls, which
// add up under emulation: a QEMU guest has dozens of ACPI devices and a handful
// of PCI ones, and a GPU driver only ever matches the latter.
func ScanBus(sysRoot, bus string) ([]Device, error) { return ScanNew(sysRoot, bus, nil) }

// ScanNew is ScanBus without the devices whose sysfs path (Device.Path) known
// holds: a device's modalias does not change while it exists, so a rescan after
// a round of loads reads only the devices those loads created.
func ScanNew(sysRoot, bus string, known map[string]bool) ([]Device, error) {
	buses := []string{bus}
	if bus == "*" {
		ents, err := os.ReadDir(filepath.Join(sysRoot, "bus"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("coldplug scan %s: %w", sysRoot, err)
		}
		buses = buses[:0]
		for _, e := range ents {
			buses = append(buses, e.Name())
		}
	}
	var devs []Device
	for _, b := range buses {
		dir := filepath.Join(sysRoot, "bus", b, "devices")
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue // a bus without devices, or one that went away
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if known[p] {
				continue
			}
			raw, err := os.ReadFile(filepath.Join(p, "modalias"))
			if err != nil {
				continue // no modalias, or the device vanished during the scan
			}
			alias := strings.TrimSpace(string(raw))
			if alias == "" {
				continue
			}
			devs = append(devs, Device{Path: p, Modalias: alias, Driver: BoundDriver(p)})
		}
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Path < devs[j].Path })
	return devs, nil
}

// BoundDriver returns the name of the driver bound to the device at sysfs path dir, or "".
func BoundDriver(dir string) string {
	target, err := os.Readlink(filepath.Join(dir, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// Candidate is a module of a boot index set that can satisfy a device or a dependency.
type Candidate struct {
	Set    *bootindex.Set
	Module *bootindex.Module
	// File is the absolute path of the module file.
	File string
}

// Matches reports whether one of the candidate module's alias patterns matches the modalias.
func (c Candidate) Matches(alias string) bool {
	for _, pat := range c.Module.Aliases {
		if modalias.Match(pat, alias) {
			return true
		}
	}
	return false
}

// Index is one or more boot index sets prepared for matching.
type Index struct {
	byName map[string][]Candidate
	all    []Candidate
}

// NewIndex returns an empty Index; Add fills it. Sets added later are considered
// after earlier ones.
func NewIndex() *Index { return &Index{byName: map[string][]Candidate{}} }

// Add adds the sets of one boot index read from directory dir (against which each
// set's Dir is resolved), keeping only sets that keep returns true for (nil keeps all).
func (ix *Index) Add(dir string, idx *bootindex.Index, keep func(*bootindex.Set) bool) {
	for si := range idx.Sets {
		s := &idx.Sets[si]
		if keep != nil && !keep(s) {
			continue
		}
		for mi := range s.Modules {
			m := &s.Modules[mi]
			c := Candidate{Set: s, Module: m, File: filepath.Join(dir, s.Dir, m.Path)}
			ix.all = append(ix.all, c)
			name := modname.Normalize(m.Name)
			ix.byName[name] = append(ix.byName[name], c)
		}
	}
}

// ByName returns every candidate module with that name (normalised the kmod way), in index order.
func (ix *Index) ByName(name string) []Candidate {
	return ix.byName[modname.Normalize(name)]
}

// Match returns the names of the modules whose alias patterns match the modalias,
// deduplicated, in index order.
func (ix *Index) Match(alias string) []string {
	var names []string
	seen := map[string]bool{}
	for _, c := range ix.all {
		if seen[c.Module.Name] {
			continue
		}
		if c.Matches(alias) {
			seen[c.Module.Name] = true
			names = append(names, c.Module.Name)
		}
	}
	return names
}

// Lookup returns the modules a modprobe argument (a soft dependency, a module
// the kernel requests) names, as kmod finds them: the module of that name when
// the index has one, else every module with an alias pattern matching it, both
// normalised the kmod way ('-' read as '_'), deduplicated, in index order.
// "crypto-crc32c" finds crc32c_generic and crc32c_intel.
func (ix *Index) Lookup(arg string) []string {
	if name := modname.Normalize(arg); len(ix.byName[name]) > 0 {
		return []string{name}
	}
	key, ok := modalias.NormalizeAlias(arg)
	if !ok || key == "" {
		return nil
	}
	var names []string
	seen := map[string]bool{}
	for _, c := range ix.all {
		name := modname.Normalize(c.Module.Name)
		if seen[name] {
			continue
		}
		for _, pat := range c.Module.Aliases {
			if p, ok := modalias.NormalizeAlias(pat); ok && modalias.Match(p, key) {
				seen[name] = true
				names = append(names, name)
				break
			}
		}
	}
	return names
}

// AliasKinds returns the distinct kinds of the index's alias patterns (the part
// before the first ':', such as "pci" or "acpi"), sorted; a pattern without a
// ':' counts as "*", since it may match any device.
func (ix *Index) AliasKinds() []string {
	seen := map[string]bool{}
	for _, c := range ix.all {
		for _, pat := range c.Module.Aliases {
			kind, _, ok := strings.Cut(pat, ":")
			if !ok {
				kind = "*"
			}
			seen[kind] = true
		}
	}
	kinds := make([]string, 0, len(seen))
	for k := range seen {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}
