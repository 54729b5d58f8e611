// Package pid1 is kpreload's /init: it runs as process 1 from the initramfs, loads
// the drivers the hardware needs from the boot index (coldplug), mounts the root
// filesystem, loads driver sets cached on it, writes the boot report and hands
// over to the real init with switch_root. Nothing here may stop the machine from
// reaching userspace because of a driver problem, and pid 1 never exits.
//
// The roots it reads and writes under and the system calls it makes are values
// (Options): Main passes the running system's, tests fixture trees and fakes.
package pid1

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	ucmdline "github.com/u-root/u-root/pkg/cmdline"
	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/initramfs/kcmdline"
	"github.com/kpreload/kpreload/initramfs/modprobe"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/secureboot"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/live/loader"
	"github.com/kpreload/kpreload/report"
)

// Boot holds the state of one boot.
type Boot struct {
	o       Options
	console io.Writer
	cmd     *ucmdline.CmdLine
	rep     report.Report
	release string
	ld      *loader.Loader
	index   *coldplug.Index
	// sb is what the kernel enforces about module signatures.
	sb secureboot.State
	// vermagic is the running kernel's full vermagic (from its own modules).
	vermagic string
	// timeout and nice are the isolated loads' deadline and priority.
	timeout time.Duration
	nice    int
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
	// just before a coldplug of that bus (by the driver plan), which uses it
	// for its first round.
	prescan    []coldplug.Device
	prescanBus string
	// fwFile, when set, is the instance request's fw_cfg item as read
	// through fw_cfg's I/O ports before the first coldplug, for a decision
	// taken after the root mount (fwCfgBeforeRoot).
	fwFile *instance.File
	// fwRestore puts back the kernel's firmware search path /init changed
	// (see firmwareFromRoot); nil when it changed nothing.
	fwRestore func()
	// requestsRead is set once the helper's records of the kernel's module
	// requests are in the report (kernelRequests).
	requestsRead bool
}

// Now returns seconds since the kernel started (CLOCK_BOOTTIME).
func Now() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

// Run runs one boot with o's roots and system calls; with the real ones it
// never returns (it hands over to the real init, or waits forever).
func Run(o Options) { newBoot(o).run() }

// run is the boot itself: pseudo filesystems, coldplug, the driver plan
// (early or after the root), the root, the hand-over.
func (b *Boot) run() {
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

// newBoot returns a boot that has done nothing yet.
func newBoot(o Options) *Boot {
	b := &Boot{o: o, console: o.Console, seen: map[string]map[string]bool{}, devIndex: map[string]int{}, attempted: map[string]bool{}}
	b.rep.Format = 1
	b.rep.InitStart = o.Now()
	return b
}

func (b *Boot) event(format string, args ...any) {
	b.rep.Events = append(b.rep.Events, report.Event{Time: b.o.Now(), What: fmt.Sprintf(format, args...)})
}

func (b *Boot) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.rep.Errors = append(b.rep.Errors, msg)
	fmt.Fprintf(b.console, "kpreload: error: %s\n", consoleText(msg))
}

func (b *Boot) warnf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.rep.Warnings = append(b.rep.Warnings, msg)
	fmt.Fprintf(b.console, "kpreload: warning: %s\n", consoleText(msg))
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

// newLoader returns a loader for this boot's kernel and command line whose
// loads are labelled phase. Driver sets (GPU drivers, the test driver) load
// in a helper process under a deadline (Options.IsolateDrivers); the
// kernel's own modules (storage, buses) load in this one.
func (b *Boot) newLoader(phase string) *loader.Loader {
	// A root mounted read-write (rw, as kpreload's images boot) can take
	// fs-verity on the module files that loaded from it.
	_, rw := b.flagOK("rw")
	ld := &loader.Loader{
		Release:      b.release,
		Vermagic:     b.vermagic,
		SysRoot:      b.o.SysDir,
		Kernel:       b.o.Kernel,
		Now:          b.o.Now,
		Params:       b.cmd.FlagsForModule,
		VerifyDigest: b.flag("kpreload.verify", "1") != "0",
		EnableVerity: rw,
		SigEnforced:  b.sb.Enforced,
		Timeout:      b.timeout,
		Nice:         b.nice,
		Phase:        phase,
	}
	if b.o.IsolateDrivers {
		ld.Isolate = func(c *coldplug.Candidate) bool { return !selection.IsKernelSet(c.Set) }
	}
	return ld
}

// indexRead is the outcome of reading the initramfs boot index.
type indexRead struct {
	idx *bootindex.Index
	err error
}

// readIndex reads the boot index at path in a goroutine of its own (it
// needs neither /proc nor /sys), so that decoding it overlaps the mounts;
// the channel yields its outcome once.
func readIndex(path string) <-chan indexRead {
	out := make(chan indexRead, 1)
	go func() {
		defer func() {
			// A panic in a goroutine would end pid 1: make it an error.
			if r := recover(); r != nil {
				out <- indexRead{err: fmt.Errorf("boot index: reading it crashed: %v", r)}
			}
		}()
		idx, err := bootindex.Read(path)
		out <- indexRead{idx, err}
	}()
	return out
}

// setup mounts the pseudo filesystems, reads the command line and the boot index.
func (b *Boot) setup() {
	b.release = b.o.System.Release()
	dir := filepath.Join(b.initramfsPath("/lib/modules"), b.release)
	index := readIndex(filepath.Join(dir, bootindex.InitramfsName))
	for _, m := range []struct {
		src, dst, fstype string
		flags            uintptr
		data             string
	}{
		{"proc", b.o.ProcDir, "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", b.o.SysDir, "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", b.o.DevDir, "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"tmpfs", b.o.RunDir, "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
	} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := b.o.System.Mount(m.src, m.dst, m.fstype, m.flags, m.data); err != nil && err != unix.EBUSY {
			b.errorf("mount %s: %v", m.dst, err)
		}
	}
	if f, err := os.OpenFile(filepath.Join(b.o.DevDir, "console"), os.O_WRONLY, 0); err == nil {
		b.console = f
	}
	// From here on the kernel's module requests reach /init as its helper,
	// which can log to /dev/kmsg and leave its records on this /run; the
	// kernel's requests before /init find no helper and fail at once
	// (modprobe.HelperPath says why the archive has no link).
	if err := modprobe.Install(b.o.Initramfs); err != nil {
		b.warnf("%v: the kernel's module requests are not served before switch_root", err)
	}
	// securityfs shows the kernel's lockdown mode (secureboot.Read); a
	// kernel without it leaves the mode unknown, which is no error.
	if err := b.o.System.Mount("securityfs", filepath.Join(b.o.SysDir, "kernel/security"), "securityfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil && err != unix.EBUSY {
		b.event("securityfs: %v: the lockdown mode is read from the command line", err)
	}
	b.settings()
	b.rep.Cmdline = b.cmd.Raw
	b.rep.Kernel = b.release
	b.event("kpreload /init started")

	b.rep.SecureBoot = &b.sb
	if b.sb.Enforced || b.sb.SecureBoot == secureboot.Enabled {
		fmt.Fprintf(b.console, "kpreload: %s\n", b.sb.Summary())
	}
	b.event("%s", b.sb.Summary())
	// An image built for Secure Boot that runs without it: the boot goes on,
	// and the report says what is wrong.
	if fault := b.sb.Expect(b.flag(secureboot.ExpectFlag, "")); fault != "" {
		b.warnf("%s", fault)
	}

	if b.ld.SigEnforced {
		b.event("the kernel enforces module signatures: unsigned modules are refused before loading")
	}
	r := <-index
	idx, err := r.idx, r.err
	if err != nil {
		b.errorf("%v: no drivers will be loaded from the initramfs", err)
		return
	}
	b.useIndex(idx, dir)
	b.event("boot index read: %d sets", len(idx.Sets))
}

// settings reads what every module load on this kernel depends on (the
// command line, with our own parser: u-root's panics on a value that is a
// lone quote; what the kernel enforces about module signatures; the isolated
// loads' deadline and priority) and makes the loader. /init's setup and its
// module helper (Modprobe) both start with it, so both load with the same checks.
func (b *Boot) settings() {
	b.cmd = kcmdline.Read(filepath.Join(b.o.ProcDir, "cmdline"))
	b.sb = secureboot.Read(b.o.SysDir, b.o.ProcDir, b.flag("lockdown", ""))
	b.index = coldplug.NewIndex()
	b.timeout, b.nice = b.loadTimeout(), b.loadNice()
	b.ld = b.newLoader("")
}

// useIndex makes idx, the initramfs's boot index read from dir, the one the
// kernel's own modules load from: its kernel sets, checked against the
// running kernel's vermagic (taken from its own modules).
func (b *Boot) useIndex(idx *bootindex.Index, dir string) {
	if idx.Kernel != b.release {
		b.errorf("boot index is for kernel %s, running %s", idx.Kernel, b.release)
	}
	b.vermagic = selection.KernelVermagic(idx)
	b.ld.Vermagic = b.vermagic
	b.initIdx, b.initDir = idx, dir
	b.index.Add(dir, idx, func(s *bootindex.Set) bool { return selection.IsKernelSet(s) })
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
