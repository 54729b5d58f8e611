// Package bootcmd is kpreload boot: a kernel and initramfs, or a disk image,
// booted in QEMU, the boot's report read back and summed up (its timeline, the
// modules /init loaded, the driver selection).
package bootcmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/internal/termtext"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/report/svg"
	"github.com/kpreload/kpreload/report/timeline"
)

// JSON is what `kpreload boot --json` prints.
type JSON struct {
	Report      *report.Report    `json:"report"`
	RootInit    *report.RootInit  `json:"rootinit"`
	Console     string            `json:"console"`
	ReportLog   string            `json:"report_log"`
	WallSeconds float64           `json:"wall_seconds"`
	Accel       string            `json:"accel"`
	Panicked    bool              `json:"panicked"`
	TimedOut    bool              `json:"timed_out"`
	ExitCode    int               `json:"exit_code"`
	Kernel      []qemu.KernelLine `json:"kernel_lines"`
	// UntilMatch is the console text --until matched, or with --image's
	// default the up record's line on the report channel; Up says which
	// mark of an image being up it is (qemu.Result.EndedBy).
	UntilMatch string `json:"until_match,omitempty"`
	Up         string `json:"up,omitempty"`
	// UpRecord is kpreload-up.service's record that ended the run, nil
	// when none did: when the system was up, and to which target.
	UpRecord *report.Up `json:"up_record,omitempty"`
	// Status is the machine's own `kpreload status --json`, written by
	// kpreload-up.service on the report channel before its record.
	Status   json.RawMessage `json:"status,omitempty"`
	Warnings []string        `json:"warnings,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// bootCommand is kpreload boot: its options, as the flags set them.
type bootCommand struct {
	c        qemu.Config
	fwCfg    []string
	instFile string
	workDir  string
	asJSON   bool
	image    string
	until    string
	firmware string
	vars     string
	persist  bool
	svgFile  string
	dryRun   bool
}

// New builds kpreload boot.
func New() *cobra.Command { return (&bootCommand{}).build() }

// build makes the command: its help and its flags.
func (m *bootCommand) build() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "boot (--kernel FILE [--initramfs FILE] [--root-disk FILE] | --image DISK)",
		Short: "Boot a kernel, initramfs and root disk in QEMU and show kpreload's boot report",
		Long: `Boot a kernel with an initramfs and a root disk in QEMU (TCG by default), wait
for the guest to power off, and read back kpreload's boot report and the test root
filesystem's record (see "kpreload rootdisk") from a second serial port, the clean
report channel (kpreload.report=/dev/ttyS1), falling back to the console.

The kernel command line starts with "console=ttyS0 panic=-1 kpreload.report=/dev/ttyS1"
and root=<disk on --root-bus> unless --append sets root=. A kernel panic ends the run
at once. The command fails when kpreload's /init did not run, saying what ran
instead (Debian's initramfs, no initramfs, ...).

--instance FILE hands an instance YAML (resources.driver.version/cuda/flavor) to
kpreload's /init through QEMU fw_cfg (opt/kpreload/instance.yaml); /init reads it
after coldplug has loaded qemu_fw_cfg, unless the kernel command line
(kpreload.driver=, kpreload.flavor=, kpreload.instance=) already asks.

--image DISK boots a disk image made by "kpreload image build" or Packer (raw or
qcow2) the way a cloud VM does: UEFI firmware (OVMF) and the disk's own
bootloader, kernel command line from its boot entry; /init learns the report
channel through fw_cfg (opt/kpreload/report) when that command line names none,
and where it cannot read fw_cfg only its summary comes back, from the console.
--firmware bios boots it through SeaBIOS and the boot code in its MBR instead
(images built with --bootloader grub boot either way). --firmware uefi-secure
boots with UEFI Secure Boot on (OVMF's Secure Boot build, Microsoft's keys);
--vars FILE gives the variable store, such as the <name>.ovmf-vars.fd of an image
built with --secure-boot, which also holds the image's module key as a MOK.
A real systemd guest does not power off: the run ends when the console matches
--until, by default when the image is up. An image with kpreload's units says
so itself: kpreload-up.service, once systemd has reached the default target,
writes a "kpreload-up: " record naming it on the report channel /init used, and
the run ends there (kpreload-boot-ok.service, early in the boot, announces that
record on the same channel, so the console no longer ends the run). Other
images end on the console, whoever owns it: systemd reaching multi-user.target
or graphical.target, systemd reaching getty.target, or a getty's login prompt
(once a serial getty owns the console, systemd stops printing unit status
there). The summary, and "up" in --json, say which ended the run.
QEMU boots a copy-on-write overlay, so the image itself is never changed;
--persist boots the image itself, keeping what the guest writes (to boot, change
and boot the same disk again). --drive FILE attaches another disk on virtio,
read-only (a seed, a package to install).

--icount N (with --cpus 1) drives the guest's clock by its instruction count
instead of the host's: timings no longer move with the host's load, which makes
two builds of /init comparable in a few boots (scripts/ab-init.sh). They are not
real time: under plain TCG a guest's first run of new code costs far more.

--dry-run checks the files named and prints the QEMU command line the boot
would run (its logs in the work directory, with the run's copy of the UEFI
variable store), starting nothing; --accel kvm or auto shows KVM's, which the
boot uses only once a probe has booted under KVM. Each example below boots
without --dry-run.`,
		Example: `  kpreload boot --kernel vmlinuz --initramfs initrd.img --root-disk root.img --device edu --dry-run
  kpreload boot --kernel vmlinuz --initramfs initrd.img --root-disk root.img --device edu --instance instance.yaml --work-dir logs --dry-run
  kpreload boot --image out/ci-testdriver.qcow2 --device edu --instance images/instance-testdriver.yaml --dry-run`,
		Args: mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := m.validate(cmd.Flags().Changed("firmware")); err != nil {
				return err
			}
			return m.run(cmd)
		},
	}
	m.flags(cmd)
	return cmd
}

// flags adds the flags to cmd.
func (m *bootCommand) flags(cmd *cobra.Command) {
	c := &m.c
	f := cmd.Flags()
	f.StringVar(&c.Kernel, "kernel", "", "kernel image (vmlinuz) to boot")
	f.StringVar(&c.Initramfs, "initramfs", "", "initramfs image")
	f.StringVar(&c.RootDisk, "root-disk", "", "root disk image (raw, or .qcow2)")
	f.StringVar(&c.RootBus, "root-bus", qemu.DefaultRootBus, "how the root disk is attached: virtio, nvme or scsi")
	f.StringArrayVar(&c.Devices, "device", nil, "extra QEMU -device argument, e.g. edu (repeatable)")
	f.StringVar(&c.Accel, "accel", qemu.DefaultAccel, "accelerator: tcg, kvm (probed, falls back to tcg) or auto")
	f.DurationVar(&c.Timeout, "timeout", qemu.DefaultTimeout, "give up and kill QEMU after this long")
	f.IntVar(&c.Memory, "memory", qemu.DefaultMemory, "guest memory in MiB")
	f.IntVar(&c.CPUs, "cpus", qemu.DefaultCPUs, "virtual CPUs")
	f.IntVar(&c.ICount, "icount", 0, "N > 0: TCG with a virtual clock of 2^N ns per guest instruction, idle time skipped (-icount shift=N,sleep=off), so timings do not move with the host's load; needs --cpus 1. For A/B comparisons (scripts/ab-init.sh)")
	f.StringVar(&c.Append, "append", "", "extra kernel command line parameters")
	f.StringVar(&c.ConsoleLog, "console", "", "write the console log here (default: in the work directory)")
	f.StringArrayVar(&m.fwCfg, "fw-cfg", nil, "pass a file through QEMU fw_cfg as opt/NAME, NAME=FILE (repeatable)")
	f.StringVar(&m.instFile, "instance", "", "instance YAML (driver version, cuda, flavour) for /init, passed through fw_cfg as "+instance.FwCfgName)
	f.StringVar(&m.image, "image", "", "disk image to boot through its firmware and its own bootloader (raw or qcow2)")
	f.StringVar(&m.firmware, "firmware", qemu.FirmwareUEFI, "with --image: uefi (OVMF), uefi-secure (OVMF with Secure Boot on: q35, SMM, secure pflash) or bios (SeaBIOS)")
	f.StringVar(&m.vars, "vars", "", "with --firmware uefi or uefi-secure: the UEFI variable store to boot with (a copy is used), such as the <name>.ovmf-vars.fd that image build --secure-boot writes (the module key enrolled as a MOK); default for uefi-secure: OVMF_VARS_4M.ms.fd, Microsoft's keys only")
	f.BoolVar(&m.persist, "persist", false, "with --image: boot the image itself, keeping what the guest writes (default: a throwaway overlay)")
	f.StringArrayVar(&c.Drives, "drive", nil, "attach this disk image (raw or .qcow2) on virtio, read-only, after the root disk (repeatable)")
	f.StringVar(&m.svgFile, "svg", "", "draw the boot into this SVG file: the summary line, the driver decision, the phases from the kernel's start to the target, /init's steps and module loads, a legend")
	f.StringVar(&m.until, "until", "", "end the run when the console matches this regular expression (default with --image: the image is up: kpreload-up.service's record on the report channel, else systemd's default target, getty.target or a login prompt on the console)")
	f.StringVar(&m.workDir, "work-dir", "", "directory for the logs (default: a new temporary directory)")
	f.BoolVar(&m.asJSON, "json", false, "print the report, root-init record and timings as JSON")
	f.BoolVar(&m.dryRun, "dry-run", false, "print the QEMU command line the boot would run and exit, starting nothing (with --json: {\"command\": [...]})")
}

// validate checks the flags together and fills in the boot's
// configuration: an image's firmware, what to end on, the fw_cfg files.
// firmwareSet says --firmware was given.
func (m *bootCommand) validate(firmwareSet bool) error {
	c := &m.c
	if m.until != "" {
		re, err := regexp.Compile(m.until)
		if err != nil {
			return fmt.Errorf("--until: %w", err)
		}
		c.Until = re
	}
	if err := m.validateImage(firmwareSet); err != nil {
		return err
	}
	c.FwCfg = map[string]string{}
	for _, kv := range m.fwCfg {
		name, file, ok := strings.Cut(kv, "=")
		if !ok || name == "" || file == "" {
			return fmt.Errorf("--fw-cfg %q: want NAME=FILE", kv)
		}
		c.FwCfg[name] = file
	}
	if m.instFile != "" {
		// Refuse a bad instance here, with its line numbers, rather than
		// have /init skip it at boot.
		if _, err := instance.ReadFile(m.instFile); err != nil {
			return fmt.Errorf("--instance: %w", err)
		}
		abs, err := filepath.Abs(m.instFile)
		if err != nil {
			return fmt.Errorf("--instance: %w", err)
		}
		c.FwCfg[instance.FwCfgName] = abs
	}
	return nil
}

// validateImage checks --image against the direct boot's flags and sets
// the image's boot (qemu.Config.ForImage).
func (m *bootCommand) validateImage(firmwareSet bool) error {
	c := &m.c
	switch {
	case m.image == "" && c.Kernel == "":
		return errors.New("--kernel (or --image) is required")
	case m.image == "" && (m.persist || firmwareSet || m.vars != ""):
		return errors.New("--persist, --firmware and --vars go with --image")
	case m.image == "":
		return nil
	case c.Kernel != "" || c.Initramfs != "" || c.RootDisk != "" || c.Append != "":
		return errors.New("--image boots the disk's own bootloader: it excludes --kernel, --initramfs, --root-disk and --append")
	}
	if _, err := os.Stat(m.image); err != nil {
		return fmt.Errorf("--image: %w", err)
	}
	if m.vars != "" {
		if _, err := os.Stat(m.vars); err != nil {
			return fmt.Errorf("--vars: %w", err)
		}
	}
	if err := c.ForImage(m.image, m.firmware, m.vars, m.persist); err != nil {
		return fmt.Errorf("--image: %w", err)
	}
	return nil
}

// run boots and prints what came back, or with --dry-run prints the
// QEMU command line.
func (m *bootCommand) run(cmd *cobra.Command) error {
	stderr := cmd.ErrOrStderr()
	r := &qemu.Runner{WorkDir: m.workDir, Log: stderr}
	if m.dryRun {
		return printBootCommand(cmd.OutOrStdout(), r, m.c, m.asJSON)
	}
	clear := bootProgress(r, stderr)
	res, runErr := r.Run(cmd.Context(), m.c)
	clear()
	if res == nil {
		return fmt.Errorf("boot: %w", runErr)
	}
	bootErr := runErr
	if bootErr == nil && res.Report == nil {
		var summary string
		if summary, bootErr = qemu.NoReport(res); bootErr == nil {
			res.Warnings = append(res.Warnings, "only /init's summary came back, from the console (the report line reached no channel): "+summary)
		}
	}
	if m.asJSON {
		if err := cmdout.PrintJSON(cmd.OutOrStdout(), newBootJSON(res, bootErr)); err != nil {
			return err
		}
	} else {
		printBootSummary(cmd.OutOrStdout(), res)
	}
	if m.svgFile != "" && res.Report != nil {
		if err := writeBootSVG(m.svgFile, res); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "timeline picture: %s\n", m.svgFile)
	}
	if bootErr != nil {
		return fmt.Errorf("boot: %w", bootErr)
	}
	return nil
}

// newBootJSON is the --json record of a boot that ended with err.
func newBootJSON(res *qemu.Result, err error) JSON {
	out := JSON{Report: res.Report, RootInit: res.RootInit, Console: res.Console, ReportLog: res.ReportLog,
		WallSeconds: res.Duration.Seconds(), Accel: res.Accel, Panicked: res.Panicked, TimedOut: res.TimedOut,
		ExitCode: res.ExitCode, Kernel: res.Kernel, Status: res.Status, Warnings: res.Warnings}
	if res.UntilMatched {
		out.UntilMatch, out.Up, out.UpRecord = res.UntilMatch, res.EndedBy(), res.Up
	}
	if err != nil {
		out.Error = err.Error()
	}
	return out
}

// printBootCommand is boot --dry-run: it checks that the files c names are
// there and prints the QEMU command line r would run for c, shell-quoted
// (asJSON: as a JSON list), starting nothing.
func printBootCommand(w io.Writer, r *qemu.Runner, c qemu.Config, asJSON bool) error {
	for _, f := range append([]string{c.Kernel, c.Initramfs, c.RootDisk}, c.Drives...) {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("boot: %w", err)
		}
	}
	args, err := r.DryRun(c)
	if err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	argv := append([]string{qemu.DefaultBinary}, args...)
	if asJSON {
		return cmdout.PrintJSON(w, struct {
			Command []string `json:"command"`
		}{argv})
	}
	for i, a := range argv {
		argv[i] = shellWord(a)
	}
	_, err = fmt.Fprintln(w, strings.Join(argv, " "))
	return err
}

// plainWord is what a POSIX shell word may hold unquoted.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellWord quotes s for a POSIX shell where it needs it.
func shellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// bootProgress makes r report elapsed time on w while QEMU runs: a spinner line redrawn in
// place on a terminal, a plain line every 5 s otherwise. It returns a function that
// clears the spinner line.
func bootProgress(r *qemu.Runner, w io.Writer) (clear func()) {
	if !cmdout.IsTerminal(w) {
		r.Progress = func(d time.Duration) { fmt.Fprintf(w, "booting... %ds\n", int(d.Round(time.Second)/time.Second)) }
		return func() {}
	}
	frames := []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
	n := 0
	r.ProgressInterval = 200 * time.Millisecond
	r.Progress = func(d time.Duration) {
		fmt.Fprintf(w, "\r\033[K%c booting... %.0fs", frames[n%len(frames)], d.Seconds())
		n++
	}
	return func() { fmt.Fprint(w, "\r\033[K") }
}

// printBootSummary writes the human summary of a boot.
func printBootSummary(w io.Writer, res *qemu.Result) {
	kernel := ""
	if l, ok := qemu.Find(res.Kernel, "Linux version "); ok {
		if f := strings.Fields(strings.TrimPrefix(l.Text, "Linux version ")); len(f) > 0 {
			kernel = f[0] + " "
		}
	}
	ending := "powered off"
	switch {
	case res.Up != nil:
		ending = "stopped when " + res.Up.Describe() + " on the report channel"
	case res.UntilMatched:
		ending = fmt.Sprintf("stopped when the console showed %q", res.UntilMatch)
		if what := qemu.WhatUp(res.UntilMatch); what != "" {
			ending += " (" + what + ")"
		}
	case res.TimedOut:
		ending = "timed out"
	case res.Panicked:
		ending = "kernel panicked"
	case res.ExitCode != 0:
		ending = fmt.Sprintf("QEMU exit status %d", res.ExitCode)
	}
	fmt.Fprintf(w, "booted %sunder %s: %s after %.1fs (wall)\n", kernel, res.Accel, ending, res.Duration.Seconds())
	if l, ok := qemu.Find(res.Kernel, "Run /init as init process"); ok {
		fmt.Fprintf(w, "  /init started at %.3f s after kernel start\n", l.Time)
	}
	if rep := res.Report; rep != nil {
		fmt.Fprintf(w, "  drivers ready at %.3f s after kernel start\n", rep.DriversReady)
		if rep.Root.Error != "" {
			fmt.Fprintf(w, "  root %s: %s\n", rep.Root.Spec, rep.Root.Error)
		} else {
			fmt.Fprintf(w, "  root %s (%s) mounted at %.3f s\n", rep.Root.Device, rep.Root.FSType, rep.Root.Mounted)
		}
		fmt.Fprintf(w, "  switch_root at %.3f s\n", rep.SwitchRoot)
	}
	if ri := res.RootInit; ri != nil {
		dev := ri.Root.Device
		if ri.Root.BlockDevice != "" && ri.Root.BlockDevice != dev {
			dev += " = " + ri.Root.BlockDevice
		}
		fmt.Fprintf(w, "  real init ran at %.3f s (root %s, %s)\n", ri.Start, dev, ri.Root.FSType)
	}
	printSystemdMilestones(w, res)
	if rep := res.Report; rep != nil {
		printSelection(w, rep.Selection)
		PrintModuleTimeline(w, rep)
	}
	if ri := res.RootInit; ri != nil {
		var bound []string
		for _, d := range ri.PCI {
			if d.Driver == "" {
				continue
			}
			s := fmt.Sprintf("%s %s -> %s", d.Address, d.ID(), d.Driver)
			if d.EduID != "" {
				s += " (edu_id " + d.EduID + ")"
			}
			bound = append(bound, s)
		}
		fmt.Fprintf(w, "  devices bound (%d of %d PCI):\n", len(bound), len(ri.PCI))
		for _, b := range bound {
			fmt.Fprintf(w, "    %s\n", b)
		}
		for _, e := range ri.Errors {
			fmt.Fprintf(w, "  root init error: %s\n", e)
		}
	}
	if rep := res.Report; rep != nil {
		fmt.Fprintf(w, "  %s\n", rep.Summary())
		fmt.Fprintf(w, "  %s\n", Timeline(res).Summary())
	}
	for _, warn := range res.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
	fmt.Fprintf(w, "  console: %s\n", res.Console)
}

// printSystemdMilestones writes when an image's systemd started and reached
// the line --until waited for, in kernel time, where the console has them
// with the kernel's timestamps (systemd.log_target=kmsg on the image's
// command line).
func printSystemdMilestones(w io.Writer, res *qemu.Result) {
	if l, ok := qemu.Find(res.Kernel, "running in system mode"); ok {
		fmt.Fprintf(w, "  systemd (/sbin/init) started at %.3f s\n", l.Time)
	}
	if res.Up != nil {
		// systemd's own line for the target, where it logs to the kernel.
		for _, l := range res.Kernel {
			if qemu.UpMarks[0].Pattern.MatchString(l.Text) { // systemd reached its default target
				fmt.Fprintf(w, "  %q at %.3f s\n", strings.TrimPrefix(l.Text, "systemd[1]: "), l.Time)
				break
			}
		}
		fmt.Fprintf(w, "  %s at %.3f s (its uptime)\n", res.Up.Describe(), res.Up.Time)
		return
	}
	if !res.UntilMatched {
		return
	}
	if l, ok := qemu.Find(res.Kernel, res.UntilMatch); ok {
		fmt.Fprintf(w, "  %q at %.3f s\n", res.UntilMatch, l.Time)
	} else {
		fmt.Fprintf(w, "  %q: no kernel timestamp (add systemd.log_target=kmsg to the image's command line)\n", res.UntilMatch)
	}
}

// writeBootSVG draws the boot's story (Timeline) into the SVG file path.
func writeBootSVG(path string, res *qemu.Result) error {
	return svg.WriteFile(path, "kpreload boot of "+res.Report.Kernel, []*timeline.Boot{Timeline(res)})
}

// Timeline is the boot's story: its report and what only the console
// and the report channel know, in kernel time: the kernel running /init,
// the test root's init, systemd starting, and the system up
// (kpreload-up.service's record, or the line --until waited for).
func Timeline(res *qemu.Result) *timeline.Boot {
	b := &timeline.Boot{Name: "kpreload", Report: res.Report}
	if l, ok := qemu.Find(res.Kernel, "Run /init as init process"); ok {
		b.RunInit = l.Time
	}
	if ri := res.RootInit; ri != nil {
		b.RealInit = ri.Start
	}
	if l, ok := qemu.Find(res.Kernel, "running in system mode"); ok {
		b.Marks = append(b.Marks, timeline.Mark{Time: l.Time, Label: "systemd started"})
	}
	if res.Up != nil {
		b.Up, b.Target = res.Up.Time, res.Up.Target+" ("+res.Up.Unit+")"
		if res.Up.Target == "" {
			b.Target = "up (" + res.Up.Unit + ")"
		}
	} else if res.UntilMatched {
		if l, ok := qemu.Find(res.Kernel, res.UntilMatch); ok {
			b.Up, b.Target = l.Time, res.UntilMatch
		}
	}
	return b
}

// PrintModuleTimeline lists every module /init considered, in start order, with
// its times, outcome, phase and the devices that asked for it.
func PrintModuleTimeline(w io.Writer, rep *report.Report) {
	loaded := 0
	for _, m := range rep.Modules {
		if m.Result == "loaded" {
			loaded++
		}
	}
	fmt.Fprintf(w, "  modules (%d loaded, %d considered), seconds after kernel start:\n", loaded, len(rep.Modules))
	notes := rep.ModuleNotes()
	for i, m := range rep.Modules {
		line := fmt.Sprintf("    %7.3f -> %7.3f  %-22s %-14s", m.Start, m.End, termtext.Name(m.Name), termtext.Name(m.Result))
		fmt.Fprintf(w, "%s %s\n", line, termtext.Name(strings.Join(notes[i], "; ")))
	}
}

// printSelection summarises /init's driver selection: where the request came
// from, the version chosen or the refusal for each driver, and the warnings.
func printSelection(w io.Writer, sel *report.Selection) {
	if sel == nil {
		return
	}
	src := sel.Source
	if sel.Origin != "" && sel.Source != "default" {
		src += " (" + sel.Origin + ")"
	}
	name := termtext.Name
	fmt.Fprintf(w, "  driver selection at %.3f s, request from %s: version %s, flavour %s\n", sel.Time, name(src), name(sel.Request.Version), name(sel.Request.Flavor))
	for _, d := range sel.Drivers {
		if d.Chosen == nil {
			fmt.Fprintf(w, "    %s: %s\n", name(d.Driver), name(d.Refusal))
			continue
		}
		state := "not loaded (no device asked for it)"
		if d.Loaded {
			state = "loaded"
		}
		if d.Active {
			state += ", active"
		}
		if d.Userspace != "" {
			state += ", userspace " + name(d.Userspace)
		}
		fmt.Fprintf(w, "    %s: %s %s from %s chosen (%s); %s\n", name(d.Driver), name(d.Chosen.Version), name(d.Chosen.Flavor), name(d.Chosen.From), name(d.Rule), state)
	}
	for _, warn := range sel.Warnings {
		fmt.Fprintf(w, "    warning: %s\n", name(warn))
	}
	for _, e := range sel.Errors {
		fmt.Fprintf(w, "    error: %s\n", name(e))
	}
}
