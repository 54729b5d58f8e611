package pci

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// CaptureFile is the name of a capture in a capture directory (such as
// testdata/h200-gpu-vm at the repository's root).
const CaptureFile = "pci-sysfs.txt"

// Bounds of a capture: a machine has at most a few thousand PCI functions of
// a few attributes each; an attribute is at most a page.
const (
	// MaxCaptureBytes bounds a capture file.
	MaxCaptureBytes = 4 << 20
	// MaxCaptureLine bounds one line of a capture.
	MaxCaptureLine = 4 << 10
)

// captureFiles are the attributes a capture may hold: true for those a
// Device is made of (ids, class, bound driver), false for those a capture
// records that no decision reads.
var captureFiles = map[string]bool{
	"vendor": true, "device": true, "subsystem_vendor": true, "subsystem_device": true,
	"class": true, "modalias": true, "driver": true, "revision": false, "numa_node": false,
}

// IsCapture reports whether path names a capture rather than a sysfs tree: a
// regular file, or a directory holding CaptureFile and neither sys/ nor
// bus/ (a capture directory such as testdata/h200-gpu-vm). It returns the
// capture file's path.
func IsCapture(path string) (string, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", false
	}
	if fi.Mode().IsRegular() {
		return path, true
	}
	if !fi.IsDir() {
		return "", false
	}
	for _, d := range []string{"sys", "bus"} {
		if _, err := os.Stat(filepath.Join(path, d)); err == nil {
			return "", false
		}
	}
	f := filepath.Join(path, CaptureFile)
	if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() {
		return f, true
	}
	return "", false
}

// ReadCapture reads the PCI devices of a capture file: one line per sysfs
// file, "<pci address> <file> <contents>", as testdata/h200-gpu-vm/README.md
// at the repository's root describes ("<address> driver <name>" where a
// driver is bound). The ids come from each device's modalias when it has one,
// else from its vendor, device, subsystem and class lines, as Scan takes them
// from sysfs. The file is read bounded (MaxCaptureBytes, MaxCaptureLine); a
// malformed line, an unknown attribute, a repeated one or a device without
// ids is an error naming the file and line.
func ReadCapture(path string) ([]Device, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pci capture: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("pci capture: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("pci capture %s: not a regular file", path)
	}
	return ParseCapture(f, path)
}

// ParseCapture is ReadCapture of a capture read from r; name names it in errors.
func ParseCapture(r io.Reader, name string) ([]Device, error) {
	lr := &io.LimitedReader{R: r, N: MaxCaptureBytes + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 512), MaxCaptureLine)
	attrs := map[string]map[string]string{} // address -> file -> contents
	first := map[string]int{}               // address -> its first line, for errors
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if strings.TrimSpace(text) == "" {
			continue
		}
		bad := func(why string) error {
			return fmt.Errorf("pci capture %s:%d: %s (want \"<pci address> <file> <contents>\"): %q", name, line, why, text)
		}
		fields := strings.SplitN(text, " ", 3)
		if len(fields) != 3 || fields[2] == "" {
			return nil, bad("fewer than three fields")
		}
		addr, file, contents := fields[0], fields[1], strings.TrimSpace(fields[2])
		if err := checkAddress(addr); err != nil {
			return nil, bad(err.Error())
		}
		if _, ok := captureFiles[file]; !ok {
			return nil, bad(fmt.Sprintf("unknown file %q (known: %s)", file, knownCaptureFiles()))
		}
		if attrs[addr] == nil {
			attrs[addr], first[addr] = map[string]string{}, line
		}
		if _, dup := attrs[addr][file]; dup {
			return nil, bad(fmt.Sprintf("%s %s given twice", addr, file))
		}
		attrs[addr][file] = contents
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("pci capture %s:%d: a line over %d bytes", name, line+1, MaxCaptureLine)
		}
		return nil, fmt.Errorf("pci capture %s: %w", name, err)
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("pci capture %s: over %d bytes", name, MaxCaptureBytes)
	}
	if len(attrs) == 0 {
		return nil, fmt.Errorf("pci capture %s: no devices", name)
	}
	devs := make([]Device, 0, len(attrs))
	for addr, a := range attrs {
		d, err := captureDevice(addr, a)
		if err != nil {
			return nil, fmt.Errorf("pci capture %s:%d: device %s: %w", name, first[addr], addr, err)
		}
		devs = append(devs, d)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Address < devs[j].Address })
	return devs, nil
}

// captureDevice reads one device's captured attributes with read, the one
// reader of a device's sysfs directory, over files that serve them, after
// the checks a capture gets on top: a modalias that does not parse and a
// driver that is no name are errors, not a fallback.
func captureDevice(addr string, a map[string]string) (Device, error) {
	if alias, ok := a["modalias"]; ok {
		if _, err := ParseModalias(alias); err != nil {
			return Device{Address: addr}, err
		}
	}
	if drv, ok := a["driver"]; ok && (drv == "" || strings.ContainsAny(drv, "/ \t")) {
		return Device{Address: addr}, fmt.Errorf("driver %q is not a driver name", drv)
	}
	attr := func(name string) (string, error) {
		dir, file := filepath.Split(name)
		if v, ok := a[file]; ok && filepath.Clean(dir) == addr {
			return v, nil
		}
		return "", fs.ErrNotExist
	}
	d, err := read(files{
		readFile: func(name string) ([]byte, error) { v, err := attr(name); return []byte(v), err },
		readlink: attr,
		name:     func(name string) string { return "the captured " + filepath.Base(name) },
	}, addr)
	if errors.Is(err, fs.ErrNotExist) {
		for _, f := range idFiles {
			if _, ok := a[f]; !ok {
				return d, fmt.Errorf("no modalias and no %s", f)
			}
		}
	}
	return d, err
}

// checkAddress accepts a PCI address as sysfs names it: DDDD:BB:DD.F in hex.
func checkAddress(addr string) error {
	const form = "0000:00:00.0"
	if len(addr) != len(form) {
		return fmt.Errorf("address %q is not DOMAIN:BUS:DEVICE.FUNCTION", addr)
	}
	for i := range len(form) {
		c := addr[i]
		switch form[i] {
		case ':', '.':
			if c != form[i] {
				return fmt.Errorf("address %q is not DOMAIN:BUS:DEVICE.FUNCTION", addr)
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", rune(c)) {
				return fmt.Errorf("address %q is not DOMAIN:BUS:DEVICE.FUNCTION", addr)
			}
		}
	}
	return nil
}

func knownCaptureFiles() string {
	names := make([]string, 0, len(captureFiles))
	for n := range captureFiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// ScanAny reads the PCI devices of what a command was given as its sysfs:
// a capture (see IsCapture; ReadCapture) or a sysfs tree (ScanIn). capture
// says which it was.
func ScanAny(path string) (devs []Device, capture bool, err error) {
	if f, ok := IsCapture(path); ok {
		devs, err := ReadCapture(f)
		return devs, true, err
	}
	devs, err = ScanIn(path)
	return devs, false, err
}
