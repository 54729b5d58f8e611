package image

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/recipe"
)

// Phase is one phase of an image build: Build runs a Job's phases one after
// another, the Packer builder runs each as a multistep step.
type Phase struct {
	// Name is the phase's short name ("prepare", "drivers", "rootfs", ...).
	Name string
	// Title says in a few words what the phase does, for a UI.
	Title string
	// Run does the phase's work; when ctx is done before or while it runs,
	// it stops and returns an error that wraps ctx's.
	Run func(ctx context.Context) error
	// Cleanup removes what Run made that the finished image does not need
	// (work files, temporary outputs) and, when failed is set (this or a
	// later phase failed, or the build was cancelled), the outputs Run put
	// into place; it never removes a file that was there before the build.
	// It is called once for each phase whose Run was called, in reverse
	// order, after the last Run.
	Cleanup func(failed bool)
}

// Phase names, in the order a Job runs them.
const (
	// PhasePrepare checks the options, the tools and the kernels and makes
	// the work and temporary output directories.
	PhasePrepare = "prepare"
	// PhaseDrivers makes sure the module cache holds every cell the image
	// needs: pulled from Options.Remote or built with dkms (BuildMissing).
	PhaseDrivers = "drivers"
	// PhaseRootfs makes the root filesystem: mmdebstrap or the cached
	// tarball, unpacked into the work directory.
	PhaseRootfs = "rootfs"
	// PhaseInitramfs stages kpreload into the root (stage.Stage: the module cache
	// subset, userspace, firmware, binaries, hooks) and builds the kpreload
	// initramfs of each kernel.
	PhaseInitramfs = "initramfs"
	// PhaseConfigure configures the root: extra files, fstab, identity,
	// cloud-init and the units to enable.
	PhaseConfigure = "configure"
	// PhaseBootloader lays out the boot loader: systemd-boot's or GRUB's
	// files for the ESP (and GRUB's core.img), Secure Boot's key files.
	PhaseBootloader = "bootloader"
	// PhaseDisk writes the raw GPT disk: the ESP and the root filesystem.
	PhaseDisk = "disk"
	// PhaseFormats writes each requested format and the manifest, and moves
	// every output into the output directory.
	PhaseFormats = "formats"
)

// Job is one image build split into its phases (Phases); what one phase makes
// for the next lives here. Build runs a Job from start to end.
type Job struct {
	// Tools are the external programs the phases run: the real ones
	// (DefaultTools) from NewJob; a test sets fakes before the phases run.
	Tools Tools

	o Options

	start     time.Time
	moduleKey *x509.Certificate
	madeDirs  []string // the output directory and parents prepare made, deepest first
	work      string   // work directory: the root, the ESP's files
	outTmp    string   // temporary directory in OutDir for the outputs
	m         *Manifest
	espVol    string
	root      string
	esp       []disk.File
	coreImg   string
	raw       string   // the raw disk in outTmp
	outputs   []string // temporary paths of the formats, in Files order
	placed    []string // final paths of the outputs renamed into OutDir
	// aside holds earlier files the outputs replaced: {moved to, final path}.
	aside [][2]string
	done  bool
}

// NewJob returns the build of the image o describes (with its defaults filled
// in); nothing happens until its phases run.
func NewJob(o Options) *Job {
	return &Job{Tools: DefaultTools(), o: o.withDefaults()}
}

// Options returns the job's options, defaults filled in.
func (j *Job) Options() Options { return j.o }

// Manifest returns the built image's manifest once the last phase has run,
// else nil.
func (j *Job) Manifest() *Manifest {
	if !j.done {
		return nil
	}
	return j.m
}

// Phases returns the job's phases in the order they must run.
func (j *Job) Phases() []Phase {
	noCleanup := func(bool) {}
	return []Phase{
		{PhasePrepare, "checks, work and temporary output directories", j.guard(j.prepare), j.cleanupPrepare},
		{PhaseDrivers, "driver cells: cache, registry or dkms", j.guard(j.drivers), noCleanup},
		{PhaseRootfs, "root filesystem: mmdebstrap or the cached tarball", j.guard(j.rootfs), j.cleanupRootfs},
		{PhaseInitramfs, "kpreload's files and each kernel's initramfs", j.guard(j.initramfs), noCleanup},
		{PhaseConfigure, "files, fstab, identity, cloud-init, units", j.guard(j.configure), noCleanup},
		{PhaseBootloader, string(j.o.Bootloader) + " files for the ESP", j.guard(j.bootloader), j.cleanupBootloader},
		{PhaseDisk, "raw GPT disk", j.guard(j.disk), j.cleanupDisk},
		{PhaseFormats, strings.Join(j.o.Formats, ", ") + " and the manifest", j.guard(j.formats), j.cleanupFormats},
	}
}

// RunPhases runs phases in order until one fails or ctx is done, then the
// Cleanup of every phase that ran, in reverse order (with failed set unless
// all of them succeeded). It returns the failed phase's error, or ctx's
// error, wrapped, when the build was cancelled between phases.
func RunPhases(ctx context.Context, phases []Phase) (err error) {
	var ran []Phase
	defer func() {
		for _, p := range slices.Backward(ran) {
			if p.Cleanup != nil {
				p.Cleanup(err != nil)
			}
		}
	}()
	for _, p := range phases {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("image: cancelled before %s: %w", p.Name, cerr)
		}
		ran = append(ran, p)
		if err := p.Run(ctx); err != nil {
			return err
		}
	}
	return nil
}

// tools returns the job's tools, the real ones where none were set.
func (j *Job) tools() Tools { return j.Tools.orDefault() }

// guard makes a phase refuse to start once ctx is done.
func (j *Job) guard(run func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("image %s: %w", j.o.Name, err)
		}
		return run(ctx)
	}
}

// prepare checks what can fail before the slow phases (options, tools,
// kernels, the Secure Boot key) and makes the output, work and temporary
// output directories and the manifest's identifiers.
func (j *Job) prepare(ctx context.Context) error {
	o := j.o
	j.start = time.Now()
	if err := o.Validate(); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	for _, tool := range []string{"mmdebstrap", "sfdisk", "mkfs.vfat", "mmd", "mcopy", "mkfs.ext4", "qemu-img", "dpkg-deb", "systemctl", "tar"} {
		if _, err := j.tools().Runner.LookPath(tool); err != nil {
			return fmt.Errorf("image: %s is missing (install the image tools with scripts/deps.sh: mmdebstrap fdisk dosfstools mtools e2fsprogs qemu-utils): %w", tool, err)
		}
	}
	if err := checkPackages(o, archiveControls(ctx, o)); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	recipes, err := stage.PinRecipes(ctx, o.Recipes, &recipe.AptArchives{Cache: o.DownloadDir}, o.Progress)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	o.Recipes, j.o.Recipes = recipes, recipes
	if _, err := os.Stat(bootloader.SystemdBootEFI); err != nil && o.Bootloader == install.SystemdBoot {
		return fmt.Errorf("image: systemd-boot is missing (install systemd-boot-efi with scripts/deps.sh): %w", err)
	}
	if o.SecureBoot {
		recipes, key, created, err := bootloader.AutoSign(o.Recipes, o.CacheDir)
		if err != nil {
			return fmt.Errorf("image: secure boot: %w", err)
		}
		if key != nil {
			verb := "using"
			if created {
				verb = "made"
			}
			o.Progress.say("secure boot: no recipe names a signing key: %s kpreload's module signing key %s (serial %s; kpreload keys show)", verb, key.Dir, key.SigKey())
			o.Recipes, j.o.Recipes = recipes, recipes
		}
	}
	// Fail on unknown kernels and missing cells before the slow phases.
	if err := stage.CheckKernels(o.Kernels, o.Recipes, o.Lister, o.BuildMissing, o.Suite); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if o.SecureBoot {
		cert, path, unsigned, err := bootloader.ModuleCert(o.Recipes)
		if err != nil {
			return fmt.Errorf("image: secure boot: %w", err)
		}
		if len(unsigned) > 0 {
			o.Progress.say("secure boot: WARNING: recipes %s sign nothing: their modules will be refused at boot while Secure Boot is on", strings.Join(unsigned, ", "))
		}
		o.Progress.say("secure boot: module key %q (%s)", cert.Subject.CommonName, path)
		j.moduleKey = cert
	}

	if j.madeDirs, err = mkdirAll(o.OutDir); err != nil {
		return fmt.Errorf("image: output directory: %w", err)
	}
	if j.work, err = os.MkdirTemp(o.TempDir, "kpreload-image-"); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if j.outTmp, err = os.MkdirTemp(o.OutDir, ".tmp-"+o.Name+"-"); err != nil {
		return fmt.Errorf("image: output directory: %w", err)
	}
	j.m = &Manifest{
		Name: o.Name, Suite: o.Suite, Kernels: slices.Clone(o.Kernels), BuiltWith: o.BuiltWith, Bootloader: o.Bootloader,
		RootUUID: disk.NewUUID(), DiskGUID: disk.NewUUID(),
	}
	j.espVol = disk.NewVolumeID()
	j.m.ESPUUID = disk.FATUUID(j.espVol)
	j.m.Cmdline = bootloader.Cmdline(j.m.RootUUID, bootloader.CmdlineExtra(o.SecureBoot, o.Cmdline))
	return nil
}

// cleanupPrepare removes the work and temporary output directories and, when
// the build failed, the output directory if prepare made it and it is empty.
func (j *Job) cleanupPrepare(failed bool) {
	for _, d := range []string{j.work, j.outTmp} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	if failed {
		for _, d := range j.madeDirs {
			os.Remove(d) // only when empty
		}
	}
}

// drivers makes sure the module cache holds every cell the image needs. The
// cells it adds stay: the cache is content-addressed and each cell is stored
// whole or not at all, so a later build uses them.
func (j *Job) drivers(ctx context.Context) error {
	o := j.o
	if err := stage.EnsureCells(ctx, stage.Options{
		Kernels: o.Kernels, Recipes: o.Recipes, CacheDir: o.CacheDir, DownloadDir: o.DownloadDir,
		BuildMissing: o.BuildMissing, Remote: o.Remote, Lister: o.Lister, Progress: o.Progress,
	}); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}

// rootfs makes the root filesystem in the work directory and records its
// kernel packages.
func (j *Job) rootfs(ctx context.Context) error {
	o := j.o
	spec := rootfsSpec(o, time.Now().UTC().Format("2006-01-02"))
	tarball, info, err := rootfs.Tarball(ctx, j.tools().forRootfs(), spec, o.RootfsCacheDir, j.work, o.Progress)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	j.m.Rootfs = info
	j.root = filepath.Join(j.work, "root")
	o.Progress.say("rootfs: unpacking")
	if err := rootfs.Unpack(ctx, j.tools().Mmdebstrap, tarball, j.root); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if j.m.KernelPackages, err = rootfs.KernelPackages(ctx, j.tools().Dpkg, j.root, o.Kernels); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}

// cleanupRootfs removes the unpacked root and what rootfs.Tarball made in the
// work directory (a tarball kept in RootfsCacheDir stays: it is complete).
func (j *Job) cleanupRootfs(bool) {
	if j.work == "" {
		return
	}
	for _, p := range []string{filepath.Join(j.work, "root"), filepath.Join(j.work, "deb"), filepath.Join(j.work, "rootfs.tar")} {
		os.RemoveAll(p)
	}
}

// initramfs stages everything kpreload-specific into the root (stage.Stage;
// nothing in a plain image), each kernel's initramfs included, and checks
// that the kernels are signed for Secure Boot.
func (j *Job) initramfs(ctx context.Context) error {
	o, m := j.o, j.m
	if !o.Plain {
		t := j.tools()
		res, err := stage.Stage(ctx, stage.Options{
			Kernels: o.Kernels, Recipes: o.Recipes, CacheDir: o.CacheDir, DownloadDir: o.DownloadDir,
			Lister: o.Lister, KpreloadBinary: o.KpreloadBinary, InitBinary: o.InitBinary,
			Instance: o.Instance, Cmdline: m.Cmdline, Progress: o.Progress, EarlyDrivers: o.EarlyDrivers,
			RemoteConfig: o.RemoteConfig, Tools: stage.Tools{Dpkg: t.Dpkg, Userspace: t.Userspace},
			// BuildMissing already ran in the drivers phase; stage.Stage finds the cells in the cache.
		}, j.root)
		if err != nil {
			return fmt.Errorf("image: %w", err)
		}
		m.Drivers, m.Userspace, m.Firmware, m.Initramfs = res.Drivers, res.Userspace, res.Firmware, res.Initramfs
	}
	if m.Drivers == nil {
		m.Drivers = []Driver{}
	}
	if o.SecureBoot {
		for _, k := range o.Kernels {
			if err := bootloader.CheckSignedKernel(filepath.Join(j.root, install.KernelImagePath(k))); err != nil {
				return fmt.Errorf("image: secure boot: %w", err)
			}
		}
	}
	return nil
}

// configure copies the extra files into the root (after kpreload's, so they
// may replace a configuration file), writes fstab and root's password, resets
// the machine's identity and sets up cloud-init and the units to enable.
func (j *Job) configure(ctx context.Context) error {
	o, root := j.o, j.root
	if err := rootfs.AddFiles(root, o.Files); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := rootfs.Configure(ctx, j.tools().Systemctl, root, j.m.RootUUID, j.m.ESPUUID, o.EmptyRootPassword, !o.Plain); err != nil {
		return fmt.Errorf("image: configure root: %w", err)
	}
	if err := rootfs.ResetIdentity(ctx, j.tools().Systemctl, root); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if o.CloudInit {
		if err := rootfs.ConfigureCloudInit(root); err != nil {
			return fmt.Errorf("image: %w", err)
		}
	}
	if len(o.Enable) > 0 {
		o.Progress.say("rootfs: enabling %s", strings.Join(o.Enable, ", "))
		if err := j.tools().Systemctl.Enable(ctx, root, o.Enable...); err != nil {
			return fmt.Errorf("image: enable %s: %w", strings.Join(o.Enable, " "), err)
		}
	}
	return nil
}

// bootloader lays out the boot loader's files for the ESP (and, for GRUB,
// core.img for the BIOS boot partition), made through builder/install as
// the kernel hooks do on the running image, and Secure Boot's key files.
func (j *Job) bootloader(ctx context.Context) error {
	o := j.o
	espDir := filepath.Join(j.work, "esp")
	if err := os.MkdirAll(espDir, 0o755); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	var err error
	if o.Bootloader == install.GRUB {
		j.esp, j.coreImg, err = bootloader.GrubFiles(ctx, j.tools().Grub, j.work, j.root, j.m.RootUUID, bootloader.CmdlineExtra(o.SecureBoot, o.Cmdline), !o.Plain)
		if err == nil && j.moduleKey != nil {
			j.m.SecureBoot = true
			j.m.ModuleKey, err = bootloader.SecureBootFiles(ctx, bootloader.Tools{Runner: j.tools().Runner, Grub: j.tools().Grub, VirtFwVars: j.tools().VirtFwVars}, j.root, j.outTmp, o.OutDir, o.Name, j.moduleKey)
		}
	} else {
		j.esp, err = bootloader.SystemdBootFiles(ctx, espDir, j.root, o.Kernels, j.m.Cmdline)
	}
	if err != nil {
		return fmt.Errorf("image: %s: %w", o.Bootloader, err)
	}
	return nil
}

// cleanupBootloader removes the ESP's files laid out in the work directory,
// GRUB's core.img and the Secure Boot files not moved into OutDir.
func (j *Job) cleanupBootloader(bool) {
	if j.work == "" {
		return
	}
	for _, p := range []string{filepath.Join(j.work, "esp"), filepath.Join(j.work, "esp-grub.cfg"), filepath.Join(j.work, "core.img")} {
		os.RemoveAll(p)
	}
	if j.m == nil || j.outTmp == "" {
		return
	}
	if k := j.m.ModuleKey; k != nil {
		for _, p := range k.Files() {
			os.Remove(filepath.Join(j.outTmp, filepath.Base(p)))
		}
	}
}

// disk writes the raw GPT disk into the temporary output directory: the ESP
// with the boot loader's files and the root filesystem (and GRUB's boot.img
// and core.img for BIOS).
func (j *Job) disk(ctx context.Context) error {
	o := j.o
	layout, err := disk.NewLayout(o.SizeMB, o.ESPSizeMB, j.m.DiskGUID, disk.NewUUID(), disk.NewUUID())
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if o.Bootloader == install.GRUB {
		layout = layout.WithBIOSBoot(disk.NewUUID())
	}
	j.raw = filepath.Join(j.outTmp, o.Name+"."+formats.Raw)
	o.Progress.say("disk: %d MiB GPT (ESP %d MiB, root ext4), mkfs.ext4 -d", o.SizeMB, o.ESPSizeMB)
	if err := disk.Write(ctx, j.tools().Disk, j.raw, layout, j.espVol, j.esp, j.root, j.m.RootUUID); err != nil {
		return fmt.Errorf("image: disk: %w", err)
	}
	if j.coreImg != "" {
		o.Progress.say("disk: GRUB's boot.img in the MBR, core.img in the BIOS boot partition")
		if err := disk.BIOSSetup(j.raw, layout, filepath.Join(j.root, "usr/lib/grub/i386-pc/boot.img"), j.coreImg); err != nil {
			return fmt.Errorf("image: disk: %w", err)
		}
	}
	return nil
}

// cleanupDisk removes the raw disk from the temporary output directory (gone
// already when the formats phase moved it into OutDir as formats.Raw).
func (j *Job) cleanupDisk(bool) {
	if j.raw != "" {
		os.Remove(j.raw)
	}
}

// formats writes each requested format from the raw disk (formats.go) and the
// manifest, and, once every output is complete, renames them into OutDir, the
// manifest last, so that a failed or cancelled build leaves no file under the
// final names.
func (j *Job) formats(ctx context.Context) error {
	o, m := j.o, j.m
	m.BootFirmware = formats.BootFirmware(o.Bootloader)
	for _, f := range o.Formats {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("image: disk: %s: %w", f, err)
		}
		p, virtual, err := formats.Write(ctx, j.tools().forFormats(), j.raw, f, j.outTmp, o.Name, o.Progress)
		if err != nil {
			return fmt.Errorf("image: disk: %w", err)
		}
		o.Progress.say("disk: sha256 of %s", filepath.Base(p))
		size, sum, err := digest(p)
		if err != nil {
			return fmt.Errorf("image: %w", err)
		}
		m.Files = append(m.Files, File{Path: OutputPath(o.OutDir, o.Name, f), Format: f, Size: size, SHA256: sum, VirtualSize: virtual})
		j.outputs = append(j.outputs, p)
	}
	m.Created = time.Now().UTC().Format(time.RFC3339)
	m.Seconds = time.Since(j.start).Seconds()
	mj, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("image: manifest: %w", err)
	}
	manifestTmp := filepath.Join(j.outTmp, o.Name+".manifest.json")
	if err := os.WriteFile(manifestTmp, append(mj, '\n'), 0o644); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	// Every output is complete: move them into place, the manifest last.
	for i, f := range m.Files {
		if err := j.place(j.outputs[i], f.Path); err != nil {
			return err
		}
	}
	if k := m.ModuleKey; k != nil {
		for _, p := range k.Files() {
			if err := j.place(filepath.Join(j.outTmp, filepath.Base(p)), p); err != nil {
				return err
			}
		}
	}
	if err := j.place(manifestTmp, OutputPath(o.OutDir, o.Name, "manifest.json")); err != nil {
		return err
	}
	j.done = true
	o.Progress.say("image %s done in %.0fs", o.Name, time.Since(j.start).Seconds())
	return nil
}

// place renames a finished output tmp to its final path. A file already
// there (an earlier build's) is moved aside into the temporary directory
// first, so that cleanupFormats can put it back when the build fails.
func (j *Job) place(tmp, final string) error {
	if _, err := os.Lstat(final); err == nil {
		aside := filepath.Join(j.outTmp, "previous-"+filepath.Base(final))
		if err := os.Rename(final, aside); err != nil {
			return fmt.Errorf("image: %w", err)
		}
		j.aside = append(j.aside, [2]string{aside, final})
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	j.placed = append(j.placed, final)
	return nil
}

// cleanupFormats removes the formats not moved into OutDir and, when the build
// failed, the outputs it moved there, putting back the earlier files they
// replaced. (On success those are removed with the temporary directory.)
func (j *Job) cleanupFormats(failed bool) {
	for _, p := range j.outputs {
		os.Remove(p) // gone already once moved into OutDir
	}
	if failed {
		for _, p := range j.placed {
			os.Remove(p)
		}
		for _, a := range j.aside {
			os.Rename(a[0], a[1])
		}
		j.done = false
	}
}

// mkdirAll makes dir and its missing parents, returning those it made,
// deepest first.
func mkdirAll(dir string) ([]string, error) {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return missing, nil
}
