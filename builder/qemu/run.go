package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/report"
)

// ProgressEvery is how often Runner.Progress is called while QEMU runs, unless
// Runner.ProgressInterval says otherwise.
const ProgressEvery = 5 * time.Second

// Result is what one boot produced.
type Result struct {
	// Report is /init's boot report, nil when none came back.
	Report *report.Report
	// RootInit is the test root filesystem's record, nil when none came back.
	RootInit *report.RootInit
	// Console is the path of the kernel console log (first serial port).
	Console string
	// ReportLog is the path of the report channel log (second serial port).
	ReportLog string
	// Duration is the wall-clock time QEMU ran.
	Duration time.Duration
	// Panicked is set when the console shows a kernel panic.
	Panicked bool
	// PanicLine is the console's "Kernel panic - not syncing: ..." line.
	PanicLine string
	// TimedOut is set when QEMU was killed at Config.Timeout.
	TimedOut bool
	// ExitCode is QEMU's exit status (-1 when it was killed).
	ExitCode int
	// Accel is the accelerator the boot ran under ("tcg" or "kvm").
	Accel string
	// Args is QEMU's command line (without the binary).
	Args []string
	// Kernel holds the console's kernel log lines of interest with their printk times.
	Kernel []KernelLine
	// Warnings notes what went wrong without failing the run (KVM fell back, a garbled
	// console line, ...).
	Warnings []string
	// UntilMatched is set when the console matched Config.Until (and the run was
	// ended there); UntilMatch is the matching text.
	UntilMatched bool
	UntilMatch   string
	// Up is kpreload-up.service's record that ended the run
	// (Config.UntilUp; UntilMatch is then its line on the report
	// channel), nil when none did.
	Up *report.Up
	// RootPlugged is how long after QEMU started the root disk was plugged
	// in (Config.RootLate), 0 when it was there from the start.
	RootPlugged time.Duration
	// Status is what the machine said of itself, `kpreload status --json`
	// as kpreload-up.service wrote it on the report channel before its
	// record (report.ScanStatus; Config.UntilUp), nil when it wrote none.
	Status json.RawMessage
}

// EndedBy says which mark of an image being up ended the run, in words:
// kpreload-up.service's record, or which of UpMarks the console matched;
// "" when neither did.
func (r *Result) EndedBy() string {
	if r.Up != nil {
		return r.Up.Describe()
	}
	if r.UntilMatched {
		return WhatUp(r.UntilMatch)
	}
	return ""
}

// untilPoll is how often the console log is checked against Config.Until.
const untilPoll = 250 * time.Millisecond

// Runner boots machines with a Driver.
type Runner struct {
	// Driver runs QEMU; nil means ExecDriver{}.
	Driver Driver
	// WorkDir holds the logs not placed by Config; empty means a new temporary directory
	// (left in place so the logs can be read afterwards).
	WorkDir string
	// Progress, when set, is called every ProgressInterval with the time QEMU has run.
	Progress func(elapsed time.Duration)
	// ProgressInterval is how often Progress is called (default ProgressEvery).
	ProgressInterval time.Duration
	// Log receives warnings as they happen (KVM probe fallback); nil discards them.
	Log io.Writer
	// ProbeTimeout bounds the KVM probe boot (default 10 s).
	ProbeTimeout time.Duration
}

// Run boots c with a default Runner.
func Run(ctx context.Context, c Config) (*Result, error) {
	return (&Runner{}).Run(ctx, c)
}

// Run boots c, waits for the machine to power off, for the console to match c.Until or
// for c.Timeout, and collects the results. It returns an error, together with the
// partial Result, when QEMU could not start or failed, timed out, the kernel panicked,
// or c.Until was set and never matched; the error quotes the last console lines. A
// boot that ends without a report is not an error here: check Result.Report.
func (r *Runner) Run(ctx context.Context, c Config) (*Result, error) {
	c = c.withDefaults()
	drv := r.Driver
	if drv == nil {
		drv = ExecDriver{}
	}
	res := &Result{ExitCode: -1}
	if err := r.prepare(&c); err != nil {
		return nil, err
	}
	res.Console, res.ReportLog = c.ConsoleLog, c.ReportLog

	accel, warn, err := r.chooseAccel(ctx, drv, c)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		res.Warnings = append(res.Warnings, warn)
		if r.Log != nil && c.Accel == "kvm" {
			fmt.Fprintf(r.Log, "warning: %s\n", warn)
		}
	}
	c.Accel, res.Accel = accel, accel

	args, err := Args(c, c.ConsoleLog, c.ReportLog)
	if err != nil {
		return nil, err
	}
	res.Args = args
	for _, p := range []string{c.ConsoleLog, c.ReportLog} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("qemu: remove old log: %w", err)
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	qemuCtx, stopQEMU := context.WithCancel(runCtx)
	defer stopQEMU()
	stop := r.startProgress()
	var atErr error
	stopWatch := watchUntil(c.Until, c.UntilUp, c.ConsoleLog, c.ReportLog, func() {
		if c.AtUntil != nil {
			atErr = c.AtUntil(runCtx)
		}
		stopQEMU()
	})
	start := time.Now()
	plugged := plugRootLate(qemuCtx, c, stopQEMU)
	code, runErr := drv.Run(qemuCtx, args)
	res.Duration = time.Since(start)
	stop()
	stopWatch()
	stopQEMU()
	var plugErr error
	res.RootPlugged, plugErr = plugged()
	res.ExitCode = code

	console, readErr := os.ReadFile(c.ConsoleLog)
	if readErr != nil && !errors.Is(readErr, os.ErrNotExist) {
		res.Warnings = append(res.Warnings, fmt.Sprintf("read console log: %v", readErr))
	}
	var reportLog []byte
	if c.UntilUp {
		reportLog, _ = os.ReadFile(c.ReportLog)
	}
	res.Status = report.ScanStatus(reportLog)
	if e := until(c.Until, c.UntilUp, console, reportLog); e.matched {
		res.UntilMatched, res.UntilMatch, res.Up = true, e.match, e.up
		if runCtx.Err() == nil {
			runErr = nil // stopped on purpose, or powered off after the match
		}
	}
	res.TimedOut = errors.Is(runErr, context.DeadlineExceeded) && ctx.Err() == nil
	res.Kernel = KernelLines(console)
	res.PanicLine = panicLine(console)
	res.Panicked = res.PanicLine != ""
	r.collectReports(res, console)

	switch {
	case plugErr != nil:
		return res, fmt.Errorf("%w; last console lines:\n%s", plugErr, tail(console, 20))
	case res.TimedOut:
		return res, fmt.Errorf("qemu: boot did not finish within %s (killed); last console lines:\n%s", c.Timeout, tail(console, 20))
	case runErr != nil:
		return res, fmt.Errorf("%w; last console lines:\n%s", runErr, tail(console, 20))
	case res.Panicked:
		return res, fmt.Errorf("qemu: kernel panicked: %s; last console lines:\n%s", res.PanicLine, tail(console, 20))
	case c.UntilUp && !res.UntilMatched && upAwaited(reportLog):
		return res, fmt.Errorf("qemu: the machine stopped before %s reported the system up on the report channel (kpreload-boot-ok.service said it would); last console lines:\n%s", report.UpUnit, tail(console, 20))
	case (c.Until != nil || c.UntilUp) && !res.UntilMatched:
		what := fmt.Sprintf("the console showed %q", c.Until)
		if c.Until == nil {
			what = report.UpUnit + " reported the system up"
		} else if c.UntilUp {
			what += " or " + report.UpUnit + " reported the system up"
		}
		return res, fmt.Errorf("qemu: the machine stopped before %s; last console lines:\n%s", what, tail(console, 20))
	case atErr != nil:
		return res, fmt.Errorf("qemu: while the machine ran: %w", atErr)
	}
	return res, nil
}

// plugRootLate attaches c's root disk through the monitor c.RootLate after
// it is called (Config.RootLate), unless ctx ends first; a plug that fails
// stops QEMU through stop, since the guest would wait for its root until
// the timeout. wait, called once QEMU has exited, returns how long after
// the call the disk was plugged in (0 when it was not) and why it failed.
func plugRootLate(ctx context.Context, c Config, stop func()) (wait func() (time.Duration, error)) {
	if c.RootLate <= 0 {
		return func() (time.Duration, error) { return 0, nil }
	}
	start := time.Now()
	type plug struct {
		at  time.Duration
		err error
	}
	done := make(chan plug, 1)
	go func() {
		t := time.NewTimer(c.RootLate)
		defer t.Stop()
		select {
		case <-ctx.Done():
			done <- plug{}
			return
		case <-t.C:
		}
		cmds, err := RootPlugCommands(c)
		if err == nil {
			var ans []string
			ans, err = Monitor(c.MonitorSocket, cmds...)
			if err == nil && strings.Contains(strings.Join(ans, "\n"), "Error") {
				err = fmt.Errorf("monitor answered %q", ans)
			}
		}
		if err != nil {
			stop()
			done <- plug{err: fmt.Errorf("qemu: plug the root disk in after %s: %w", c.RootLate, err)}
			return
		}
		done <- plug{at: time.Since(start)}
	}()
	return func() (time.Duration, error) {
		p := <-done
		return p.at, p.err
	}
}

// DryRun prepares c as Run does before it starts QEMU (the logs' paths in
// the work directory, the run's copy of the UEFI variable store) and returns
// QEMU's command line (without the binary), starting nothing. The
// accelerator is not probed: "kvm" and "auto" give the KVM command line,
// which Run gives only once its probe has booted under KVM.
func (r *Runner) DryRun(c Config) ([]string, error) {
	c = c.withDefaults()
	if err := r.prepare(&c); err != nil {
		return nil, err
	}
	switch c.Accel {
	case "tcg", "kvm":
	case "auto":
		c.Accel = "kvm"
	default:
		return nil, fmt.Errorf("qemu: accelerator %q: want tcg, kvm or auto", c.Accel)
	}
	return Args(c, c.ConsoleLog, c.ReportLog)
}

// prepare places c's logs (logPaths) and, for a UEFI boot, finds OVMF and
// copies its variable store beside the console log for the run to change.
func (r *Runner) prepare(c *Config) error {
	if err := r.logPaths(c); err != nil {
		return err
	}
	if c.RootLate > 0 && c.MonitorSocket == "" {
		// A Unix socket's path has room for 107 bytes.
		c.MonitorSocket = filepath.Join(filepath.Dir(c.ConsoleLog), "monitor.sock")
		if len(c.MonitorSocket) > 100 {
			dir, err := os.MkdirTemp("", "kpreload-monitor-")
			if err != nil {
				return fmt.Errorf("qemu: monitor socket: %w", err)
			}
			c.MonitorSocket = filepath.Join(dir, "monitor.sock")
		}
	}
	if c.Firmware == FirmwareUEFISecure && c.OVMFCode == "" {
		c.OVMFCode = SecureBootCode
	}
	if c.Firmware == FirmwareUEFI || c.Firmware == FirmwareUEFISecure {
		code, vars, err := FindOVMF(c.OVMFCode, c.OVMFVars)
		if err != nil {
			return err
		}
		c.OVMFCode, c.OVMFVars = code, vars
		c.varsCopy = filepath.Join(filepath.Dir(c.ConsoleLog), "OVMF_VARS.fd")
		if err := fileutil.CopyFile(vars, c.varsCopy, 0o644); err != nil {
			return fmt.Errorf("qemu: copy the UEFI variable store: %w", err)
		}
	}
	return nil
}

// untilEnd is what ended a run, by until.
type untilEnd struct {
	matched bool
	// match is the console text re matched, or the up record's line.
	match string
	// up is the up record, when it was that.
	up *report.Up
}

// until decides whether a run ends, from the console and (with withUp) the
// report channel's log: on kpreload-up.service's up record; else on re's
// match in the console, unless kpreload-boot-ok.service said that record
// will come.
func until(re *regexp.Regexp, withUp bool, console, reportLog []byte) untilEnd {
	if withUp {
		booting, up, line := report.ScanUp(reportLog)
		if up != nil {
			return untilEnd{true, line, up}
		}
		if booting != nil {
			return untilEnd{}
		}
	}
	if re != nil {
		if loc := re.FindIndex(console); loc != nil {
			return untilEnd{matched: true, match: string(console[loc[0]:loc[1]])}
		}
	}
	return untilEnd{}
}

// upAwaited reports whether the report channel's log says an up record
// will come and none has.
func upAwaited(reportLog []byte) bool {
	booting, up, _ := report.ScanUp(reportLog)
	return booting != nil && up == nil
}

// watchUntil checks the console log against re, and with withUp the report
// channel's log for kpreload's up records (until), every untilPoll and
// calls stop once the run ends; the returned function ends the watch. A nil
// re without withUp watches nothing.
func watchUntil(re *regexp.Regexp, withUp bool, consoleLog, reportLog string, stop func()) (end func()) {
	if re == nil && !withUp {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(untilPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// The console first, then the report channel: the booting
				// record is written before sysinit.target, ahead of every
				// console mark, so a mark read here is never taken without
				// the record that holds it back.
				console, _ := os.ReadFile(consoleLog)
				var rep []byte
				if withUp {
					rep, _ = os.ReadFile(reportLog)
				}
				if until(re, withUp, console, rep).matched {
					stop()
					return
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// logPaths fills in the console and report log paths.
func (r *Runner) logPaths(c *Config) error {
	dir := r.WorkDir
	if c.ConsoleLog != "" {
		dir = filepath.Dir(c.ConsoleLog)
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "kpreload-boot-")
		if err != nil {
			return fmt.Errorf("qemu: work directory: %w", err)
		}
		dir = d
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("qemu: work directory: %w", err)
	}
	if c.ConsoleLog == "" {
		c.ConsoleLog = filepath.Join(dir, "console.log")
	}
	if c.ReportLog == "" {
		base := strings.TrimSuffix(c.ConsoleLog, filepath.Ext(c.ConsoleLog))
		c.ReportLog = base + ".report.log"
		if filepath.Base(c.ConsoleLog) == "console.log" {
			c.ReportLog = filepath.Join(dir, "report.log")
		}
	}
	return nil
}

// startProgress calls r.Progress every ProgressEvery until the returned stop is called.
func (r *Runner) startProgress() (stop func()) {
	if r.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		every := r.ProgressInterval
		if every <= 0 {
			every = ProgressEvery
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				r.Progress(time.Since(start))
			}
		}
	}()
	return func() { close(done); <-finished }
}

// collectReports reads the report and root-init lines from the report channel, then
// from the console for whatever the channel lacks.
func (r *Runner) collectReports(res *Result, console []byte) {
	var rep *report.Report
	var raw []byte
	if b, err := os.ReadFile(res.ReportLog); err == nil {
		rep, raw, err = report.Scan(bytes.NewReader(b))
		if err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("report channel %s: %v", res.ReportLog, err))
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		res.Warnings = append(res.Warnings, fmt.Sprintf("read report channel: %v", err))
	}
	if rep == nil || raw == nil {
		crep, craw, err := report.Scan(bytes.NewReader(console))
		if err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("console log: %v", err))
		}
		if rep == nil && crep != nil {
			rep = crep
			res.Warnings = append(res.Warnings, "report read from the console, not the report channel")
		}
		if raw == nil && craw != nil {
			raw = craw
			res.Warnings = append(res.Warnings, "root-init record read from the console, not the report channel")
		}
	}
	res.Report = rep
	if raw != nil {
		ri, err := report.DecodeRootInit(raw)
		if err != nil {
			res.Warnings = append(res.Warnings, err.Error())
		} else {
			res.RootInit = ri
		}
	}
}

// tail returns the last n non-empty lines of a log, indented for error messages.
func tail(log []byte, n int) string {
	lines := strings.Split(strings.ReplaceAll(string(log), "\r", ""), "\n")
	var keep []string
	for i := len(lines) - 1; i >= 0 && len(keep) < n; i-- {
		if strings.TrimSpace(lines[i]) != "" {
			keep = append(keep, lines[i])
		}
	}
	if len(keep) == 0 {
		return "  (console is empty)"
	}
	var b strings.Builder
	for i := len(keep) - 1; i >= 0; i-- {
		line := keep[i]
		if len(line) > 300 {
			line = line[:300] + "..."
		}
		b.WriteString("  " + line)
		if i > 0 {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
