// Package pid1 is kpreload's /init: it runs as process 1 from the initramfs, loads
// the drivers the hardware needs from the boot index (coldplug), mounts the root
// filesystem, loads driver sets cached on it, writes the boot report and hands
// over to the real init with switch_root. Nothing here may stop the machine from
// reaching userspace because of a driver problem, and pid 1 never exits.
package pid1

import (
	ucmdline "github.com/u-root/u-root/pkg/cmdline"

	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/initramfs/kcmdline"
	"github.com/kpreload/kpreload/initramfs/rootfs"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/live/loader"
	"github.com/kpreload/kpreload/live/report"
	"github.com/kpreload/kpreload/live/secureboot"
	"github.com/u-root/u-root/pkg/mount"
	"golang.org/x/sys/unix"
)

// NewRoot is where the root filesystem is mounted before switch_root.
const NewRoot = "/newroot"

// Boot holds the state of one boot.
type Boot struct {
	console io.Writer
	cmd     *ucmdline.CmdLine
	rep     report.Report
	release string
	ld      *loader.Loader
	index   *coldplug.Index
	// sb is what the kernel enforces about module signatures.
	sb secureboot.State
	// seen holds, per pass, the sysfs paths of the devices already matched:
	// rescans read only the others (a device's modalias is fixed while it exists).
	seen map[string]map[string]bool
	// devIndex maps a device key to its entry in rep.Devices.
	devIndex map[string]int
	// attempted holds the modules already given to the loader.
	attempted map[string]bool
	// initIdx is the initramfs boot index and initDir its directory; the driver
	// sets in it load only once selection has chosen them.
	initIdx *bootindex.Index
	initDir string
	// decision is the driver selection, nil until taken.
	decision *selection.Decision
	// prescan, when set, is a scan of prescanBus ("*" for every bus) taken
	// just before a coldplug of that bus (by startEarly, or by decide for
	// the driver sets' PCI-only pass), which uses it for its first round.
	prescan    []coldplug.Device
	prescanBus string
	// fwFile, when set, is the instance request's fw_cfg item as read
	// through fw_cfg's I/O ports before the first coldplug, for a decision
	// taken after the root mount (fwCfgBeforeRoot).
	fwFile *instance.File
	// fwRestore puts back the kernel's firmware search path /init changed
	// (see firmwareFromRoot); nil when it changed nothing.
	fwRestore func()
}

// Now returns seconds since the kernel started (CLOCK_BOOTTIME).
func Now() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

// Main runs /init. It does not return.
func Main() {
	b := &Boot{console: os.Stdout, seen: map[string]map[string]bool{}, devIndex: map[string]int{}, attempted: map[string]bool{}}
	b.rep.Format = 1
	b.rep.InitStart = Now()
	defer func() {
		// A bug here must not become a kernel panic: record it and keep going to root.
		if r := recover(); r != nil {
			b.errorf("kpreload /init crashed: %v\n%s", r, debug.Stack())
			b.handOver()
		}
	}()
	b.setup()
	// The kernel's own modules first (storage, buses, qemu_fw_cfg for the
	// instance request); driver sets only once selection has chosen their versions.
	// With a complete initramfs index the GPU sets start loading now, beside
	// the first coldplug and while the root is found.
	early := b.startEarly()
	b.coldplug("initramfs", "initramfs", b.index)
	b.mountRoot()
	b.drivers(early)
	b.handOver()
}

func (b *Boot) event(format string, args ...any) {
	b.rep.Events = append(b.rep.Events, report.Event{Time: Now(), What: fmt.Sprintf(format, args...)})
}

func (b *Boot) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.rep.Errors = append(b.rep.Errors, msg)
	fmt.Fprintf(b.console, "kpreload: error: %s\n", msg)
}

func (b *Boot) warnf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.rep.Warnings = append(b.rep.Warnings, msg)
	fmt.Fprintf(b.console, "kpreload: warning: %s\n", msg)
}

// firmwarePathParam is the kernel's custom firmware search path, searched
// before /lib/firmware/{updates/,}[<release>/].
const firmwarePathParam = "/sys/module/firmware_class/parameters/path"

// firmwareFromRoot lets drivers loaded before switch_root find firmware on
// the root: until then the kernel reads firmware from the initramfs (its
// loader resolves paths against pid 1's root), so while /init loads the
// driver sets it points the kernel's custom search path at the root's
// /lib/firmware (unless the command line set one), and handOver puts it back
// before switch_root. It returns the directories the kernel now searches,
// for the loader's declared-firmware check.
func (b *Boot) firmwareFromRoot() []string {
	dirs := b.firmwareDirs
	old, err := os.ReadFile(firmwarePathParam)
	if err != nil {
		return dirs("")
	}
	if cur := strings.TrimSpace(string(old)); cur != "" {
		return dirs(cur) // the command line chose one: leave it
	}
	rootFW := filepath.Join(NewRoot, "lib/firmware")
	if fi, err := os.Stat(rootFW); err != nil || !fi.IsDir() {
		return dirs("")
	}
	if err := os.WriteFile(firmwarePathParam, []byte(rootFW), 0o644); err != nil {
		b.warnf("cannot point the kernel's firmware search at %s: %v", rootFW, err)
		return dirs("")
	}
	b.fwRestore = func() {
		// The kernel takes "\n" as an empty path.
		if err := os.WriteFile(firmwarePathParam, []byte("\n"), 0o644); err != nil {
			b.warnf("cannot reset the kernel's firmware search path: %v", err)
		}
		b.fwRestore = nil
	}
	b.event("firmware searched in %s while the driver sets load", rootFW)
	return dirs(rootFW)
}

// loadTimeout is kpreload.load_timeout= (seconds, decimals allowed), else
// the loader's default; a bad value is a warning and the default.
func (b *Boot) loadTimeout() time.Duration {
	v := b.flag("kpreload.load_timeout", "")
	if v == "" {
		return loader.DefaultTimeout
	}
	secs, err := strconv.ParseFloat(v, 64)
	if err != nil || secs <= 0 || secs > 3600 {
		b.warnf("kpreload.load_timeout=%q: want seconds between 0 and 3600; using %s", v, loader.DefaultTimeout)
		return loader.DefaultTimeout
	}
	return time.Duration(secs * float64(time.Second))
}

// loadNice is kpreload.load_nice= (a nice value, -20 to 19) for driver-set
// loads, else loader.DriverNice; a bad value is a warning and the default.
func (b *Boot) loadNice() int {
	v := b.flag("kpreload.load_nice", "")
	if v == "" {
		return loader.DriverNice
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < -20 || n > 19 {
		b.warnf("kpreload.load_nice=%q: want a nice value from -20 to 19; using %d", v, loader.DriverNice)
		return loader.DriverNice
	}
	return n
}

// indexRead is the outcome of reading the initramfs boot index.
type indexRead struct {
	idx *bootindex.Index
	err error
}

// readIndex reads the initramfs boot index for release in a goroutine of its
// own (it needs neither /proc nor /sys), so that decoding it overlaps the
// mounts; the channel yields its outcome once.
func readIndex(release string) <-chan indexRead {
	out := make(chan indexRead, 1)
	go func() {
		defer func() {
			// A panic in a goroutine would end pid 1: make it an error.
			if r := recover(); r != nil {
				out <- indexRead{err: fmt.Errorf("boot index: reading it crashed: %v", r)}
			}
		}()
		idx, err := bootindex.Read(filepath.Join("/lib/modules", release, bootindex.InitramfsName))
		out <- indexRead{idx, err}
	}()
	return out
}

// setup mounts the pseudo filesystems, reads the command line and the boot index.
func (b *Boot) setup() {
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		b.release = unix.ByteSliceToString(u.Release[:])
	}
	index := readIndex(b.release)
	for _, m := range []struct {
		src, dst, fstype string
		flags            uintptr
		data             string
	}{
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
	} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fstype, m.flags, m.data); err != nil && err != unix.EBUSY {
			b.errorf("mount %s: %v", m.dst, err)
		}
	}
	if f, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		b.console = f
	}
	// securityfs shows the kernel's lockdown mode (secureboot.Read); a
	// kernel without it leaves the mode unknown, which is no error.
	if err := unix.Mount("securityfs", "/sys/kernel/security", "securityfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil && err != unix.EBUSY {
		b.event("securityfs: %v: the lockdown mode is read from the command line", err)
	}
	// Our own parser: u-root's panics on a value that is a lone quote.
	b.cmd = kcmdline.Read("/proc/cmdline")
	b.rep.Cmdline = b.cmd.Raw
	b.rep.Kernel = b.release
	b.event("kpreload /init started")

	b.sb = secureboot.Read("/sys", "/proc", b.flag("lockdown", ""))
	b.rep.SecureBoot = &b.sb
	if b.sb.Enforced || b.sb.SecureBoot == secureboot.Enabled {
		fmt.Fprintf(b.console, "kpreload: %s\n", b.sb.Summary())
	}
	b.event("%s", b.sb.Summary())

	b.index = coldplug.NewIndex()
	b.ld = &loader.Loader{
		Release:      b.release,
		SysRoot:      "/sys",
		Now:          Now,
		Params:       b.cmd.FlagsForModule,
		VerifyDigest: b.flag("kpreload.verify", "1") != "0",
		SigEnforced:  b.sb.Enforced,
		// Driver sets (GPU drivers, the test driver) load in a helper
		// process under a deadline; the kernel's own modules (storage,
		// buses) load here.
		Isolate: func(c *coldplug.Candidate) bool { return !selection.IsKernelSet(c.Set) },
		Timeout: b.loadTimeout(),
		Nice:    b.loadNice(),
	}
	if b.ld.SigEnforced {
		b.event("the kernel enforces module signatures: unsigned modules are refused before loading")
	}
	dir := filepath.Join("/lib/modules", b.release)
	r := <-index
	idx, err := r.idx, r.err
	if err != nil {
		b.errorf("%v: no drivers will be loaded from the initramfs", err)
		return
	}
	if idx.Kernel != b.release {
		b.errorf("boot index is for kernel %s, running %s", idx.Kernel, b.release)
	}
	b.ld.Vermagic = selection.KernelVermagic(idx)
	b.initIdx, b.initDir = idx, dir
	b.index.Add(dir, idx, func(s *bootindex.Set) bool { return selection.IsKernelSet(s) })
	b.event("boot index read: %d sets", len(idx.Sets))
}

// flagOK returns a kernel command line flag's value and whether it is set
// (never set when the command line could not be read).
func (b *Boot) flagOK(name string) (string, bool) {
	if b.cmd == nil {
		return "", false
	}
	return b.cmd.Flag(name)
}

// flag returns a kernel command line flag's value or def.
func (b *Boot) flag(name, def string) string {
	if b.cmd == nil {
		return def // a crash before the command line was read: hand over anyway
	}
	if v, ok := b.cmd.Flag(name); ok {
		return v
	}
	return def
}

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
			devs, err = coldplug.ScanNew("/sys", bus, seen)
		}
		if err != nil {
			b.errorf("coldplug scan: %v", err)
			return
		}
		var want []string
		fresh := 0
		for _, d := range devs {
			key := d.Path + "\x00" + d.Modalias
			if seen[d.Path] {
				continue
			}
			seen[d.Path] = true
			fresh++
			names := match.Match(d.Modalias)
			i, ok := b.devIndex[key]
			if !ok {
				b.rep.Devices = append(b.rep.Devices, report.Device{Path: d.Path, Modalias: d.Modalias, Driver: d.Driver, Decision: "no module matches"})
				i = len(b.rep.Devices) - 1
				b.devIndex[key] = i
			}
			dev := &b.rep.Devices[i]
			if len(names) > 0 {
				dev.Modules = append(dev.Modules, names...)
				dev.Decision = "matched (" + phase + ")"
			} else if d.Driver != "" && len(dev.Modules) == 0 {
				dev.Decision = "bound to built-in driver"
			}
			for _, n := range names {
				if !b.attempted[n] {
					b.attempted[n] = true
					want = append(want, n)
				}
			}
			if len(names) == 0 || d.Driver != "" {
				// Only a device whose driver loads now has children still to come:
				// a bound one (a built-in virtio_pci) has made them already.
				continue
			}
			for _, child := range childAliases(d.Modalias) {
				var ahead []string
				for _, n := range match.Match(child) {
					if !b.attempted[n] {
						b.attempted[n] = true
						ahead = append(ahead, n)
					}
				}
				if len(ahead) > 0 {
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
	b.record(b.ld.Load(b.index, names))
}

// record adds what a load did to the report: the modules, their missing
// firmware and the time the last one was ready.
func (b *Boot) record(mods []report.Module) {
	b.rep.Modules = append(b.rep.Modules, mods...)
	for _, m := range mods {
		b.attempted[m.Name] = true
		for _, fw := range m.MissingFirmware {
			b.warnf("%s declares firmware %s, which is in none of %s: its init may fail", m.Name, fw, strings.Join(b.ld.FirmwareDirs, ", "))
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
	v, ok := b.flagOK("kpreload.load")
	if !ok || v == "" {
		return
	}
	b.ld.Phase = phase
	var want []string
	for _, n := range strings.Split(v, ",") {
		n = modname.Normalize(strings.TrimSpace(n))
		if n == "" || b.attempted[n] || len(b.index.ByName(n)) == 0 {
			continue
		}
		b.attempted[n] = true
		want = append(want, n)
	}
	if len(want) == 0 {
		if phase == "rootfs" {
			for _, n := range strings.Split(v, ",") {
				if n = modname.Normalize(strings.TrimSpace(n)); n != "" && !b.attempted[n] {
					b.warnf("kpreload.load: module %s is in no cached set for %s", n, b.release)
				}
			}
		}
		return
	}
	b.event("%s: loading %s (kpreload.load)", phase, strings.Join(want, ", "))
	b.load(want)
}

// refreshDrivers records which driver each device ended up bound to.
func (b *Boot) refreshDrivers() {
	for i := range b.rep.Devices {
		if d := coldplug.BoundDriver(b.rep.Devices[i].Path); d != "" {
			b.rep.Devices[i].Driver = d
		}
	}
}

// mountRoot waits for the root device (rootwait semantics), loads the filesystem
// module it needs and mounts it on NewRoot. It retries forever rather than fail:
// on a machine without its root disk there is nothing better to do, and the
// console says why every few seconds.
func (b *Boot) mountRoot() {
	spec, err := rootfs.ParseSpec(b.flag("root", ""))
	b.rep.Root.Spec = b.flag("root", "")
	if err != nil {
		b.errorf("%v", err)
		b.rescue(err.Error())
		return
	}
	start := time.Now()
	next := 5 * time.Second
	var dev string
	for {
		dev, err = rootfs.Find(spec)
		if err == nil {
			break
		}
		// New devices may appear late (asynchronous probes, USB): pick them up.
		b.coldplug("initramfs", "initramfs", b.index)
		if waited := time.Since(start); waited >= next {
			fmt.Fprintf(b.console, "kpreload: waiting for root %s (%s so far): %v\n", spec, waited.Round(time.Second), err)
			next += 5 * time.Second
			if b.flag("kpreload.debug", "") != "" && waited >= 30*time.Second {
				b.rescue(err.Error())
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.rep.Root.Device = dev
	fstype := b.flag("rootfstype", "")
	if fstype == "" {
		if fstype, err = rootfs.FSType(dev); err != nil {
			b.rep.Root.Error = err.Error()
			fstype = "ext4"
			b.warnf("root %s: %v; trying ext4", dev, err)
		}
	}
	b.rep.Root.FSType = fstype
	// Filesystems declare MODULE_ALIAS_FS: "fs-ext4" and so on.
	if names := b.index.Match("fs-" + fstype); len(names) > 0 {
		b.ld.Phase = "initramfs"
		b.load(names)
	}
	_, rw := b.flagOK("rw")
	opts := rootfs.Options{FSType: fstype, Flags: b.flag("rootflags", ""), RW: rw}
	for {
		if err = rootfs.Mount(dev, NewRoot, fstype, opts); err == nil {
			break
		}
		b.rep.Root.Error = err.Error()
		fmt.Fprintf(b.console, "kpreload: cannot mount root: %v; retrying\n", err)
		if b.flag("kpreload.debug", "") != "" {
			b.rescue(err.Error())
		}
		time.Sleep(2 * time.Second)
	}
	b.rep.Root.Error = ""
	b.rep.Root.Mounted = Now()
	b.event("root %s (%s) mounted from %s", spec, fstype, dev)
}

// writeReport stores the report in /run and prints the summary on the console and
// the whole report as one line where tools read it.
func (b *Boot) writeReport() {
	b.refreshDrivers()
	b.rep.SwitchRoot = Now()
	if err := os.MkdirAll(filepath.Dir(report.Path), 0o755); err == nil {
		if data, err := json.MarshalIndent(&b.rep, "", "  "); err == nil {
			tmp := report.Path + ".tmp"
			if os.WriteFile(tmp, data, 0o644) == nil {
				_ = os.Rename(tmp, report.Path)
			}
		}
	}
	fmt.Fprintln(b.console, b.rep.Summary())
	line, err := b.rep.ConsoleLine()
	if err != nil {
		return
	}
	if dev := b.flag("kpreload.report", ""); dev != "" {
		if f, err := os.OpenFile(dev, os.O_WRONLY, 0); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		} else {
			b.warnf("report channel %s: %v", dev, err)
		}
	}
	if b.flag("kpreload.console_report", "") == "1" {
		fmt.Fprintln(b.console, line)
	}
}

// handOver writes the report and switch_roots into the real init. If that fails
// it tries the usual fallbacks and, failing all, waits forever: pid 1 must not exit.
func (b *Boot) handOver() {
	if b.fwRestore != nil {
		b.fwRestore()
	}
	initPath := b.flag("init", "/sbin/init")
	if err := existsIn(NewRoot, initPath); err != nil {
		// In the report too: it is the last thing /init writes.
		b.errorf("%s not found on root: %v", initPath, err)
	}
	b.writeReport()
	err := mount.SwitchRoot(NewRoot, initPath)
	fmt.Fprintf(b.console, "kpreload: switch_root to %s failed: %v\n", initPath, err)
	for _, p := range []string{"/sbin/init", "/etc/init", "/bin/init", "/bin/sh"} {
		_ = unix.Exec(p, []string{p}, os.Environ())
	}
	b.rescue("no init could be started")
	for {
		time.Sleep(time.Hour)
	}
}

// rescue starts an emergency shell when the initramfs has one and kpreload.debug
// is on the command line; otherwise it only explains.
func (b *Boot) rescue(why string) {
	fmt.Fprintf(b.console, "kpreload: cannot continue booting: %s\n", why)
	if b.flag("kpreload.debug", "") == "" {
		fmt.Fprintln(b.console, "kpreload: add kpreload.debug to the kernel command line (and build the initramfs with --debug-shell) for an emergency shell")
		return
	}
	sh := "/bin/sh"
	if _, err := os.Stat(sh); err != nil {
		fmt.Fprintln(b.console, "kpreload: this initramfs has no /bin/sh (build it with --debug-shell)")
		return
	}
	c := exec.Command(sh)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, b.console, b.console
	fmt.Fprintln(b.console, "kpreload: emergency shell; exit to continue")
	_ = c.Run()
}

// existsIn checks that path exists inside the tree at root, resolving symbolic
// links the way they will resolve once root is "/" (Debian's /sbin/init is an
// absolute link to /lib/systemd/systemd).
func existsIn(root, path string) error {
	for hops := 0; hops < 40; hops++ {
		full := filepath.Join(root, path)
		fi, err := os.Lstat(full)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return nil
		}
		target, err := os.Readlink(full)
		if err != nil {
			return err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = target
	}
	return fmt.Errorf("%s: too many levels of symbolic links", path)
}
