// Package switchcmd is kpreload switch: the driver set the decision chooses
// for a version or branch loaded in place of the running one (gpu/switcher),
// its userspace and CDI spec brought along.
package switchcmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cdicmd"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/plancmd"
	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/gpu/switcher"
	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/report"
)

// switchCommand is kpreload switch: its options, as the flags set them.
type switchCommand struct {
	cacheDir, driver, flavor, kernel string
	sysfs, instFile                  string
	bindTimeout                      time.Duration
	asJSON, dryRun, force            bool
}

// New builds kpreload switch.
func New() *cobra.Command { return (&switchCommand{}).build() }

// build makes the command: its help and its flags.
func (m *switchCommand) build() *cobra.Command {
	cmd := &cobra.Command{
		Use:         "switch VERSION|BRANCH [--cache DIR] [--driver NAME] [--flavor FLAVOR] [--force] [--json] | switch VERSION|BRANCH --dry-run [--sysfs ROOT] [--cache DIR] [--kernel KVER] [--json]",
		Annotations: map[string]string{mistakes.ArgsNote: "the driver version or branch to switch to"},
		Short:       "Change the loaded driver version without rebooting",
		Long: `switch replaces the active driver with another version cached for the running
kernel (the root cache's index/<uname -r>.json), without a reboot:

  1. take the driver decision /init and kpreload plan take, for VERSION read
     as the instance YAML's resources.driver.version reads it (an exact
     version, a branch such as 550 or 2, a prefix such as 535.261, or latest:
     with 1.0 and 2.0 cached, "switch 2" chooses 2.0) and --flavor (default
     auto): vermagic, the CUDA minimum of the instance (--instance, default the
     root's /etc/kpreload/instance.yaml), the driver's supported-GPU list and
     the hardware present; a version /init would refuse is refused with the
     same words (--force switches anyway to the newest set of that version and
     flavour, and the result records the refusal); a version the cache does
     not hold is an error naming what it holds; then find the active driver
     set (/run/kpreload/ready, else the modules loaded);
  2. refuse, changing nothing, if any of its modules is in use: an open device
     file (nvidia-persistenced, a CUDA program, Xorg) or a module outside the set
     that depends on it;
  3. unload its modules in reverse dependency order (nvidia_drm, nvidia_modeset,
     nvidia_uvm, nvidia), computed from the set's dependencies;
  4. load the same modules from the requested set with kpreload's loader
     (vermagic and digest checked before finit_module);
  5. check every device the old driver had is bound again and that the modules
     report the requested version;
  6. make the device nodes, point /run/kpreload/driver at
     /opt/kpreload/drivers/VERSION, run ldconfig and rewrite /run/kpreload/ready.

If the new set fails to load or to bind, it is unloaded and the previous set is
loaded back (the exit status is non-zero either way). Steps go to stderr; the
outcome, or with --json the whole record, to stdout. Needs root, and a
machine that booted with kpreload (/init's /run/kpreload/report.json or an
active set's /run/kpreload/ready): elsewhere it says so and changes nothing.
--flavor takes what the instance YAML's flavor takes (open, proprietary or
auto); anything else is an error before the decision.

--dry-run takes the decision and prints it as kpreload plan does (with --json:
the target driver's decision), changing nothing; with --sysfs (a
sysfs mount, a root holding sys/, or a capture: a pci-sysfs.txt of
"<pci address> <file> <contents>" lines, or a directory holding one), --cache
and --kernel it checks a switch for another machine, as kpreload plan does. The
examples run in a checkout: testdata/ holds two machines' captures and a cache
bundle of real 535 and 550 sets. On the
machine itself, stop what holds the driver first (systemctl stop
kpreload-persistenced), then run kpreload switch with the version or branch.`,
		Example: `  kpreload switch 535 --dry-run --sysfs testdata/h100-gpu-vm/pci-sysfs.txt --cache testdata/plan-bundle --kernel 6.1.0-56-cloud-amd64
  kpreload switch 550 --flavor open --dry-run --sysfs testdata/h200-gpu-vm --cache testdata/plan-bundle --kernel 6.1.0-56-cloud-amd64 --json`,
		Args: mistakes.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := m.validate(args[0]); err != nil {
				return err
			}
			return m.run(cmd, args[0])
		},
	}
	m.flags(cmd)
	return cmd
}

// flags adds the flags to cmd.
func (m *switchCommand) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&m.cacheDir, "cache", store.DefaultDir, "module cache holding the driver sets")
	f.StringVar(&m.driver, "driver", "", "driver name, when several cached drivers have VERSION")
	f.StringVar(&m.flavor, "flavor", "", "flavour (open, proprietary or auto), when VERSION is cached in several")
	f.DurationVar(&m.bindTimeout, "bind-timeout", 10*time.Second, "how long to wait for devices to be bound again")
	f.BoolVar(&m.asJSON, "json", false, "print the outcome as JSON")
	f.StringVar(&m.kernel, "kernel", "", "kernel release to take the sets of (default: the running kernel)")
	f.BoolVar(&m.dryRun, "dry-run", false, "take and print the decision, change nothing")
	f.BoolVar(&m.force, "force", false, "switch even when the decision refuses VERSION (recorded in the result)")
	f.StringVar(&m.sysfs, "sysfs", "", "with --dry-run: the PCI devices of another machine (a sysfs mount, a root holding sys/, a capture file or directory)")
	f.StringVar(&m.instFile, "instance", "", "instance YAML whose CUDA minimum the switch keeps (default: /etc/kpreload/instance.yaml when it exists)")
}

// validate checks the flags and the version asked for, takes the running
// kernel's release when --kernel is not given, and on this machine checks
// that it booted with kpreload.
func (m *switchCommand) validate(version string) error {
	if err := mistakes.CheckNames("VERSION", version, "--driver", m.driver, "--flavor", m.flavor, "--kernel", m.kernel); err != nil || version == "" {
		return fmt.Errorf("switch: %w", errors.Join(err, names.Check("VERSION", version)))
	}
	if m.flavor != "" {
		if err := instance.CheckFlavor(m.flavor); err != nil {
			return fmt.Errorf("switch: --flavor: %w", err)
		}
	}
	if m.sysfs != "" && !m.dryRun {
		return errors.New("switch: --sysfs reads another machine's devices: only with --dry-run")
	}
	if m.kernel == "" {
		var err error
		if m.kernel, err = (switcher.System{}).Release(); err != nil {
			return fmt.Errorf("switch: %w", err)
		}
	}
	if !m.dryRun {
		return checkKpreloadMachine(switchRunDir)
	}
	return nil
}

// run takes the decision for version and switches, or with --dry-run
// prints the decision.
func (m *switchCommand) run(cmd *cobra.Command, version string) error {
	sysDir, procDir, runDir := "/sys", "/proc", switchRunDir
	if m.sysfs != "" {
		sysDir, procDir, runDir = m.sysfs, "", "" // a capture: no readiness record of this host
	}
	req, err := switchRequest(m.instFile, m.sysfs == "")
	if err != nil {
		return err
	}
	mach, err := selection.Gather(selection.Where{SysDir: sysDir, ProcDir: procDir, CacheDir: m.cacheDir, Kernel: m.kernel})
	if err != nil {
		return fmt.Errorf("switch: %w", err)
	}
	choice, err := mach.Choose(req, selection.Target{Version: version, Driver: m.driver, Flavor: m.flavor, Force: m.force})
	if err != nil {
		return m.refused(cmd.OutOrStdout(), choice, err)
	}
	// The steps go to stderr as they happen; a dry run has none (its
	// outcome, on stdout, is the whole story).
	var log io.Writer = cmdout.Prefixed(cmd.ErrOrStderr(), "kpreload switch: ")
	if m.dryRun {
		log = nil
	}
	sys := switcher.NewSystem(m.kernel, "/sys")
	res, err := switcher.Switch(switcher.Options{
		Machine: mach, Choice: choice,
		SysDir: sysDir, ProcDir: "/proc", DevDir: "/dev", RunDir: runDir, Root: "/",
		DryRun:      m.dryRun,
		DriversDir:  activate.DriversDir,
		Kernel:      sys,
		BindTimeout: m.bindTimeout,
		Ldconfig:    sys.Ldconfig,
		Log:         log,
	})
	if m.dryRun {
		return printSwitchDecision(cmd.OutOrStdout(), res, choice.Decision, err, m.asJSON)
	}
	switchCDI(cmd.ErrOrStderr(), res)
	if m.asJSON {
		if jerr := cmdout.PrintJSON(cmd.OutOrStdout(), res); jerr != nil {
			return jerr
		}
		return err
	}
	if err != nil {
		return err
	}
	printSwitchOutcome(cmd.OutOrStdout(), res)
	return nil
}

// refused is the end of a switch the decision refused: err. The text form
// says it once, on stderr; the --json record carries the driver's decision
// only when it is the refusal itself (it chose nothing), never a plan that
// would load another version.
func (m *switchCommand) refused(w io.Writer, choice *selection.Choice, err error) error {
	if !m.asJSON {
		return err
	}
	res := &switcher.Result{DryRun: m.dryRun}
	if choice != nil && choice.Driver != nil && choice.Driver.Chosen == nil {
		res.Decision = choice.Driver
	}
	if jerr := cmdout.PrintJSON(w, res); jerr != nil {
		return jerr
	}
	return err
}

// switchCDI makes the CDI spec follow the driver now active (the new one,
// the old one after a rollback, or none: then the spec is removed). Its
// warnings are told once, as the switcher's are: on stderr (w) as they
// happen, and in res, the --json record.
func switchCDI(w io.Writer, res *switcher.Result) {
	cres, cerr := cdicmd.Refresh("/", "", cdispec.Options{})
	var cdiWarnings []string
	if cres != nil {
		for _, w := range cres.Warnings {
			cdiWarnings = append(cdiWarnings, "cdi: "+w)
		}
	}
	if cerr != nil {
		cdiWarnings = append(cdiWarnings, cerr.Error())
	}
	for _, warn := range cdiWarnings {
		fmt.Fprintf(w, "kpreload switch: warning: %s\n", warn)
	}
	if res != nil {
		res.Warnings = append(res.Warnings, cdiWarnings...)
	}
}

// printSwitchOutcome prints what a switch did.
func printSwitchOutcome(out io.Writer, res *switcher.Result) {
	switch {
	case res.Unchanged:
		fmt.Fprintf(out, "%s %s is already active\n", res.To.Driver, res.To.Version)
	case res.From == nil:
		fmt.Fprintf(out, "%s %s loaded in %.2fs\n", res.To.Driver, res.To.Version, res.Seconds)
	default:
		fmt.Fprintf(out, "%s %s -> %s in %.2fs\n", res.To.Driver, res.From.Version, res.To.Version, res.Seconds)
	}
	for _, b := range res.Bound {
		fmt.Fprintf(out, "  %s bound to %s\n", b.Device, b.Driver)
	}
}

// switchRunDir is where switch finds the boot report and the readiness record
// /init left (activate.RunDir; a test's own directory in the tests).
var switchRunDir = activate.RunDir

// checkKpreloadMachine fails, saying what to run, when the machine did not
// boot with kpreload: runDir holds neither /init's boot report nor a
// readiness record of an active driver set, so there is nothing to switch.
func checkKpreloadMachine(runDir string) error {
	rep := filepath.Join(runDir, "kpreload", filepath.Base(report.Path))
	ready := activate.ReadyPath(runDir)
	for _, p := range []string{rep, ready} {
		if _, err := os.Lstat(p); err == nil {
			return nil
		}
	}
	return fmt.Errorf("switch: this machine did not boot with kpreload (no boot report at %s, no active driver set at %s): run kpreload install and reboot, or boot an image kpreload made; kpreload switch --dry-run takes the decision anywhere", rep, ready)
}

// switchRequest is the request whose rules besides version and flavour a
// switch keeps: the instance file given, else the image's own when it exists
// (on this machine only).
func switchRequest(file string, local bool) (instance.Request, error) {
	if file == "" && local {
		if _, err := os.Stat("/" + instance.ImagePath); err == nil {
			file = "/" + instance.ImagePath
		}
	}
	if file == "" {
		return instance.Request{}, nil
	}
	in, err := instance.ReadFile(file)
	if err != nil {
		return instance.Request{}, fmt.Errorf("switch: %w", err)
	}
	return instance.Request{Source: "file", Origin: file, Instance: *in}, nil
}

// printSwitchDecision prints a dry run: what would change, then the whole
// decision as kpreload plan prints it.
func printSwitchDecision(w io.Writer, res *switcher.Result, dec *selection.Decision, err error, asJSON bool) error {
	if asJSON && res != nil {
		if jerr := cmdout.PrintJSON(w, res); jerr != nil {
			return jerr
		}
		return err
	}
	if err != nil {
		return err
	}
	d := res.Decision
	fmt.Fprintf(w, "%s: %s %s would be loaded (%s), %s (dry run: nothing changed)\n", d.Driver, d.Chosen.Version, d.Chosen.Flavor, d.Rule, fromText(res))
	if res.Forced != "" {
		fmt.Fprintf(w, "forced past the decision: %s\n", res.Forced)
	}
	fmt.Fprintln(w, "\nthe decision, as kpreload plan takes it:")
	plancmd.PrintPlan(w, dec) // its candidate table is the only one
	return nil
}

// fromText says what a dry run would replace.
func fromText(res *switcher.Result) string {
	switch {
	case res.Unchanged:
		return "already active"
	case res.From == nil:
		return "no driver active now"
	}
	return "replacing " + res.From.Version
}
