// Package pci reads the PCI devices the kernel has found from a sysfs tree
// (vendor, device, subsystem ids, class, address, bound driver), for GPU
// selection at boot and for `kpreload plan` on any host or on a tree built
// from a fixture.
package pci

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
)

// VendorNVIDIA is NVIDIA's PCI vendor id.
const VendorNVIDIA = 0x10de

// Device is one PCI function as sysfs shows it.
type Device struct {
	// Address is the bus/device/function, e.g. 0000:00:06.0.
	Address   string `json:"address"`
	Vendor    uint16 `json:"vendor"`
	Device    uint16 `json:"device"`
	SubVendor uint16 `json:"subsystem_vendor"`
	SubDevice uint16 `json:"subsystem_device"`
	// Class is the 24-bit class code (base class, subclass, programming interface).
	Class uint32 `json:"class"`
	// Driver is the bound driver's name, or "".
	Driver string `json:"driver,omitempty"`
}

// ID is "vvvv:dddd" in lower-case hex.
func (d Device) ID() string { return fmt.Sprintf("%04x:%04x", d.Vendor, d.Device) }

// SubsystemID is the subsystem "vvvv:dddd" in lower-case hex.
func (d Device) SubsystemID() string { return fmt.Sprintf("%04x:%04x", d.SubVendor, d.SubDevice) }

// IsDisplay reports whether the device's base class is 0x03 (VGA, XGA, 3D or other display controller).
func (d Device) IsDisplay() bool { return d.Class>>16 == 0x03 }

// IsNVIDIAGPU reports whether the device is an NVIDIA display or 3D controller,
// the devices whose support a driver's supported-gpus.json must confirm.
func (d Device) IsNVIDIAGPU() bool { return d.Vendor == VendorNVIDIA && d.IsDisplay() }

// String names the device for messages: "0000:00:06.0 10de:2335 (subsystem 10de:18bf)".
func (d Device) String() string {
	return fmt.Sprintf("%s %s (subsystem %s)", d.Address, d.ID(), d.SubsystemID())
}

// DevicesDir returns the directory holding the PCI devices of a sysfs tree:
// root may be the sysfs mount itself ("/sys") or a filesystem root holding sys/
// ("/", or a tree built from a fixture).
func DevicesDir(root string) string {
	if st, err := os.Stat(filepath.Join(root, "bus", "pci")); err == nil && st.IsDir() {
		return filepath.Join(root, "bus", "pci", "devices")
	}
	return filepath.Join(root, "sys", "bus", "pci", "devices")
}

// DevicesDirIn is DevicesDir as a path inside root ("/bus/pci/devices" or
// "/sys/bus/pci/devices"), resolved inside root.
func DevicesDirIn(root string) string {
	if st, err := inroot.Stat(root, "/bus/pci"); err == nil && st.IsDir() {
		return "/bus/pci/devices"
	}
	return "/sys/bus/pci/devices"
}

// Scan reads every PCI device under root (see DevicesDir), sorted by address. A
// machine without PCI (no devices directory) has no devices and no error; a
// device whose ids cannot be read is an error naming the file.
func Scan(root string) ([]Device, error) {
	return scan(hostFiles, DevicesDir(root))
}

// ScanIn is Scan with every path resolved inside root (links and ".." never
// lead out of it) and every file read bounded (inroot.MaxAttr): for trees a
// command is given (--sysfs), which may hold anything.
func ScanIn(root string) ([]Device, error) {
	return scan(rootFiles(root), DevicesDirIn(root))
}

// files is how devices are read: from the host, or inside a root.
type files struct {
	readDir  func(dir string) ([]fs.DirEntry, error)
	readFile func(name string) ([]byte, error)
	readlink func(name string) (string, error)
	// name is the file's name for errors.
	name func(name string) string
}

var hostFiles = files{readDir: os.ReadDir, readFile: os.ReadFile, readlink: os.Readlink, name: func(n string) string { return n }}

func rootFiles(root string) files {
	return files{
		readDir:  func(d string) ([]fs.DirEntry, error) { return inroot.ReadDir(root, d) },
		readFile: func(n string) ([]byte, error) { return inroot.ReadFile(root, n, inroot.MaxAttr) },
		readlink: func(n string) (string, error) { return inroot.Readlink(root, n) },
		name:     func(n string) string { return filepath.Join(root, n) },
	}
}

func scan(fsys files, dir string) ([]Device, error) {
	ents, err := fsys.readDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pci: %w", err)
	}
	var devs []Device
	for _, e := range ents {
		d, err := read(fsys, filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Address < devs[j].Address })
	return devs, nil
}

// Read reads one device's sysfs directory. The ids come from its modalias when
// it has one (one file holds them all: a sysfs read costs several system calls,
// which add up at boot under emulation), else from the vendor, device,
// subsystem and class files.
func Read(dir string) (Device, error) {
	return read(hostFiles, dir)
}

func read(fsys files, dir string) (Device, error) {
	d := Device{Address: filepath.Base(dir)}
	b, err := fsys.readFile(filepath.Join(dir, "modalias"))
	if ids, perr := ParseModalias(strings.TrimSpace(string(b))); err == nil && perr == nil {
		ids.Address = d.Address
		d = ids
	} else if err := d.readIDFiles(fsys, dir); err != nil {
		return d, err
	}
	if target, err := fsys.readlink(filepath.Join(dir, "driver")); err == nil {
		d.Driver = filepath.Base(target)
	}
	return d, nil
}

// idFiles are the files readIDFiles reads, in its order.
var idFiles = []string{"vendor", "device", "subsystem_vendor", "subsystem_device", "class"}

// readIDFiles sets d's ids from the vendor, device, subsystem and class files.
func (d *Device) readIDFiles(fsys files, dir string) error {
	for _, f := range []struct {
		name string
		bits int
		set  func(uint64)
	}{
		{idFiles[0], 16, func(v uint64) { d.Vendor = uint16(v) }},
		{idFiles[1], 16, func(v uint64) { d.Device = uint16(v) }},
		{idFiles[2], 16, func(v uint64) { d.SubVendor = uint16(v) }},
		{idFiles[3], 16, func(v uint64) { d.SubDevice = uint16(v) }},
		{idFiles[4], 24, func(v uint64) { d.Class = uint32(v) }},
	} {
		p := filepath.Join(dir, f.name)
		b, err := fsys.readFile(p)
		if err != nil {
			return fmt.Errorf("pci: %w", err)
		}
		v, err := ParseHex(strings.TrimSpace(string(b)), f.bits)
		if err != nil {
			return fmt.Errorf("pci: %s: %w", fsys.name(p), err)
		}
		f.set(v)
	}
	return nil
}

// ParseModalias parses the ids out of a PCI device's modalias as the kernel
// writes it (drivers/pci/pci-sysfs.c):
// pci:v<vendor>d<device>sv<subvendor>sd<subdevice>bc<base>sc<sub>i<prog-if>, the
// ids as 8 and the class bytes as 2 upper-case hex digits. The Address is left empty.
func ParseModalias(alias string) (Device, error) {
	var d Device
	rest, ok := strings.CutPrefix(alias, "pci:")
	if !ok {
		return d, fmt.Errorf("pci: modalias %q: not a PCI modalias", alias)
	}
	var class uint32
	for _, f := range []struct {
		tag    string
		digits int
		max    uint64
		set    func(uint64)
	}{
		{"v", 8, 0xffff, func(v uint64) { d.Vendor = uint16(v) }},
		{"d", 8, 0xffff, func(v uint64) { d.Device = uint16(v) }},
		{"sv", 8, 0xffff, func(v uint64) { d.SubVendor = uint16(v) }},
		{"sd", 8, 0xffff, func(v uint64) { d.SubDevice = uint16(v) }},
		{"bc", 2, 0xff, func(v uint64) { class |= uint32(v) << 16 }},
		{"sc", 2, 0xff, func(v uint64) { class |= uint32(v) << 8 }},
		{"i", 2, 0xff, func(v uint64) { class |= uint32(v) }},
	} {
		field, ok := strings.CutPrefix(rest, f.tag)
		if !ok || len(field) < f.digits {
			return d, fmt.Errorf("pci: modalias %q: no %s field of %d hex digits", alias, f.tag, f.digits)
		}
		v, err := strconv.ParseUint(field[:f.digits], 16, 64)
		if err != nil || v > f.max {
			return d, fmt.Errorf("pci: modalias %q: bad %s field %q", alias, f.tag, field[:f.digits])
		}
		f.set(v)
		rest = field[f.digits:]
	}
	if rest != "" {
		return d, fmt.Errorf("pci: modalias %q: trailing %q", alias, rest)
	}
	d.Class = class
	return d, nil
}

// ParseHex parses a sysfs hex id such as "0x10de" (the 0x is optional) that
// must fit in bits bits.
func ParseHex(s string, bits int) (uint64, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	v, err := strconv.ParseUint(t, 16, bits)
	if err != nil || t == "" {
		return 0, fmt.Errorf("%q is not a %d-bit hex number", s, bits)
	}
	return v, nil
}
