// Package installcmd is kpreload install, kernel-hook and status: what
// makes a root filesystem boot kpreload (builder/install), install --stage
// into a root or disk image another tool made (builder/adopt), the hooks
// the kernel's packages run, and what a root and a booted machine say.
package installcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/internal/none"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/status"
	"github.com/kpreload/kpreload/initramfs/rootcheck"
	"github.com/kpreload/kpreload/internal/termtext"
)

// installFlags are the flags install and kernel-hook share.
type installFlags struct {
	root, esp, bootloader, cmdline string
	asJSON                         bool
}

func (f *installFlags) add(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.root, "root", "/", "the root filesystem to change (a mounted image, or / for this system)")
	fl.StringVar(&f.esp, "esp", "", "the EFI system partition (default ROOT/boot/efi)")
	fl.StringVar(&f.bootloader, "bootloader", "auto", "grub, systemd-boot or auto (detect)")
	fl.StringVar(&f.cmdline, "cmdline", "", "systemd-boot entries' kernel command line (default ROOT/etc/kpreload/cmdline, else /proc/cmdline); GRUB entries take GRUB_CMDLINE_LINUX and GRUB_CMDLINE_LINUX_DEFAULT from /etc/default/grub instead")
	fl.BoolVar(&f.asJSON, "json", false, "print the result as JSON")
}

func (f *installFlags) options(log io.Writer) (install.Options, error) {
	bl, err := install.ParseBootloader(f.bootloader)
	if err != nil {
		return install.Options{}, err
	}
	return install.Options{Root: f.root, ESP: f.esp, Bootloader: bl, Cmdline: f.cmdline, Log: log, StallAt: cmdenv.HookStall()}, nil
}

func (f *installFlags) print(cmd *cobra.Command, res *install.Result) error {
	if f.asJSON {
		return cmdout.PrintJSON(cmd.OutOrStdout(), res)
	}
	return nil
}

// installCommand is kpreload install: its options, as the flags set
// them.
type installCommand struct {
	f       installFlags
	kernels []string
	def     string
	rootFS  string
	sf      stageFlags
}

// NewInstall builds kpreload install.
func NewInstall() *cobra.Command { return (&installCommand{}).build() }

// build makes the command: its help and its flags.
func (m *installCommand) build() *cobra.Command {
	c := &cobra.Command{
		Use:   "install [--root DIR] [--kernel KVER]...",
		Short: "Make a root filesystem boot kpreload's initramfs (boot loader, kernel hooks)",
		Long: `Make a root that holds kpreload's files (the binary, /init, the module cache:
"kpreload image build" and the Packer provisioner put them there; --stage puts
them into a root or disk image another tool made) boot kpreload. It:

  - finds the root's boot loader: GRUB (grub-mkconfig/update-grub in the root) or
    systemd-boot (loader/ on the EFI system partition), and fails, naming what it
    looked for, when there is neither;
  - writes the kernel hooks (/etc/kernel/postinst.d/zz-kpreload, postrm.d) that
    keep kpreload's initramfs and boot entry up to date through kernel updates,
    and for GRUB /etc/grub.d/09_kpreload, whose entries come before Debian's;
  - builds each kernel's kpreload initramfs into /boot/kpreload from the root's
    own modules and module cache (nothing is compiled), and checks that it can
    mount the root: the filesystem holding --root (its type and the features
    of its superblock, such as ext4's metadata_csum, which needs crc32c) must
    have its module, the modules its features need, and their dependencies
    and soft dependencies in the initramfs or built into the kernel; a root on
    LVM or another device-mapper or md device is refused (/init does not
    assemble them). When the check fails, install says what is missing and
    changes nothing;
  - makes the default boot entry boot kpreload's initramfs of the newest kernel
    whose driver cells the cache holds (the newest kernel when none has them;
    /etc/kpreload/boot.yaml "default: newest" picks the newest kernel always),
    and keeps the distribution's initramfs bootable as its own entry.

It fails when the boot would not use kpreload afterwards. On a root other than
/, the root's own update-grub runs in a sandbox (bubblewrap's bwrap, which must
be installed): the root as /, no network, no capabilities, its own /proc and
/dev with the block device of the root's filesystem when --root is where that
filesystem is mounted (--image mounts it so). A root staged in a directory
whose disk is made later (on tmpfs, overlay) names the filesystem it will boot
from with --root-filesystem, taken as its mkfs makes it by default.

The kernel command line: kpreload's GRUB entries (and the distribution-initramfs
entry it writes as the way back) boot "root=<the root> ro", then
GRUB_CMDLINE_LINUX, then GRUB_CMDLINE_LINUX_DEFAULT from /etc/default/grub, as
Debian's own default entry does (diskimage-builder puts console=ttyS0 in
GRUB_CMDLINE_LINUX_DEFAULT); --cmdline and /etc/kpreload/cmdline are for
systemd-boot entries only. update-grub in a loop-mounted image prints
"grub-probe: error: failed to get canonical path of <the image file>" and
grub-probe's usage once per probe: in the sandbox, grub-probe cannot find the
loop device's backing file, a path of this machine. It is harmless (install
says so after it): grub.cfg is written all the same, and install checks its
default entry afterwards.

--stage first puts kpreload into a root that kpreload never touched (an image
diskimage-builder, vmdb2 or a cloud made), exactly as the Packer provisioner
does on its target: the kpreload binary, /init, the cells of each --recipe for
the root's kernels (from --cache; missing ones pulled from --remote, which
needs --trust KEY.pub or --allow-unsigned, or built with --build-missing), each
driver version's userspace under /opt/kpreload/drivers, firmware, the instance
file and registry configuration when given, and kpreload's systemd units,
enabled (kpreload-boot-ok.service takes GRUB's one-shot fallback back once a
boot comes up, which arms the fallback); everything is written with each path
resolved inside the root. --image FILE does it to a raw disk image: its root
partition (the one Linux partition, or --partition N) is mounted at its offset
through a loop device, with /dev, /proc and /sys bound in, and unmounted after.

Without --root it changes this system: "sudo kpreload install" makes every
installed kernel boot kpreload. The examples change ./image-root, a root staged
in a directory (the first every kernel it holds, the second one kernel, with
its EFI system partition in ./esp), and a raw disk image another tool made.`,
		Example: `  sudo kpreload install --root ./image-root --root-filesystem ext4
  sudo kpreload install --root ./image-root --esp ./esp --kernel 6.1.0-56-cloud-amd64 --root-filesystem ext4 --json
  sudo kpreload install --stage --image debian.raw --recipe testdriver`,
		Args: mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := m.validate(cmd); err != nil {
				return err
			}
			return m.run(cmd)
		},
	}
	m.flags(c)
	return c
}

// flags adds the flags to c.
func (m *installCommand) flags(c *cobra.Command) {
	m.f.add(c)
	m.sf.add(c)
	c.Flags().StringSliceVar(&m.kernels, "kernel", nil, "build the kpreload initramfs of this kernel (repeatable; default: every kernel the root has)")
	c.Flags().StringVar(&m.def, "default", "", "boot this kernel by default (default: the newest with driver cells)")
	c.Flags().StringVar(&m.rootFS, "root-filesystem", "", "the filesystem the root boots from ("+strings.Join(rootcheck.Filesystems, ", ")+", as its mkfs makes it), when it is not the one holding --root now (default: read from that one)")
}

// validate checks the flags, --stage's with them.
func (m *installCommand) validate(cmd *cobra.Command) error {
	errs := []error{mistakes.CheckNames("--default", m.def)}
	for _, k := range m.kernels {
		errs = append(errs, mistakes.CheckNames("--kernel", k))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err := m.sf.check(cmd, m.f.root); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
}

// run stages kpreload into the root first with --stage, then makes the
// root boot it.
func (m *installCommand) run(cmd *cobra.Command) error {
	o, err := m.f.options(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	o.Kernels, o.Default = m.kernels, m.def
	if m.rootFS != "" {
		r, err := rootcheck.Default(m.rootFS)
		if err != nil {
			return fmt.Errorf("install: --root-filesystem: %w", err)
		}
		o.RootFS = &r
	}
	if m.sf.stage {
		return m.sf.run(cmd, m.f, o)
	}
	res, err := install.Install(cmd.Context(), o)
	if err != nil {
		return fmt.Errorf("install into %s: %w", m.f.root, err)
	}
	return m.f.print(cmd, res)
}

// kernelHookCommand is kpreload kernel-hook: its options, as the flags
// set them.
type kernelHookCommand struct {
	f installFlags
}

// NewKernelHook builds kpreload kernel-hook, which the kernel packages' hooks run.
func NewKernelHook() *cobra.Command { return (&kernelHookCommand{}).build() }

// build makes the command: its help and its flags.
func (m *kernelHookCommand) build() *cobra.Command {
	c := &cobra.Command{
		Use:         "kernel-hook postinst|postrm KVER [IMAGE] | grub-entries | boot-ok | up | refresh",
		Annotations: map[string]string{mistakes.ArgsNote: "the hook's event (postinst|postrm KVER [IMAGE], grub-entries, boot-ok, up or refresh)"},
		Short:       "What the kernel packages and grub-mkconfig run (installed by kpreload install)",
		Long: `Debian's kernel packages run /etc/kernel/postinst.d/zz-kpreload and
postrm.d/zz-kpreload after installing or removing a kernel; both hand over to

  kpreload kernel-hook postinst KVER [IMAGE]   build KVER's kpreload initramfs, update the boot loader
  kpreload kernel-hook postrm KVER [IMAGE]     drop KVER's kpreload initramfs, update the boot loader

A kernel whose driver cells the module cache lacks still gets its initramfs and
entry, but the default stays on the newest kernel that has them, and the output
says so (see "kpreload status").

  kpreload kernel-hook grub-entries

prints the GRUB menu entries of the kernels that have a kpreload initramfs. It is
run by /etc/grub.d/09_kpreload inside grub-mkconfig, whose environment
(GRUB_DEVICE_UUID, GRUB_CMDLINE_LINUX, ...) it reads; it never makes
grub-mkconfig fail: a problem is a warning, and the distribution's entries stand.

  kpreload kernel-hook boot-ok

is run by kpreload-boot-ok.service once the real init is up after kpreload's
/init booted the system: it takes back the fallback the boot loader had ready
in case the root could not be mounted (GRUB's one-shot next_entry, when it still
names one of kpreload's entries; systemd-boot's counted entry, marked good where
the root lacks systemd-bless-boot). Where kpreload's /init sent its report on a
report channel (kpreload.report=, or QEMU's fw_cfg: a boot harness such as
"kpreload boot") and kpreload-up.service is enabled, it also writes a
"kpreload-up: " record there saying the system is booting.

  kpreload kernel-hook up

is run by kpreload-up.service once the system has reached its default target:
on that same report channel (the "channel" of /run/kpreload/report.json) it
writes one "kpreload-up: " JSON record, state "up", naming the target (the
command line's systemd.unit=, else what default.target links to), just after
one "kpreload-status: " line, what "kpreload status --json" says of the
machine. "kpreload boot --image" ends its run on the record. With no report or
no channel it writes nothing.

  kpreload kernel-hook refresh

is for a kernel that arrived before its driver cells (the postinst hook then kept
the default on the newest kernel with them): every kernel the module cache has no
driver cell for is tried again against the registry of /etc/kpreload/remote.yaml,
its cells are pulled and verified as the postinst hook pulls them, its kpreload
initramfs is built, and the boot loader's default moves to the newest kernel with
its driver cells, from the next boot on. A cell still missing, or a registry that
cannot be reached, is a warning and changes no default; run it again later (a
timer or cron job may run it).

postinst, postrm, refresh and "kpreload install" run one at a time: each holds
/var/lib/kpreload/kernel-hook.lock (flock, inside --root). refresh and "kpreload
install" wait up to five minutes for another holder, then fail naming the file
and the holder; postinst and postrm wait as long as it takes (saying for whom),
so a kernel package's upgrade never fails over a slow refresh.

On a root "kpreload install" has not made boot kpreload (no /boot/kpreload),
postinst, postrm and grub-entries do nothing and print nothing: the kpreload
package ships the hooks, and installing it changes no boot.

The hooks never fail the kernel package over configuration: a bad or unknown
key in /etc/kpreload/boot.yaml, or an /etc/kpreload/cmdline of more than one
line, is a warning, and the defaults (or the running system's command line)
are used. Every path is resolved inside --root, as in a chroot of it.`,
		Example: `  kpreload kernel-hook refresh`,
		Args:    mistakes.RangeArgs(1, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateHookArgs(args); err != nil {
				return err
			}
			return m.run(cmd, args)
		},
	}
	m.f.add(c)
	return c
}

// validateHookArgs checks the hook's event and its arguments: the kernel
// release of postinst and postrm, nothing more for the others.
func validateHookArgs(args []string) error {
	switch args[0] {
	case "grub-entries", "boot-ok", "up", "refresh":
		if len(args) != 1 {
			return fmt.Errorf("%s takes no arguments", args[0])
		}
		return nil
	}
	if len(args) < 2 {
		return fmt.Errorf("%s needs the kernel release: kernel-hook %s KVER [IMAGE]", args[0], args[0])
	}
	if err := install.CheckRelease(args[1]); err != nil {
		return err
	}
	if args[0] != "postinst" && args[0] != "postrm" {
		return fmt.Errorf("unknown hook %q: postinst, postrm, grub-entries, boot-ok, up or refresh", args[0])
	}
	return nil
}

// run runs the hook of the event args[0].
func (m *kernelHookCommand) run(cmd *cobra.Command, args []string) error {
	f := &m.f
	switch args[0] {
	case "grub-entries":
		// Run inside grub-mkconfig, which must finish with the
		// distribution's entries whatever happens here: a problem
		// is a warning on standard error, and no entry is printed.
		if !install.Installed(f.root) {
			return nil // the packaged hook, before kpreload install: quiet
		}
		env := install.GrubEnvFromEnviron(os.Getenv)
		env.Log = cmd.ErrOrStderr()
		if err := install.GrubEntries(cmd.OutOrStdout(), f.root, env); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "kpreload: WARNING: no kpreload menu entries: %v\n", err)
		}
		return nil
	case "boot-ok":
		_, err := install.BootOK(cmd.Context(), install.BootOKOptions{Root: f.root, ESP: f.esp, Log: cmd.OutOrStdout()})
		return err
	case "up":
		return m.up(cmd.OutOrStdout())
	case "refresh":
		o, err := f.options(cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		res, err := install.Refresh(cmd.Context(), o)
		if err == nil {
			err = hookInterrupted(cmd.Context())
		}
		if err != nil {
			return fmt.Errorf("kernel-hook refresh: %w", err)
		}
		return f.print(cmd, res)
	}
	return m.kernelEvent(cmd, args[0], args[1])
}

// up writes the up record, with the machine's own status before it on
// the channel, so a boot harness can check what it says of itself.
func (m *kernelHookCommand) up(w io.Writer) error {
	root := m.f.root
	what, err := install.ReportUp(install.UpOptions{Root: root, Status: func() ([]byte, error) {
		st, err := status.Read(status.Options{Root: root, Running: true})
		if err != nil {
			return nil, err
		}
		return json.Marshal(st)
	}})
	if err != nil {
		return fmt.Errorf("kernel-hook up: %w", err)
	}
	fmt.Fprintf(w, "kpreload: %s\n", what)
	return nil
}

// kernelEvent runs the postinst or postrm hook (event) of the kernel
// release kver.
func (m *kernelHookCommand) kernelEvent(cmd *cobra.Command, event, kver string) error {
	f := &m.f
	if !install.Installed(f.root) {
		// The kpreload package ships the hooks; until kpreload
		// install has run they change nothing, and say nothing.
		return nil
	}
	o, err := f.options(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	if o.Root == "/" || o.Root == "" {
		// Run by the kernel packages: leave grub.cfg to grub2-common's
		// own hook where it runs next, so it is made once.
		o.GrubRegeneratedBy = install.DistributionGrubHook("/", event, os.Getenv)
	}
	var res *install.Result
	if event == "postinst" {
		res, err = install.KernelAdded(cmd.Context(), o, kver)
	} else {
		res, err = install.KernelRemoved(cmd.Context(), o, kver)
	}
	if err == nil {
		err = hookInterrupted(cmd.Context())
	}
	if err != nil {
		return fmt.Errorf("kernel %s hook for %s: %w", event, kver, err)
	}
	return f.print(cmd, res)
}

// hookInterrupted is an error once ctx is cancelled: a hook that a signal
// reached exits non-zero even when its work got done, so that dpkg sees it
// did not finish and runs it again (it is idempotent).
func hookInterrupted(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("%w by %w after its work was done; run it again", install.ErrInterrupted, context.Cause(ctx))
}

// NewStatus builds kpreload status.
func NewStatus() *cobra.Command {
	var (
		root   string
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "status [--root DIR] [--json]",
		Short: "Explain a kpreload machine: its driver, request, CDI spec, Secure Boot, kernels and problems",
		Long: `Without --root, status reads the running system. On a machine that booted
through kpreload's /init it says:

  driver:      the active driver, version and flavour (/run/kpreload/ready), and who
               activated it (/init, or kpreload switch)
  request:     where the driver request came from (cmdline, fw_cfg, seed, image,
               default, or user-data applied after boot) and what it asked
  cdi:         whether the CDI spec kpreload keeps (/var/run/cdi/kpreload-*.yaml)
               matches the loaded driver
  secure boot: the firmware's Secure Boot, the kernel's lockdown, and whether a kernel
               keyring holds each key the running kernel's driver cells are signed with
  default:     the kernel the boot loader boots by default, and each kernel with its
               driver cells (* marks the default)
  problem:     each problem found, with the command that fixes it ("problems: none")

--root DIR reads another root (a mounted image): its kernels, their driver cells and
the default; the booted machine's lines only where DIR holds a boot report. A root
that does not exist, or that kpreload neither installed into nor booted, is an
error that says what to run. --json prints all of it as one object.`,
		Example: `  kpreload status
  kpreload status --json
  kpreload status --root ./image-root`,
		Args: mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := status.Read(status.Options{Root: root, Running: !cmd.Flags().Changed("root")})
			if err != nil {
				return err
			}
			for _, w := range st.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "kpreload: WARNING: %s\n", termtext.Text(w))
			}
			if asJSON {
				return cmdout.PrintJSON(cmd.OutOrStdout(), st)
			}
			writeStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	c.Flags().StringVar(&root, "root", "/", "the root filesystem to read (default: the running system)")
	c.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return c
}

// writeStatus prints status's text: the booted machine's driver, request,
// CDI spec and Secure Boot (when it booted through kpreload's /init), the
// default kernel and each kernel with what it lacks and its driver cells,
// then the problems. What the root holds is shown escaped (termtext): a
// name in its boot index or report cannot drive the operator's terminal,
// whatever let it through.
func writeStatus(out io.Writer, st *status.Status) {
	w := termtext.NewWriter(out)
	name := termtext.Name
	if st.Booted {
		writeBootedStatus(w, st)
	}
	fmt.Fprintf(w, "default: %s (%s)\n", name(none.Or(st.Default)), name(st.DefaultWhy))
	for _, k := range st.Kernels {
		mark := " "
		if k.Release == st.Default {
			mark = "*"
		}
		var what []string
		if !k.Image {
			what = append(what, "no image")
		}
		if !k.Initramfs {
			what = append(what, "no kpreload initramfs")
		}
		drivers := "no driver cells"
		if len(k.Drivers) > 0 {
			drivers = name(strings.Join(k.Drivers, ", "))
		}
		if k.IndexError != "" {
			drivers += " (" + name(k.IndexError) + ")"
		}
		what = append(what, drivers)
		fmt.Fprintf(w, "%s %s: %s\n", mark, name(k.Release), strings.Join(what, "; "))
	}
	if len(st.Problems) == 0 {
		fmt.Fprintln(w, "problems: none")
	}
	for _, p := range st.Problems {
		fmt.Fprintf(w, "problem: %s; fix: %s\n", name(p.What), name(p.Fix))
	}
}

// writeBootedStatus writes, to w (escaped), what a system booted through
// kpreload's /init says: the driver, the request, the CDI spec, Secure
// Boot.
func writeBootedStatus(w io.Writer, st *status.Status) {
	name := termtext.Name
	fmt.Fprintf(w, "booted: through kpreload's /init, kernel %s\n", name(none.Or(st.RunningKernel)))
	if d := st.Driver; d != nil {
		by := "/init"
		if d.By != "init" {
			by = "kpreload " + d.By
		}
		line := fmt.Sprintf("driver: %s %s", name(d.Driver), name(d.Version))
		if d.Flavor != "" {
			line += " (" + name(d.Flavor) + ")"
		}
		line += ", activated by " + name(by)
		if d.Previous != "" {
			line += " (was " + name(d.Previous) + ")"
		}
		if d.Userspace != "" {
			line += "; userspace " + name(d.Userspace)
		}
		fmt.Fprintln(w, line)
	} else {
		fmt.Fprintln(w, "driver: none active")
	}
	if r := st.Request; r != nil {
		line := "request: " + name(r.Source)
		if r.Origin != "" {
			line += " (" + name(r.Origin) + ")"
		}
		var asked []string
		for _, f := range [][2]string{{"version", r.Version}, {"flavour", r.Flavor}, {"cuda", r.CUDA}} {
			if f[1] != "" {
				asked = append(asked, f[0]+" "+name(f[1]))
			}
		}
		if len(asked) > 0 {
			line += ": " + strings.Join(asked, ", ")
		}
		fmt.Fprintln(w, line)
		if ud := r.UserData; ud != nil {
			fmt.Fprintf(w, "user-data: %s (%s)\n", name(ud.Action), name(ud.Reason))
		}
	}
	if c := st.CDI; c != nil {
		switch {
		case c.File == "":
			fmt.Fprintf(w, "cdi: no spec (%s)\n", name(c.Why))
		case c.State == "matches":
			fmt.Fprintf(w, "cdi: %s (%s) matches the loaded driver\n", name(c.File), name(c.Kind))
		default:
			fmt.Fprintf(w, "cdi: %s (%s) %s: %s\n", name(c.File), name(c.Kind), name(c.State), name(c.Why))
		}
	}
	writeSecureBootStatus(w, st)
}

// writeSecureBootStatus writes, to w (escaped), Secure Boot's state and
// the module signing keys.
func writeSecureBootStatus(w io.Writer, st *status.Status) {
	name := termtext.Name
	sb := st.SecureBoot
	if sb == nil {
		return
	}
	line := "secure boot: " + name(sb.State)
	if sb.Lockdown != "" {
		line += ", lockdown " + name(sb.Lockdown)
	}
	if sb.Enforced {
		line += "; module signatures enforced"
	} else {
		line += "; module signatures not enforced"
	}
	if sb.Expected {
		line += "; the image was built for Secure Boot"
	}
	fmt.Fprintln(w, line)
	for _, k := range sb.Keys {
		held := "not on the kernel's keyrings"
		if k.Enrolled {
			held = "enrolled"
		} else if sb.KeysError != "" {
			held = "keyrings unreadable (" + name(sb.KeysError) + ")"
		}
		fmt.Fprintf(w, "signing key: \"%s\" (sig_key %s) of %s: %s\n", name(k.Signer), name(k.SigKey), name(strings.Join(k.Sets, ", ")), held)
	}
}
