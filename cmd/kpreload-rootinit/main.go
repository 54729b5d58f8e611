// Command kpreload-rootinit is /sbin/init of kpreload's test root filesystem. It records what the
// booted system looks like once the initramfs has handed over (uptime, command line, the
// root mount, /init's report, loaded modules, PCI driver bindings, kpreload and NVRM kernel
// log lines), prints that as one "kpreload-rootinit: {json}" line on the console and on
// the device named by kpreload.report= on the kernel command line, waits a few seconds
// at most for the processes /init left behind to end, and powers off.
//
// With kpreload.rootinit.run=FILE on the kernel command line it first runs the
// commands listed in FILE on the root (see package run), printing one
// "kpreload-rootinit-run: {json}" line per command on the same devices.
//
// It must never hang a boot: every failure is recorded in the JSON and the machine is
// powered off regardless. Run as any PID other than 1 it only prints the line on stdout,
// which is how it is tested on a development machine.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kpreload/kpreload/initramfs/rootinit/run"
	"github.com/kpreload/kpreload/report"
	"golang.org/x/sys/unix"
)

// writeTimeout bounds how long printing to one device may take before powering off anyway.
const writeTimeout = 10 * time.Second

func main() {
	pid := os.Getpid()
	if pid != 1 {
		rec := collect(sysRoot{dir: "/"}, nil)
		line, err := rec.ConsoleLine()
		if err != nil {
			fmt.Fprintf(os.Stderr, "rootinit: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(line)
		return
	}
	var mounted []string
	var errs []string
	mounted, errs = mountPseudo()
	errs = append(errs, runCommands()...)
	rec := collect(sysRoot{dir: "/"}, errs)
	rec.Mounted = mounted
	emit(rec)
	reapChildren(reapWait)
	powerOff()
}

// reapWait bounds how long the test init waits, before powering off, for
// processes /init left behind (a module load past its deadline, fs-verity
// being turned on for a module file) to end.
const reapWait = 5 * time.Second

// reapChildren reaps this process's children until none is left or wait
// has passed: what they were writing to the root disk is then on it when
// powerOff syncs. A child that does not end in time is left running.
func reapChildren(wait time.Duration) {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case err == unix.EINTR || pid > 0:
			continue
		case err != nil: // ECHILD: none left
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// emit prints the record on the console and on the report device, each bounded in time.
func emit(rec *report.RootInit) {
	line, err := rec.ConsoleLine()
	if err != nil {
		line = report.RootInitPrefix + fmt.Sprintf(`{"format":%d,"pid":%d,"errors":[%q]}`, report.RootInitFormat, rec.PID, err.Error())
	}
	printLine(rec.Cmdline, line)
}

// targets are the devices records are printed on: the console and the report device.
func targets(cmdline string) []string {
	targets := []string{"/dev/console"}
	if dev := cmdlineValue(cmdline, "kpreload.report"); dev != "" && dev != "/dev/console" {
		targets = append(targets, dev)
	}
	return targets
}

// printLine prints one line on every target, each bounded in time.
func printLine(cmdline, line string) {
	for _, t := range targets(cmdline) {
		if err := writeLine(t, line); err != nil {
			// The console is the last resort; stdout is usually the same device.
			fmt.Fprintf(os.Stdout, "kpreload-rootinit: writing to %s: %v\n", t, err)
			if t == "/dev/console" {
				fmt.Fprintln(os.Stdout, line)
			}
		}
	}
}

// writeLine writes line plus a newline to a terminal device and waits for it to drain,
// giving up after writeTimeout so a stuck device cannot hold the boot.
func writeLine(dev, line string) error {
	done := make(chan error, 1)
	go func() {
		fd, err := unix.Open(dev, unix.O_WRONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- fmt.Errorf("open: %w", err)
			return
		}
		defer unix.Close(fd)
		setBaud(fd)
		buf := []byte(line + "\n")
		for len(buf) > 0 {
			n, err := unix.Write(fd, buf)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				done <- fmt.Errorf("write: %w", err)
				return
			}
			buf = buf[n:]
		}
		// tcdrain: wait until the UART has sent everything before the power goes.
		_ = unix.IoctlSetInt(fd, unix.TCSBRK, 1)
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(writeTimeout):
		return fmt.Errorf("timed out after %s", writeTimeout)
	}
}

// setBaud puts a serial terminal at 115200 baud: a port that is not the kernel console
// starts at 9600, which a real UART would pace a long line at (QEMU's does not: 100 KB
// take under a second there). Errors are ignored: the device may not be a terminal.
func setBaud(fd int) {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return
	}
	t.Cflag = t.Cflag&^unix.CBAUD | unix.B115200
	t.Ispeed, t.Ospeed = unix.B115200, unix.B115200
	_ = unix.IoctlSetTermios(fd, unix.TCSETS, t)
}

// mountPseudo mounts /proc, /sys and /dev where they are not mounted yet (after
// switch_root they have usually been moved over already).
func mountPseudo() (mounted, errs []string) {
	for _, m := range []struct{ dir, probe, fstype string }{
		{"/proc", "/proc/self/stat", "proc"},
		{"/sys", "/sys/kernel", "sysfs"},
		{"/dev", "/dev/kmsg", "devtmpfs"},
	} {
		if _, err := os.Stat(m.probe); err == nil {
			continue
		}
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			errs = append(errs, fmt.Sprintf("mkdir %s: %v", m.dir, err))
			continue
		}
		if err := unix.Mount(m.fstype, m.dir, m.fstype, unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			errs = append(errs, fmt.Sprintf("mount %s on %s: %v", m.fstype, m.dir, err))
			continue
		}
		mounted = append(mounted, m.dir)
	}
	return mounted, errs
}

// powerOff syncs and powers the machine off. If the kernel refuses, PID 1 exits, which
// panics the kernel; with panic=-1 and QEMU's -no-reboot that still ends the run.
func powerOff() {
	unix.Sync()
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	fmt.Fprintf(os.Stdout, "kpreload-rootinit: power off failed: %v\n", err)
	os.Exit(1)
}

// cmdlineValue returns the value of the first key=value parameter named key.
func cmdlineValue(cmdline, key string) string {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// runCommands runs the commands of the file kpreload.rootinit.run names, printing
// each one's record; it returns the errors to carry into the final record.
func runCommands() []string {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return nil // collect records the unreadable command line
	}
	cmdline := strings.TrimSpace(string(b))
	file := cmdlineValue(cmdline, run.Param)
	if file == "" {
		return nil
	}
	cmds, err := run.ParseFile(file)
	if err != nil {
		return []string{run.Param + ": " + err.Error()}
	}
	now := func() float64 {
		v, _ := readUptime("/proc/uptime")
		return v
	}
	for _, c := range cmds {
		printLine(cmdline, run.Run(c, now).ConsoleLine())
	}
	return nil
}
