// Package timeline tells the story of one boot from its report and what the
// console and the report channel add to it: the phases (kernel, initramfs,
// userspace), /init's own steps and module loads, the milestones, the
// systemd-analyze style summary line and the driver decision in words. The
// boot picture (report/svg), `kpreload report --blame` and the benchmark's
// picture all read it from here. It is never linked into /init.
package timeline

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kpreload/kpreload/report"
)

// The kinds of a Step: what it is, and so how the picture colours it.
const (
	KindFirmware  = "firmware"  // the machine's firmware, before the boot loader
	KindLoader    = "loader"    // the boot loader, before the kernel
	KindKernel    = "kernel"    // the kernel, from its start to running /init
	KindInitramfs = "initramfs" // the initramfs's /init, up to the real init
	KindUserspace = "userspace" // the real init, up to its target
	KindSetup     = "setup"     // /init's pseudo filesystems, command line and boot index
	KindScan      = "scan"      // a device scan and the kernel modules it asked for
	KindRoot      = "root"      // waiting for the root device and mounting it
	KindDecision  = "decision"  // the driver decision
	KindDrivers   = "drivers"   // the chosen driver sets loading
	KindHandOver  = "handover"  // activation and switch_root
	KindModule    = "module"    // one module load
	KindFailed    = "failed"    // one module refused or failed
)

// Step is one interval of a boot, in seconds since the kernel started
// (firmware and loader steps lie before 0).
type Step struct {
	Kind       string
	Start, End float64
	// Name is what the step is ("kernel", "device scan (initramfs)",
	// "virtio_blk"), Detail what follows it (a module's result, phase and
	// reason; the root's device).
	Name, Detail string
}

// Duration is the step's length in seconds.
func (s Step) Duration() float64 { return s.End - s.Start }

// Mark is one instant of a boot: /init's start, the root mounted, the
// drivers ready, switch_root, systemd's target.
type Mark struct {
	Time  float64
	Label string
}

// Boot is one boot: its report (nil for a boot without kpreload's /init,
// such as Debian's in the benchmark) and the times only the console, the
// report channel or the firmware know; a zero time is unknown.
type Boot struct {
	Name   string
	Report *report.Report
	// Firmware and Loader are the seconds the firmware and the boot loader
	// ran before the kernel started.
	Firmware, Loader float64
	// RunInit is the kernel's "Run /init as init process".
	RunInit float64
	// RealInit is the real init's start after the initramfs (the test
	// root's init, or systemd's first line).
	RealInit float64
	// Up is when the system reached Target (kpreload-up.service's record,
	// or the console line the run waited for).
	Up     float64
	Target string
	// Marks are further milestones (systemd's start, the console's).
	Marks []Mark
}

// initEnd is when the initramfs handed over: the real init's start where
// known, else /init's switch_root.
func (b *Boot) initEnd() float64 {
	if b.RealInit > 0 {
		return b.RealInit
	}
	if b.Report != nil {
		return b.Report.SwitchRoot
	}
	return 0
}

// initStart is when the initramfs's /init began: the kernel running it,
// else /init's Go main.
func (b *Boot) initStart() float64 {
	if b.RunInit > 0 {
		return b.RunInit
	}
	if b.Report != nil {
		return b.Report.InitStart
	}
	return 0
}

// Phases are the boot's bands, in order: firmware and boot loader where
// known, the kernel from 0 to /init, the initramfs up to the real init, and
// userspace up to the target where the run saw it.
func (b *Boot) Phases() []Step {
	var out []Step
	if b.Firmware > 0 {
		out = append(out, Step{Kind: KindFirmware, Name: "firmware", Start: -b.Loader - b.Firmware, End: -b.Loader})
	}
	if b.Loader > 0 {
		out = append(out, Step{Kind: KindLoader, Name: "boot loader", Start: -b.Loader, End: 0})
	}
	start, end := b.initStart(), b.initEnd()
	if start <= 0 {
		return out
	}
	out = append(out, Step{Kind: KindKernel, Name: "kernel", Start: 0, End: start})
	if end <= start {
		return out
	}
	name := "initramfs"
	if b.Report != nil {
		name = "initramfs (kpreload /init)"
	}
	out = append(out, Step{Kind: KindInitramfs, Name: name, Start: start, End: end})
	if b.Up > end {
		name := "userspace"
		if b.Target != "" {
			name += " up to " + b.Target
		}
		out = append(out, Step{Kind: KindUserspace, Name: name, Start: end, End: b.Up})
	}
	return out
}

// Steps are /init's own steps in order (start-up, the device scan, the root
// wait, the driver decision, the driver loads, the hand-over) as far as the
// report's events and times bound them, then each module load in start
// order. A boot without a report has none.
func (b *Boot) Steps() []Step {
	r := b.Report
	if r == nil || r.InitStart <= 0 {
		return nil
	}
	event := func(prefix string) (float64, bool) {
		for _, e := range r.Events {
			if strings.HasPrefix(e.What, prefix) {
				return e.Time, true
			}
		}
		return 0, false
	}
	var out []Step
	add := func(kind, name, detail string, start, end float64) {
		if end > start && start > 0 {
			out = append(out, Step{Kind: kind, Name: name, Detail: detail, Start: start, End: end})
		}
	}
	indexRead, ok := event("boot index read")
	if !ok {
		indexRead, _ = event("initramfs coldplug round")
	}
	add(KindSetup, "/init start-up", "pseudo filesystems, command line, boot index", r.InitStart, indexRead)
	// The initramfs's scan ends with its last round's loads.
	scanEnd := 0.0
	rounds := 0
	for _, e := range r.Events {
		if strings.HasPrefix(e.What, "initramfs coldplug round") {
			scanEnd = max(scanEnd, e.Time)
			rounds++
		}
	}
	for _, m := range r.Modules {
		if (m.Set == "kernel" || m.Set == "") && (r.Root.Mounted == 0 || m.End <= r.Root.Mounted) {
			scanEnd = max(scanEnd, m.End)
		}
	}
	add(KindScan, "device scan (initramfs)", fmt.Sprintf("%d rounds, the kernel's own modules", rounds), indexRead, scanEnd)
	if r.Root.Mounted > 0 {
		add(KindRoot, "root wait and mount", fmt.Sprintf("%s: %s (%s)", r.Root.Spec, r.Root.Device, r.Root.FSType), max(scanEnd, indexRead), r.Root.Mounted)
	}
	handFrom := max(r.Root.Mounted, r.DriversReady)
	if s := r.Selection; s != nil && s.Time > 0 {
		from := r.Root.Mounted
		if s.Time < r.Root.Mounted || from == 0 {
			from = indexRead // decided early, before the root
		}
		add(KindDecision, "driver decision", "request from "+s.Source, from, s.Time)
		if r.DriversReady > s.Time {
			add(KindDrivers, "driver loads", strings.Join(b.chosen(), ", "), s.Time, r.DriversReady)
		}
	}
	if r.SwitchRoot > 0 {
		add(KindHandOver, "activation and switch_root", "", handFrom, r.SwitchRoot)
	}
	notes := r.ModuleNotes()
	var mods []Step
	for i, m := range r.Modules {
		detail := m.Result
		if len(notes[i]) > 0 {
			detail += "; " + strings.Join(notes[i], "; ")
		}
		kind := KindModule
		if m.Result == "refused" || m.Result == "failed" {
			kind = KindFailed
		}
		mods = append(mods, Step{Kind: kind, Name: m.Name, Detail: detail, Start: m.Start, End: max(m.End, m.Start)})
	}
	sort.SliceStable(mods, func(i, j int) bool { return mods[i].Start < mods[j].Start })
	return append(out, mods...)
}

// chosen names the driver sets the decision chose ("kpreload-edu 1.0.0").
func (b *Boot) chosen() []string {
	var out []string
	for _, d := range b.Report.Selection.Drivers {
		if d.Chosen != nil {
			out = append(out, d.Driver+" "+d.Chosen.Version)
		}
	}
	return out
}

// Milestones are the boot's instants in time order: kernel start, the
// kernel running /init, /init's main, the root mounted, the drivers ready,
// switch_root, the real init, the target, and Marks.
func (b *Boot) Milestones() []Mark {
	out := []Mark{{0, "kernel start"}}
	if b.RunInit > 0 {
		out = append(out, Mark{b.RunInit, "kernel runs /init"})
	}
	if r := b.Report; r != nil {
		if r.InitStart > 0 {
			out = append(out, Mark{r.InitStart, "kpreload /init main"})
		}
		if r.Root.Mounted > 0 {
			out = append(out, Mark{r.Root.Mounted, fmt.Sprintf("root %s (%s) mounted", r.Root.Device, r.Root.FSType)})
		}
		if r.DriversReady > 0 {
			out = append(out, Mark{r.DriversReady, "drivers ready"})
		}
		if r.SwitchRoot > 0 {
			out = append(out, Mark{r.SwitchRoot, "switch_root"})
		}
	}
	if b.RealInit > 0 {
		out = append(out, Mark{b.RealInit, "real init"})
	}
	out = append(out, b.Marks...)
	if b.Up > 0 {
		label := "up"
		if b.Target != "" {
			label = b.Target
		}
		out = append(out, Mark{b.Up, label})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time < out[j].Time })
	return out
}

// Summary is the boot's line in systemd-analyze's words: "Startup finished
// in 2.701s (kernel) + 0.584s (initramfs) + 26.967s (userspace) = 30.252s;
// drivers ready at 3.251s". A boot whose target no record gave ends at the
// hand-over, and says so.
func (b *Boot) Summary() string {
	var parts []string
	total := 0.0
	for _, p := range b.Phases() {
		d := p.Duration()
		total += d
		what := p.Kind
		if p.Kind == KindLoader {
			what = "loader"
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", seconds(d), what))
	}
	if len(parts) == 0 {
		return "Startup: no times recorded"
	}
	s := "Startup finished in " + strings.Join(parts, " + ") + " = " + seconds(total)
	if b.Up <= b.initEnd() {
		s += " (to the real init; target not recorded)"
	}
	if b.Report != nil && b.Report.DriversReady > 0 {
		s += fmt.Sprintf("; drivers ready at %s", seconds(b.Report.DriversReady))
	}
	return s
}

// seconds prints a duration as systemd-analyze does: milliseconds, "2.701s".
func seconds(s float64) string { return fmt.Sprintf("%.3fs", s) }

// Decision says in words which driver sets /init chose and why: where the
// request came from and what it asked, then one line per driver (its
// version, flavour, where it came from and the rule that chose it, or its
// refusal) and one per excluded set with the rule that excluded it. Nil when
// the report holds no decision.
func (b *Boot) Decision() []string {
	if b.Report == nil || b.Report.Selection == nil {
		return nil
	}
	s := b.Report.Selection
	req := "request from " + s.Source
	if s.Origin != "" {
		req += " (" + s.Origin + ")"
	}
	req += ": version " + orDash(s.Request.Version) + ", flavour " + orDash(s.Request.Flavor)
	if s.Request.CUDA != "" {
		req += ", cuda " + s.Request.CUDA
	}
	out := []string{req}
	for _, d := range s.Drivers {
		if d.Chosen == nil {
			out = append(out, fmt.Sprintf("%s: nothing chosen: %s", d.Driver, d.Refusal))
			continue
		}
		c := d.Chosen
		line := fmt.Sprintf("%s %s, flavour %s, from %s: chosen by the rule %s", d.Driver, c.Version, orDash(c.Flavor), c.From, d.Rule)
		if !d.Requested {
			line += " (no request names it)"
		}
		if d.Fallback != "" {
			line += "; " + d.Fallback
		}
		switch {
		case d.Active:
			line += "; loaded, active"
		case d.Loaded:
			line += "; loaded"
		default:
			line += "; not loaded"
		}
		out = append(out, line)
		for _, x := range d.Candidates {
			if x.Excluded == "" {
				continue
			}
			out = append(out, fmt.Sprintf("  %s %s, flavour %s, from %s: excluded (%s): %s", d.Driver, x.Version, orDash(x.Flavor), x.From, x.Excluded, x.Reason))
		}
	}
	for _, w := range s.Warnings {
		out = append(out, "warning: "+w)
	}
	for _, e := range s.Errors {
		out = append(out, "error: "+e)
	}
	return out
}

// orDash is s, or "-" when it is empty (a value the report left out).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Blame is every phase and step of the boot, longest first, as
// systemd-analyze blame lists units; steps of equal length keep their order.
func (b *Boot) Blame() []Step {
	out := append(b.Phases(), b.Steps()...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Duration() > out[j].Duration() })
	return out
}
