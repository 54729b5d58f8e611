package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/initramfs/archive"
	"github.com/kpreload/kpreload/initramfs/assemble"
	"github.com/kpreload/kpreload/initramfs/rootcheck"
	"github.com/kpreload/kpreload/internal/inroot"
)

// Options says which root to make boot kpreload, and how.
type Options struct {
	// Root is the root filesystem ("/" for the running system). Every path
	// under it is resolved inside it, as in a chroot of it (an absolute link
	// means "from Root"): nothing outside it is created, changed or removed.
	Root string
	// Kernels are the kernels to build a kpreload initramfs for; none means
	// every kernel the root holds with its modules.
	Kernels []string
	// Bootloader is the root's boot loader; "" detects it (Detect).
	Bootloader Bootloader
	// ESP is the EFI system partition as a host path (default Root/boot/efi,
	// resolved inside Root; one outside Root is resolved inside itself).
	ESP string
	// Cmdline is the kernel command line of systemd-boot entries (default:
	// Root/etc/kpreload/cmdline, else /proc/cmdline when Root is "/").
	// GRUB entries take GRUB_CMDLINE_LINUX and GRUB_CMDLINE_LINUX_DEFAULT
	// from /etc/default/grub instead (GrubEntries).
	Cmdline string
	// Default names the default kernel instead of the settings' policy
	// (systemd-boot; GRUB's default follows the policy and GRUB_DEFAULT).
	Default string
	// ModulesDir returns a kernel's module tree as a host path the caller
	// vouches for (nil: Root/lib/modules/<release>, resolved inside Root).
	ModulesDir func(release string) string
	// Filesystems limits the initramfs to these root filesystems' modules (nil: all).
	Filesystems []string
	// RootFS is the filesystem the root boots from, which every kpreload
	// initramfs built must mount (initramfs/rootcheck), or nothing is
	// changed; nil: the filesystem holding Root now (rootcheck.Detect).
	RootFS *rootcheck.Root
	// SkipInitramfs keeps the kpreload initramfs images already in the root.
	SkipInitramfs bool
	// UpdateGrub regenerates grub.cfg (nil: UpdateGrubWith(Runner), in the
	// root's sandbox when Root is not "/").
	UpdateGrub func(ctx context.Context, root string, log io.Writer) error
	// Runner runs the host's programs UpdateGrub runs (nil: runner.Default).
	Runner runner.Runner
	// GrubRegeneratedBy, when set, is the hook that regenerates grub.cfg
	// right after this one (DistributionGrubHook): grub.cfg is left to it,
	// so that a kernel update runs grub-mkconfig once, not twice.
	GrubRegeneratedBy string
	// Log receives one line per step (nil: discarded).
	Log io.Writer
	// LockTimeout is how long Install and Refresh wait while another holds
	// the root's HookLock (0: DefaultLockTimeout); KernelAdded and
	// KernelRemoved wait without a limit.
	LockTimeout time.Duration
	// StallAt is a fault-injection knob for the tests of interrupted hooks:
	// at the step it names (StallMidInitramfs, StallBeforeBootloader) the
	// run logs that it stalls, then waits until ctx is cancelled and goes
	// on, so that a signal lands there deterministically. "" never stalls.
	StallAt string

	// hook is set by the kernel hooks, which must not fail the kernel
	// package over configuration: a bad boot.yaml or cmdline file is a
	// warning and the defaults.
	hook bool
	// rootUnknown: a hook could not tell the root's filesystem (rootFS).
	rootUnknown bool
}

// Result says what Install or a kernel hook left in the root.
type Result struct {
	// Bootloader is the boot loader that was set up.
	Bootloader Bootloader `json:"bootloader"`
	// Default is the kernel the default boot entry boots with kpreload.
	Default string `json:"default"`
	// Kernels are the root's kernels after the change, newest first.
	Kernels []Kernel `json:"kernels"`
	// Warnings are things a user must know (a kernel without driver cells).
	Warnings []string `json:"warnings,omitempty"`
	// Pulled are the cells the kernel hook pulled from the root's registry.
	Pulled []string `json:"pulled,omitempty"`
}

func (o *Options) defaults() error {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.UpdateGrub == nil {
		o.UpdateGrub = UpdateGrubWith(o.Runner)
	}
	if fi, err := os.Stat(o.Root); err != nil || !fi.IsDir() {
		return fmt.Errorf("root %s is not a directory", o.Root)
	}
	return nil
}

func (o *Options) logf(format string, a ...any) { fmt.Fprintf(o.Log, "kpreload: "+format+"\n", a...) }

// Install makes o.Root boot kpreload: it finds the boot loader (and fails,
// saying what it looked for, when there is none), writes the kernel hooks
// (and GRUB's script), builds the kpreload initramfs of each kernel and
// points the boot loader's default entry at the default kernel's. It fails
// when the boot would not use kpreload afterwards. It holds the root's
// HookLock while it runs, as the kernel hooks do.
func Install(ctx context.Context, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	unlock, err := o.lock(ctx, "kpreload install", true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	bl, err := o.bootloader()
	if err != nil {
		return nil, err
	}
	kernels := o.Kernels
	if len(kernels) == 0 {
		all, err := Kernels(o.Root)
		if err != nil {
			return nil, err
		}
		for _, k := range all {
			if k.Modules {
				kernels = append(kernels, k.Release)
			}
		}
		if len(kernels) == 0 {
			return nil, fmt.Errorf("%s holds no kernel (no lib/modules/<release>/modules.dep): install a linux-image package first", o.Root)
		}
	}
	// Every initramfs is built, and checked against the root, before any
	// is committed and the hooks and the boot loader change.
	if !o.SkipInitramfs {
		var built []*pendingInitramfs
		for _, k := range kernels {
			p, err := o.prepareInitramfs(ctx, k)
			if err != nil {
				for _, b := range built {
					b.abort(&o)
				}
				return nil, err
			}
			built = append(built, p)
		}
		if err := interrupted(ctx, "no kpreload initramfs was replaced"); err != nil {
			for _, b := range built {
				b.abort(&o)
			}
			return nil, err
		}
		for i, b := range built {
			if _, err := b.commit(&o); err != nil {
				for _, rest := range built[i+1:] {
					rest.abort(&o)
				}
				return nil, err
			}
		}
	}
	if err := WriteHooks(o.Root, bl); err != nil {
		return nil, err
	}
	return o.sync(ctx, bl)
}

// KernelAdded is the postinst hook: it builds the kpreload initramfs of a
// newly installed kernel and updates the boot loader. image is the kernel
// image's path as the kernel package passes it (unused: the image is
// boot/vmlinuz-<release>).
func KernelAdded(ctx context.Context, o Options, release string) (*Result, error) {
	if err := CheckRelease(release); err != nil {
		return nil, err
	}
	bl, unlock, err := o.startHook(ctx, "kpreload kernel-hook postinst "+release, false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// A kernel the cache has no cell for: pull its cells from the root's
	// registry, if it names one, before its initramfs is built.
	var pulled, warnings []string
	if len(kernelState(o.Root, release).Drivers) == 0 {
		cfg, err := ReadRemoteConfig(o.Root)
		if err != nil {
			warnings = append(warnings, err.Error())
		} else if cfg != nil {
			pulled, warnings = o.pullCells(ctx, cfg, release)
		}
	}
	for _, p := range pulled {
		o.logf("pulled %s for %s", p, release)
	}
	for _, w := range warnings {
		o.logf("WARNING: %s", w)
	}
	if _, err := o.buildInitramfs(ctx, release); err != nil {
		return nil, err
	}
	o.stall(ctx, StallBeforeBootloader)
	if err := interrupted(ctx, "the boot loader was not updated"); err != nil {
		return nil, err
	}
	return o.syncPulled(ctx, bl, pulled, warnings)
}

// KernelRemoved is the postrm hook: it deletes a removed kernel's kpreload
// initramfs and updates the boot loader (the default moves to another kernel
// when it was the removed one's).
func KernelRemoved(ctx context.Context, o Options, release string) (*Result, error) {
	if err := CheckRelease(release); err != nil {
		return nil, err
	}
	bl, unlock, err := o.startHook(ctx, "kpreload kernel-hook postrm "+release, false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := inroot.Remove(o.Root, InitramfsPath(release)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	o.logf("removed the kpreload initramfs of %s", release)
	o.stall(ctx, StallBeforeBootloader)
	if err := interrupted(ctx, "the boot loader was not updated"); err != nil {
		return nil, err
	}
	return o.syncAfter(ctx, bl, true)
}

// startHook fills o's defaults, marks o as run by a kernel hook, takes the
// root's HookLock for the hook what (unlock releases it; limited: waiting
// at most o.LockTimeout) and returns the root's boot loader.
func (o *Options) startHook(ctx context.Context, what string, limited bool) (bl Bootloader, unlock func(), err error) {
	if err := o.defaults(); err != nil {
		return "", nil, err
	}
	o.hook = true
	if unlock, err = o.lock(ctx, what, limited); err != nil {
		return "", nil, err
	}
	if bl, err = o.bootloader(); err != nil {
		unlock()
		return "", nil, err
	}
	return bl, unlock, nil
}

// syncPulled updates the boot loader (see sync) and records in the result
// the cells a hook pulled and its warnings, ahead of the sync's own.
func (o *Options) syncPulled(ctx context.Context, bl Bootloader, pulled, warnings []string) (*Result, error) {
	res, err := o.sync(ctx, bl)
	if res != nil {
		res.Pulled = pulled
		res.Warnings = append(warnings, res.Warnings...)
	}
	return res, err
}

func (o *Options) bootloader() (Bootloader, error) {
	bl := o.Bootloader
	if bl == "" {
		var err error
		if bl, err = Detect(o.Root, o.ESP); err != nil {
			return "", err
		}
	}
	if bl == GRUB && o.Default != "" {
		return "", fmt.Errorf("a default kernel cannot be named for GRUB: its first entry is the newest kernel with driver cells (%s default: newest picks the newest); set GRUB_DEFAULT=%s in /etc/default/grub to pin one", SettingsFile, GrubEntryID(o.Default))
	}
	return bl, nil
}

// BuildInitramfs writes release's kpreload initramfs into o.Root
// (atomically: a failed build leaves the previous one) from the kernel's
// module tree and the root's /init, firmware and, when the root asks for the
// early decision (EarlyDrivers), its module cache and instance file.
func BuildInitramfs(o Options, release string) (*assemble.Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	return o.buildInitramfs(context.Background(), release)
}

// buildInitramfs builds release's kpreload initramfs and renames it into
// place unless ctx is cancelled first (then the previous one stays and the
// temporary file is removed).
func (o *Options) buildInitramfs(ctx context.Context, release string) (*assemble.Result, error) {
	p, err := o.prepareInitramfs(ctx, release)
	if err != nil {
		return nil, err
	}
	if err := interrupted(ctx, fmt.Sprintf("the kpreload initramfs of %s was not replaced", release)); err != nil {
		p.abort(o)
		return nil, err
	}
	return p.commit(o)
}

// pendingInitramfs is a kpreload initramfs built, and checked against the
// root, in a temporary file beside its final name.
type pendingInitramfs struct {
	release string
	tmp     *inroot.Pending
	res     *assemble.Result
	madeDir bool // InitramfsDir was made for it
}

// commit renames the initramfs into place.
func (p *pendingInitramfs) commit(o *Options) (*assemble.Result, error) {
	if err := p.tmp.Commit(0o644); err != nil {
		return nil, fmt.Errorf("kpreload initramfs of %s: %w", p.release, err)
	}
	p.res.Output = inroot.Host(o.Root, InitramfsPath(p.release))
	o.logf("built /%s (%d bytes, %d modules)", InitramfsPath(p.release), p.res.Size, len(p.res.Modules))
	return p.res, nil
}

// abort removes the temporary file, and InitramfsDir if it was made for it.
func (p *pendingInitramfs) abort(o *Options) {
	p.tmp.Abort()
	if p.madeDir {
		inroot.Remove(o.Root, InitramfsDir) // only when empty
	}
}

// prepareInitramfs builds release's kpreload initramfs into a temporary file
// of the root; it fails, leaving the root as it was, when the build fails or
// the initramfs could not mount the root (o.RootFS).
func (o *Options) prepareInitramfs(ctx context.Context, release string) (*pendingInitramfs, error) {
	if err := CheckRelease(release); err != nil {
		return nil, err
	}
	rootFS, err := o.rootFS()
	if err != nil {
		return nil, err
	}
	// The assembler reads paths: each is the root's file with its links
	// resolved inside the root.
	var mods string
	if o.ModulesDir != nil {
		mods = o.ModulesDir(release)
		if _, err := os.Stat(mods + "/modules.dep"); err != nil {
			return nil, fmt.Errorf("kernel %s: no module tree at %s (%w): install linux-image-%s first", release, mods, err, release)
		}
	} else {
		var err error
		if mods, err = inroot.Resolve(o.Root, path.Join("lib/modules", release)); err == nil {
			_, err = inroot.Stat(o.Root, path.Join("lib/modules", release, "modules.dep"))
		}
		if err != nil {
			return nil, fmt.Errorf("kernel %s: no module tree (%w): install linux-image-%s first", release, err, release)
		}
	}
	initBin, err := inroot.Resolve(o.Root, Init)
	if err == nil {
		var f *os.File
		if f, err = inroot.Open(o.Root, Init); err == nil {
			f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kpreload's /init is not in the root (%w): stage kpreload into it first: kpreload install --stage --recipe R (a root or disk image another tool made), kpreload image build, or the Packer provisioner", err)
	}
	ao := assemble.Options{
		Kernel:      release,
		ModulesDir:  mods,
		Init:        initBin,
		Compression: archive.Zstd,
		Filesystems: o.Filesystems,
		Root:        rootFS,
	}
	// No firmware directory in the root: an empty one (the assembler's
	// default is this machine's /lib/firmware).
	if ao.FirmwareDir, err = inroot.Resolve(o.Root, "lib/firmware"); err != nil {
		if ao.FirmwareDir, err = os.MkdirTemp("", "kpreload-no-firmware-"); err != nil {
			return nil, fmt.Errorf("kpreload initramfs: %w", err)
		}
		defer os.RemoveAll(ao.FirmwareDir)
	}
	if exists(o.Root, EarlyDrivers) {
		// Its index and every file it names resolved inside the root.
		ao.CacheRoot, ao.CacheDir = o.Root, CacheDir
		if _, err := inroot.Stat(o.Root, CacheDir); err != nil {
			return nil, fmt.Errorf("kpreload initramfs of %s: the module cache (%s asks for the driver sets): %w", release, EarlyDrivers, err)
		}
		ao.Complete = true
		if p, err := inroot.Resolve(o.Root, Instance); err == nil {
			ao.Instance = p
		}
	}
	out := InitramfsPath(release)
	p := &pendingInitramfs{release: release, madeDir: !exists(o.Root, path.Dir(out))}
	if err := inroot.MkdirAll(o.Root, path.Dir(out), 0o755); err != nil {
		return nil, fmt.Errorf("kpreload initramfs: %w", err)
	}
	if p.tmp, err = inroot.CreateTemp(o.Root, out); err != nil {
		p.madeDir = false
		return nil, fmt.Errorf("kpreload initramfs: %w", err)
	}
	w := &cancelWriter{ctx: ctx, w: p.tmp.File}
	if o.StallAt == StallMidInitramfs {
		w.stall = func() { o.stall(ctx, StallMidInitramfs) }
	}
	if p.res, err = assemble.Build(ao, w); err != nil {
		p.abort(o)
		if ierr := interrupted(ctx, fmt.Sprintf("the kpreload initramfs of %s was not replaced", release)); ierr != nil {
			return nil, ierr
		}
		return nil, fmt.Errorf("kpreload initramfs of %s: %w", release, err)
	}
	return p, nil
}

// removeStaleTemps deletes what an earlier run killed mid-write left in dir
// of the tree at root: temporary files (inroot's and fileutil's ".tmp-",
// and the assembler's ".initrd.img-" names), never renamed into place, never
// read by a boot loader.
func removeStaleTemps(root, dir string) {
	ents, _ := inroot.ReadDir(root, dir)
	for _, e := range ents {
		if n := e.Name(); e.Type().IsRegular() && (strings.HasPrefix(n, inroot.TempPrefix) || strings.HasPrefix(n, ".initrd.img-")) {
			inroot.Remove(root, path.Join(dir, n))
		}
	}
}

// sync points the boot loader at the root's kernels as they are now.
func (o *Options) sync(ctx context.Context, bl Bootloader) (*Result, error) {
	return o.syncAfter(ctx, bl, false)
}

// syncAfter is sync; after a removal, a root left with no kernel that boots
// with kpreload is no error (the kernel packages' postrm must not fail): its
// kpreload entries go, the distribution's stay, and a warning says so.
func (o *Options) syncAfter(ctx context.Context, bl Bootloader, removal bool) (*Result, error) {
	removeStaleTemps(o.Root, InitramfsDir)
	kernels, err := Kernels(o.Root)
	if err != nil {
		return nil, err
	}
	var st Settings
	var warnings []string
	if o.hook {
		st, warnings = ReadSettingsOrDefaults(o.Root)
	} else if st, err = ReadSettings(o.Root); err != nil {
		return nil, err
	}
	res := &Result{Bootloader: bl, Kernels: kernels, Default: o.Default, Warnings: warnings}
	if res.Default == "" {
		res.Default = DefaultKernel(kernels, st.NewestFirst())
	}
	for _, k := range kernels {
		if k.Bootable() && len(k.Drivers) == 0 {
			res.Warnings = append(res.Warnings, fmt.Sprintf("the module cache has no driver cell for kernel %s: kpreload boots it without a GPU driver", k.Release))
		}
		if k.Image && k.Modules && !k.Initramfs {
			res.Warnings = append(res.Warnings, fmt.Sprintf("kernel %s has no kpreload initramfs: it boots only with the distribution's", k.Release))
		}
	}
	switch {
	case res.Default == "" && !removal:
		return nil, fmt.Errorf("no kernel in %s has both its image (/boot/vmlinuz-<release>) and a kpreload initramfs: nothing to boot kpreload with", o.Root)
	case res.Default == "":
		res.Warnings = append(res.Warnings, fmt.Sprintf("no kernel in %s boots with kpreload any more: kpreload's entries are removed, the distribution's own stay", o.Root))
	default:
		if err := CheckRelease(res.Default); err != nil {
			return nil, err
		}
	}
	switch bl {
	case GRUB:
		// save_env (kpreload's one-shot fallback) needs the block to exist.
		if err := EnsureGrubEnv(o.Root); err != nil {
			return nil, fmt.Errorf("GRUB: %w", err)
		}
		if o.GrubRegeneratedBy != "" {
			o.logf("grub.cfg is regenerated next by %s", o.GrubRegeneratedBy)
			break
		}
		if err := o.UpdateGrub(ctx, o.Root, o.Log); err != nil {
			return nil, fmt.Errorf("GRUB: %w", err)
		}
		if res.Default == "" {
			break
		}
		if err := CheckGrubConfig(o.Root, res.Default); err != nil {
			return nil, fmt.Errorf("GRUB: %w", err)
		}
	case SystemdBoot:
		cmdline := "" // no kernel left: no entry is written
		e := espOf(o.Root, o.ESP)
		if res.Default != "" {
			var warnings []string
			cmdline, warnings, err = entryCmdline(o.Root, e, o.Cmdline, o.hook)
			res.Warnings = append(res.Warnings, warnings...)
			if err != nil {
				return nil, err
			}
		}
		if err := syncSystemdBoot(o.Root, e, kernels, res.Default, cmdline); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown bootloader %q", bl)
	}
	for _, w := range res.Warnings {
		o.logf("WARNING: %s", w)
	}
	if res.Default == "" {
		return res, nil
	}
	why := st.DescribeDefault(kernels, res.Default)
	if o.Default != "" {
		why = "named as the default"
	}
	o.logf("%s boots kernel %s with kpreload by default (%s)", bl, res.Default, why)
	return res, nil
}

// Hook scripts: the kernel packages run them; they only hand over to Go.
const (
	postinstText = `#!/bin/sh
# kpreload: build the kpreload initramfs of a newly installed kernel and update
# the boot loader. Run by Debian's kernel packages as: zz-kpreload <release> [<image>].
# Nothing is compiled: the drivers come precompiled from the module cache.
[ -x /usr/bin/kpreload ] || exit 0
exec /usr/bin/kpreload kernel-hook postinst "$@"
`
	postrmText = `#!/bin/sh
# kpreload: remove a removed kernel's kpreload initramfs and boot entry.
[ -x /usr/bin/kpreload ] || exit 0
exec /usr/bin/kpreload kernel-hook postrm "$@"
`
	kernelInstallText = `#!/bin/sh
# kpreload: kernel-install plugin (kernel-install add|remove KVER ENTRY_DIR [IMAGE]):
# the kernel's kpreload initramfs and boot entry, as the kernel packages' hooks
# make them, after kernel-install's own entry (the distribution's initramfs).
[ -x /usr/bin/kpreload ] || exit 0
case "$1" in
add) exec /usr/bin/kpreload kernel-hook postinst "$2" ;;
remove) exec /usr/bin/kpreload kernel-hook postrm "$2" ;;
esac
exit 0
`
)

// UsesKernelInstall reports whether root has systemd's kernel-install.
func UsesKernelInstall(root string) bool {
	fi, err := inroot.Stat(root, KernelInstallBinary)
	return err == nil && fi.Mode()&0o111 != 0
}

// WriteHooks writes the kernel hooks into root, GRUB's script when bl is
// GRUB, and the kernel-install plugin when the root has kernel-install: a
// kernel that arrives through kernel-install (Debian's systemd-boot hands
// kernels to it; so do dracut and ukify users, by hand or by package) gets
// its kpreload initramfs and entry as the kernel packages' hooks give them.
func WriteHooks(root string, bl Bootloader) error {
	files := map[string]string{PostinstHook: postinstText, PostrmHook: postrmText}
	if bl == GRUB {
		files[GrubScript] = GrubScriptText
	}
	if UsesKernelInstall(root) {
		files[KernelInstallPlugin] = kernelInstallText
	}
	for p, text := range files {
		if err := inroot.MkdirAll(root, path.Dir(p), 0o755); err != nil {
			return fmt.Errorf("kernel hooks: %w", err)
		}
		if err := inroot.WriteFile(root, p, []byte(text), 0o755); err != nil {
			return fmt.Errorf("kernel hooks: %w", err)
		}
	}
	return nil
}
