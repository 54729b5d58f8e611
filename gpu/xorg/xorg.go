// Package xorg writes an xorg.conf for the NVIDIA GPUs of a machine: one Device and
// one Screen per GPU, each Device pinned to its GPU by BusID, as nvidia-xconfig
// --enable-all-gpus would, from sysfs alone.
//
// Which devices: vendor 0x10de with PCI base class 0x03 (display controller), that
// is VGA (0x0300), 3D (0x0302, the datacenter GPUs without outputs) and other
// display (0x0380). The nvidia Xorg driver drives all of them; those that are not
// VGA have no connected outputs, so every Screen allows an empty initial
// configuration (headless X for rendering and compute). NVIDIA's audio and USB
// functions (classes 0x04, 0x0c) are not GPUs and are left out.
package xorg

import (
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/internal/inroot"
)

// VendorNVIDIA is NVIDIA's PCI vendor ID.
const VendorNVIDIA = 0x10de

// GPU is one display-class NVIDIA device.
type GPU struct {
	// Address is the sysfs PCI address, e.g. "0000:41:00.0" (hex).
	Address string `json:"address"`
	// Domain, Bus, Device and Function are its parts as numbers.
	Domain, Bus, Device, Function uint64 `json:"-"`
	// DeviceID is the PCI device ID, e.g. 0x2335.
	DeviceID uint64 `json:"device_id"`
	// Class is the 24-bit PCI class code, e.g. 0x030200.
	Class uint64 `json:"class"`
	// BusID is the Xorg BusID, in decimal: "PCI:65:0:0", or "PCI:193@1:0:1" outside
	// PCI domain 0.
	BusID string `json:"bus_id"`
}

// Find returns the display-class NVIDIA devices under <root>/sys/bus/pci/devices,
// sorted by address. Every path is resolved inside root and every attribute
// read is bounded (inroot.MaxAttr).
//
// root may also be a capture (pci.IsCapture: a pci-sysfs.txt, or a directory
// holding one), read with pci.ReadCapture.
func Find(root string) ([]GPU, error) {
	if f, ok := pci.IsCapture(root); ok {
		devs, err := pci.ReadCapture(f)
		if err != nil {
			return nil, fmt.Errorf("xorg: %w", err)
		}
		return fromDevices(devs)
	}
	dir := "/sys/bus/pci/devices"
	entries, err := inroot.ReadDir(root, dir)
	if err != nil {
		return nil, fmt.Errorf("xorg: PCI devices: %w", err)
	}
	var gpus []GPU
	for _, e := range entries {
		d := path.Join(dir, e.Name())
		vendor, err := readHex(root, path.Join(d, "vendor"))
		if err != nil {
			return nil, err
		}
		if vendor != VendorNVIDIA {
			continue
		}
		class, err := readHex(root, path.Join(d, "class"))
		if err != nil {
			return nil, err
		}
		if class>>16 != 0x03 {
			continue
		}
		devID, err := readHex(root, path.Join(d, "device"))
		if err != nil {
			return nil, err
		}
		g, err := ParseAddress(e.Name())
		if err != nil {
			return nil, fmt.Errorf("xorg: %s: %w", filepath.Join(root, d), err)
		}
		g.DeviceID, g.Class = devID, class
		gpus = append(gpus, g)
	}
	sort.Slice(gpus, func(i, j int) bool { return gpus[i].Address < gpus[j].Address })
	return gpus, nil
}

// fromDevices is Find's choice among devices already read.
func fromDevices(devs []pci.Device) ([]GPU, error) {
	var gpus []GPU
	for _, d := range devs {
		if !d.IsNVIDIAGPU() {
			continue
		}
		g, err := ParseAddress(d.Address)
		if err != nil {
			return nil, fmt.Errorf("xorg: %w", err)
		}
		g.DeviceID, g.Class = uint64(d.Device), uint64(d.Class)
		gpus = append(gpus, g)
	}
	sort.Slice(gpus, func(i, j int) bool { return gpus[i].Address < gpus[j].Address })
	return gpus, nil
}

// ParseAddress parses a PCI address "DDDD:BB:DD.F" (hex) and fills in the BusID.
func ParseAddress(addr string) (GPU, error) {
	g := GPU{Address: addr}
	parts := strings.Split(addr, ":")
	if len(parts) != 3 {
		return g, fmt.Errorf("PCI address %q: want DOMAIN:BUS:DEVICE.FUNCTION", addr)
	}
	dev, fn, ok := strings.Cut(parts[2], ".")
	if !ok {
		return g, fmt.Errorf("PCI address %q: want DOMAIN:BUS:DEVICE.FUNCTION", addr)
	}
	var err error
	for _, f := range []struct {
		s   string
		v   *uint64
		max uint64
	}{{parts[0], &g.Domain, 0xffff}, {parts[1], &g.Bus, 0xff}, {dev, &g.Device, 0x1f}, {fn, &g.Function, 7}} {
		if *f.v, err = strconv.ParseUint(f.s, 16, 32); err != nil || *f.v > f.max {
			return g, fmt.Errorf("PCI address %q: bad field %q", addr, f.s)
		}
	}
	if g.Domain == 0 {
		g.BusID = fmt.Sprintf("PCI:%d:%d:%d", g.Bus, g.Device, g.Function)
	} else {
		g.BusID = fmt.Sprintf("PCI:%d@%d:%d:%d", g.Bus, g.Domain, g.Device, g.Function)
	}
	return g, nil
}

// readHex reads a sysfs hex attribute of the tree at root.
func readHex(root, name string) (uint64, error) {
	b, err := inroot.ReadFile(root, name, inroot.MaxAttr)
	if err != nil {
		return 0, fmt.Errorf("xorg: %w", err)
	}
	s := strings.TrimPrefix(strings.TrimSpace(string(b)), "0x")
	v, err := strconv.ParseUint(s, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("xorg: %s: %q is not hexadecimal", filepath.Join(root, name), strings.TrimSpace(string(b)))
	}
	return v, nil
}

// Config renders the xorg.conf for gpus: a ServerLayout with one Screen per GPU
// side by side, and per GPU a Device (driver nvidia, BusID) and a Screen.
func Config(gpus []GPU) string {
	var b strings.Builder
	b.WriteString("# xorg.conf written by kpreload xorg: one Device and Screen per NVIDIA GPU.\n\n")
	b.WriteString("Section \"ServerLayout\"\n    Identifier     \"Layout0\"\n")
	for i := range gpus {
		if i == 0 {
			fmt.Fprintf(&b, "    Screen      %d  \"Screen%d\" 0 0\n", i, i)
		} else {
			fmt.Fprintf(&b, "    Screen      %d  \"Screen%d\" RightOf \"Screen%d\"\n", i, i, i-1)
		}
	}
	b.WriteString("EndSection\n")
	for i, g := range gpus {
		fmt.Fprintf(&b, "\nSection \"Device\"\n    Identifier     \"Device%d\"\n    Driver         \"nvidia\"\n    VendorName     \"NVIDIA Corporation\"\n", i)
		fmt.Fprintf(&b, "    BusID          %q\n", g.BusID)
		fmt.Fprintf(&b, "    # %s: device 0x%04x, class 0x%06x\n", g.Address, g.DeviceID, g.Class)
		b.WriteString("EndSection\n")
		fmt.Fprintf(&b, "\nSection \"Screen\"\n    Identifier     \"Screen%d\"\n    Device         \"Device%d\"\n", i, i)
		b.WriteString("    Option         \"AllowEmptyInitialConfiguration\" \"True\"\n")
		b.WriteString("EndSection\n")
	}
	return b.String()
}
