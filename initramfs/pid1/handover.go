package pid1

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/kpreload/kpreload/report"
)

// writeReport stores the report in the run directory and prints the summary on
// the console and the whole report as one line where tools read it.
func (b *Boot) writeReport() {
	b.refreshDrivers()
	b.kernelRequests()
	b.rep.SwitchRoot = b.o.Now()
	b.emitReport()
}

// emitReport stores the report as it is, prints its summary and sends it on
// its channels (writeReport before switch_root; rootFailed before a fallback).
func (b *Boot) emitReport() {
	// Named in the report, for kpreload's units after switch_root.
	dev := b.reportChannel()
	b.rep.Channel = dev
	if err := report.Write("/", b.o.ReportPath, &b.rep); err != nil {
		// Not a warning in the report: it is the report that was not stored.
		fmt.Fprintf(b.console, "kpreload: warning: %s\n", consoleText(err.Error()))
	}
	fmt.Fprintln(b.console, b.rep.Summary())
	line, err := b.rep.ConsoleLine()
	if err != nil {
		return
	}
	if dev != "" {
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
	if err := existsIn(b.o.NewRoot, initPath); err != nil {
		// In the report too: it is the last thing /init writes.
		b.errorf("%s not found on root: %v", initPath, err)
	}
	b.writeReport()
	err := b.o.System.SwitchRoot(b.o.NewRoot, initPath)
	fmt.Fprintf(b.console, "kpreload: switch_root to %s failed: %v\n", initPath, err)
	for _, p := range []string{"/sbin/init", "/etc/init", "/bin/init", "/bin/sh"} {
		_ = b.o.System.Exec(p)
	}
	b.rescue("no init could be started")
	for {
		b.o.System.Sleep(time.Hour)
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
	sh := b.initramfsPath("/bin/sh")
	if _, err := os.Stat(sh); err != nil {
		fmt.Fprintln(b.console, "kpreload: this initramfs has no /bin/sh (build it with --debug-shell)")
		return
	}
	fmt.Fprintln(b.console, "kpreload: emergency shell; exit to continue")
	_ = b.o.System.Shell(sh, b.console)
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
