package pid1

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kpreload/kpreload/initramfs/modprobe"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/modname"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/report"
)

// ModprobeTimeout bounds one module request of the kernel served by the
// helper: the kernel waits for the helper, and the process that made the
// request (/init itself, in the middle of mounting the root) waits with it.
// At the deadline the helper exits non-zero; a load still inside the kernel
// is left to finish in a process of its own.
const ModprobeTimeout = 10 * time.Second

// modprobeDeadline is ModprobeTimeout; tests shorten it.
var modprobeDeadline = ModprobeTimeout

// KernelRequestPhase labels the report's entries for modules loaded because
// the kernel asked for them (request_module), through the helper.
const KernelRequestPhase = "kernel-request"

// Modprobe serves one module request of the kernel as its usermode helper:
// /sbin/modprobe in the initramfs is a link to /init, which the kernel runs
// as "/sbin/modprobe -q -- NAME" (request_module: "crypto-crc32c", "fs-vfat",
// "nls_cp437"). args are the helper's arguments without argv[0]. NAME is
// resolved as modprobe resolves it (a module of the initramfs's boot index by
// name, else every module with an alias matching it) and loaded with its
// dependencies and soft dependencies by the boot's own loader and settings
// (vermagic, digests, signature enforcement). It writes one line to /dev/kmsg
// and a record (modprobe.WriteRecord) that /init adds to its boot report, and
// returns the exit status: 0 when NAME is loaded or already present, 1 when
// it is not, 2 for arguments the helper does not take. It returns within
// ModprobeTimeout and never panics.
func Modprobe(o Options, args []string) int {
	start := o.Now()
	req, err := modprobe.Parse(args)
	if err != nil {
		kmsg(o, "<4>", "kpreload: "+err.Error())
		return 2
	}
	done := make(chan modprobe.Record, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- modprobe.Record{Request: req.Name, Start: start, End: o.Now(), Outcome: modprobe.Failed, Reason: fmt.Sprintf("the helper crashed: %v", r)}
			}
		}()
		done <- serveRequest(o, req.Name, start)
	}()
	var rec modprobe.Record
	timer := time.NewTimer(modprobeDeadline)
	defer timer.Stop()
	select {
	case rec = <-done:
	case <-timer.C:
		rec = modprobe.Record{Request: req.Name, Start: start, End: o.Now(), Outcome: modprobe.TimedOut,
			Reason: fmt.Sprintf("its loads had not finished after %s", modprobeDeadline)}
	}
	level := "<6>"
	if !rec.OK() && rec.Outcome != modprobe.NotFound {
		level = "<4>"
	}
	kmsg(o, level, rec.Line())
	if err := modprobe.WriteRecord(filepath.Join(o.RunDir, modprobe.RecordDir), rec); err != nil {
		kmsg(o, "<4>", "kpreload: "+err.Error())
	}
	if rec.OK() {
		return 0
	}
	return 1
}

// serveRequest resolves and loads name as Modprobe describes.
func serveRequest(o Options, name string, start float64) modprobe.Record {
	rec := modprobe.Record{Request: name, Start: start}
	finish := func(outcome, reason string) modprobe.Record {
		rec.End, rec.Outcome, rec.Reason = o.Now(), outcome, reason
		return rec
	}
	b := newBoot(o)
	b.console = io.Discard // the line on /dev/kmsg says what happened
	b.release = o.System.Release()
	b.settings()
	dir := filepath.Join(b.initramfsPath("/lib/modules"), b.release)
	idx, err := bootindex.Read(filepath.Join(dir, bootindex.InitramfsName))
	if err != nil {
		return finish(modprobe.Failed, err.Error())
	}
	b.useIndex(idx, dir)
	b.ld.Phase = KernelRequestPhase
	b.ld.Timeout = modprobeDeadline
	if o.IsolateDrivers {
		// Every load in a process of its own under the deadline: a module
		// whose init never returns cannot keep the helper, and with it the
		// kernel's caller, waiting.
		b.ld.Isolate = func(*coldplug.Candidate) bool { return true }
	}
	names := b.index.Lookup(name)
	if len(names) == 0 {
		// Not in the initramfs: served only when a module of that name is
		// there already (built in, or loaded meanwhile).
		norm := modname.Normalize(name)
		for _, m := range b.ld.Load(b.index, []string{norm}) {
			if m.Name == norm && m.Result == "already loaded" {
				rec.Modules = append(rec.Modules, m)
				return finish(modprobe.Present, "")
			}
		}
		return finish(modprobe.NotFound, "no module of the initramfs has that name or an alias matching it")
	}
	rec.Modules = b.ld.Load(b.index, names)
	outcome, reasons := modprobe.Failed, []string(nil)
	for _, m := range rec.Modules {
		if !slices.Contains(names, m.Name) {
			continue
		}
		switch m.Result {
		case "loaded":
			outcome = modprobe.Loaded
		case "already loaded":
			if outcome != modprobe.Loaded {
				outcome = modprobe.Present
			}
		default:
			reasons = append(reasons, m.Name+": "+m.Result+" "+m.Reason)
		}
	}
	if outcome != modprobe.Failed {
		return finish(outcome, "")
	}
	return finish(outcome, strings.Join(reasons, "; "))
}

// kmsg writes one line to the kernel's log (/dev/kmsg under DevDir) at the
// syslog level prefix ("<6>"), cut to modprobe.MaxLine bytes; a log that
// cannot be opened is skipped (the record still tells PID 1).
func kmsg(o Options, level, line string) {
	f, err := os.OpenFile(filepath.Join(o.DevDir, "kmsg"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	defer f.Close()
	s := level + line
	if len(s) > modprobe.MaxLine-1 {
		s = s[:modprobe.MaxLine-4] + "..."
	}
	_, _ = f.Write([]byte(s + "\n")) // one write: one record of the kernel's log
}

// kernelRequests adds the records the helper left (Modprobe) to the report,
// once: the modules it loaded, each with the name the kernel asked for in its
// reason ("requested by the kernel: crypto-crc32c"), and one event per
// request at its time. A record that cannot be read is a warning.
func (b *Boot) kernelRequests() {
	if b.requestsRead {
		return
	}
	b.requestsRead = true
	recs, errs := modprobe.ReadRecords(filepath.Join(b.o.RunDir, modprobe.RecordDir))
	for _, err := range errs {
		b.warnf("%v", err)
	}
	for _, r := range recs {
		for _, m := range r.Modules {
			why := "requested by the kernel: " + r.Request
			if m.Reason != "" {
				why += "; " + m.Reason
			}
			m.Reason = why
			b.rep.Modules = append(b.rep.Modules, m)
		}
		ev := report.Event{Time: r.Start, What: strings.TrimPrefix(r.Line(), "kpreload: ") + " (served by /init as /sbin/modprobe)"}
		at := slices.IndexFunc(b.rep.Events, func(e report.Event) bool { return e.Time > ev.Time })
		if at < 0 {
			at = len(b.rep.Events)
		}
		b.rep.Events = slices.Insert(b.rep.Events, at, ev)
	}
}
