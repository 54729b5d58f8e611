package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/kpreload/kpreload/internal/mountinfo"
	"github.com/kpreload/kpreload/report"
	"golang.org/x/sys/unix"
)

// maxKmsgLines caps how many kernel log lines of interest the record carries.
const maxKmsgLines = 1000

// maxKmsgRecords caps how many /dev/kmsg records are read, so reading always ends.
const maxKmsgRecords = 200000

// sysRoot is the directory /proc, /sys, /run and /dev are looked up under ("/" when
// running for real, a prepared tree in tests).
type sysRoot struct{ dir string }

// path joins p (absolute, e.g. "/proc/uptime") onto the root.
func (s sysRoot) path(p string) string { return filepath.Join(s.dir, p) }

// collect gathers the whole record; earlier errors (from mounting) are carried in.
func collect(s sysRoot, errs []string) *report.RootInit {
	rec := &report.RootInit{Format: report.RootInitFormat, PID: os.Getpid(), Errors: errs}
	fail := func(what string, err error) { rec.Errors = append(rec.Errors, what+": "+err.Error()) }

	var err error
	if rec.Start, err = readUptime(s.path("/proc/uptime")); err != nil {
		fail("uptime", err)
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		fail("uname", err)
	} else {
		rec.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	if b, err := os.ReadFile(s.path("/proc/cmdline")); err != nil {
		fail("cmdline", err)
	} else {
		rec.Cmdline = strings.TrimSpace(string(b))
	}
	if rec.Root, err = rootMount(s.path("/proc/mounts")); err != nil {
		fail("root mount", err)
	}
	rec.Root.BlockDevice = blockDevice(s.dir, s.path("/sys/dev/block"))
	if b, err := os.ReadFile(s.path(report.Path)); err == nil {
		if json.Valid(b) {
			rec.Report = json.RawMessage(bytes.TrimSpace(b))
		} else {
			fail("report", fmt.Errorf("%s is not valid JSON (%d bytes)", report.Path, len(b)))
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		fail("report", err)
	}
	if target, err := os.Readlink(s.path("/run/kpreload/driver")); err == nil {
		rec.DriverLink = target
	} else if !errors.Is(err, fs.ErrNotExist) {
		fail("driver link", err)
	}
	if b, err := os.ReadFile(s.path("/run/kpreload/ready")); err == nil {
		if json.Valid(b) {
			rec.Ready = json.RawMessage(bytes.TrimSpace(b))
		} else {
			fail("ready", fmt.Errorf("/run/kpreload/ready is not valid JSON (%d bytes)", len(b)))
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		fail("ready", err)
	}
	if rec.Modules, err = loadedModules(s.path("/proc/modules")); err != nil {
		fail("modules", err)
	}
	if rec.PCI, err = pciDevices(s.path("/sys/bus/pci/devices")); err != nil {
		fail("pci", err)
	}
	if rec.Kmsg, err = readKmsg(s.path("/dev/kmsg"), interesting); err != nil {
		fail("kmsg", err)
	}
	if rec.End, err = readUptime(s.path("/proc/uptime")); err != nil {
		fail("uptime at end", err)
	}
	return rec
}

// interesting selects the kernel log lines the record keeps: those mentioning kpreload
// or NVRM, except the kernel echoing its own command line.
func interesting(text string) bool {
	if strings.HasPrefix(text, "Command line: ") || strings.HasPrefix(text, "Kernel command line: ") {
		return false
	}
	return strings.Contains(strings.ToLower(text), "kpreload") || strings.Contains(text, "NVRM")
}

// readUptime returns the first field of /proc/uptime: seconds since the kernel started.
func readUptime(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("%s is empty", path)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// rootMount returns the last /proc/mounts entry mounted on "/" (the one in effect).
func rootMount(path string) (report.MountEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return report.MountEntry{}, err
	}
	var root report.MountEntry
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[1] == "/" {
			root = report.MountEntry{Device: mountinfo.Unescape(f[0]), FSType: f[2], Options: f[3]}
			found = true
		}
	}
	if !found {
		return root, fmt.Errorf("no entry for / in %s", path)
	}
	return root, nil
}

// blockDevice names the block device that holds dir, from its device number and the
// DEVNAME in sysDevBlock/MAJOR:MINOR/uevent; "" when there is none.
func blockDevice(dir, sysDevBlock string) string {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return ""
	}
	uevent := filepath.Join(sysDevBlock, fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)), "uevent")
	b, err := os.ReadFile(uevent)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, ok := strings.CutPrefix(line, "DEVNAME="); ok && name != "" {
			return "/dev/" + name
		}
	}
	return ""
}

// loadedModules returns the module names listed in /proc/modules.
func loadedModules(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names := []string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 0 {
			names = append(names, fields[0])
		}
	}
	if err := sc.Err(); err != nil {
		return names, fmt.Errorf("read %s: %w", path, err)
	}
	return names, nil
}

// pciDevices lists the devices in a /sys/bus/pci/devices directory, sorted by address.
func pciDevices(dir string) ([]report.PCIDevice, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	devs := []report.PCIDevice{}
	var errs []error
	for _, e := range entries {
		d := filepath.Join(dir, e.Name())
		dev := report.PCIDevice{Address: e.Name()}
		var err1, err2 error
		dev.Vendor, err1 = readHexAttr(filepath.Join(d, "vendor"))
		dev.Device, err2 = readHexAttr(filepath.Join(d, "device"))
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.Name(), err))
		}
		dev.Class, _ = readHexAttr(filepath.Join(d, "class"))
		if target, err := os.Readlink(filepath.Join(d, "driver")); err == nil {
			dev.Driver = filepath.Base(target)
		}
		if dev.Driver != "" {
			dev.EduID = eduID(d)
		}
		devs = append(devs, dev)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Address < devs[j].Address })
	return devs, errors.Join(errs...)
}

// eduID finds an edu_id attribute on the device or one level below it.
func eduID(dev string) string {
	candidates := []string{filepath.Join(dev, "edu_id")}
	if more, err := filepath.Glob(filepath.Join(dev, "*", "edu_id")); err == nil {
		candidates = append(candidates, more...)
	}
	for _, c := range candidates {
		if b, err := os.ReadFile(c); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// readHexAttr reads a sysfs attribute like "0x1234\n" and returns "1234".
func readHexAttr(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), nil
}

// readKmsg reads every record currently in the kernel log through /dev/kmsg without
// blocking and returns those whose text keep accepts. A regular file (tests) is read
// as a sequence of records, one per line.
func readKmsg(path string, keep func(string) bool) ([]report.KmsgLine, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	lines := []report.KmsgLine{}
	add := func(rec []byte) {
		if l, ok := parseKmsg(rec); ok && keep(l.Text) && len(lines) < maxKmsgLines {
			lines = append(lines, l)
		}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		for _, rec := range bytes.Split(b, []byte("\n")) {
			add(rec)
		}
		return lines, nil
	}
	buf := make([]byte, 16384)
	for i := 0; i < maxKmsgRecords; i++ {
		n, err := unix.Read(fd, buf)
		switch {
		case err == unix.EAGAIN || (err == nil && n == 0):
			return lines, nil
		case err == unix.EPIPE || err == unix.EINTR:
			continue // records were overwritten before we read them; go on with the next
		case err != nil:
			return lines, fmt.Errorf("read %s: %w", path, err)
		}
		add(buf[:n])
	}
	return lines, nil
}

// parseKmsg parses one /dev/kmsg record: "prio,seq,usec,flags[,...];text\n KEY=val...".
func parseKmsg(rec []byte) (report.KmsgLine, bool) {
	head, text, ok := bytes.Cut(rec, []byte(";"))
	if !ok {
		return report.KmsgLine{}, false
	}
	if i := bytes.IndexByte(text, '\n'); i >= 0 {
		text = text[:i]
	}
	f := strings.Split(string(head), ",")
	if len(f) < 3 {
		return report.KmsgLine{}, false
	}
	prio, err1 := strconv.Atoi(f[0])
	usec, err2 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return report.KmsgLine{}, false
	}
	return report.KmsgLine{Time: float64(usec) / 1e6, Level: prio & 7, Text: string(text)}, true
}
