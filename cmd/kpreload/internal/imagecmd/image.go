// Package imagecmd is kpreload image build: a golden disk image
// (builder/image) of a Debian root, its kernels, bootloader and module cache,
// in the formats asked for.
package imagecmd

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cells"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/clirun"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdenv"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/cmdout"
	"github.com/kpreload/kpreload/cmd/kpreload/internal/mistakes"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/internal/layout"
	"github.com/kpreload/kpreload/internal/progress"
)

// New builds kpreload image and image build.
func New() *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "Build bootable golden images that carry precompiled drivers",
		Long: `Image assembles kpreload golden images offline, without a VM or loop mounts:
a Debian root filesystem (mmdebstrap), the module cache for the image's kernels,
each driver version's userspace, the kpreload initramfs per kernel, systemd-boot
on an EFI system partition, and a kernel install hook that regenerates the
initramfs from the cache when a kernel is installed later.`,
		Example: `  kpreload image build --name ci --kernel 6.1.0-56-cloud-amd64 --recipe testdriver --build-missing --out out/images --dry-run`,
	}
	c.AddCommand(newImageBuildCmd())
	return c
}

// imageBuildCommand is kpreload image build: its options, as the flags
// set them.
type imageBuildCommand struct {
	o          image.Options
	recipeArgs []string
	rf         cells.RemoteFlags
	// allowUnsigned lets --remote go without --trust.
	allowUnsigned bool
	addFiles      []string
	recipesDir    string
	asJSON        bool
	bootloader    string
	dryRun        bool
}

func newImageBuildCmd() *cobra.Command { return (&imageBuildCommand{}).build() }

// build makes the command: its help and its flags.
func (m *imageBuildCommand) build() *cobra.Command {
	c := &cobra.Command{
		Use:   "build --name NAME --kernel KVER... [--recipe R]... [flags]",
		Short: "Build a bootable disk image (raw, qcow2, vhd, vmdk, gce) with precompiled drivers",
		Long: `Build makes OUT/NAME.raw, OUT/NAME.qcow2 (or the --format list) and
OUT/NAME.manifest.json:

  - a Debian root filesystem made by mmdebstrap (minbase, systemd, udev, the
    linux-image-KVER packages; kpreload stands in for initramfs-tools), cached
    under ` + image.DefaultRootfsCacheDir + ` for the same inputs on the same day;
  - the module cache sets of every --recipe for every --kernel, copied into
    /` + image.ImageCacheDir + ` (missing cells are an error listing what the cache
    has, or are built with the real dkms with --build-missing; with --remote
    oci://HOST/REPO they are first pulled from that registry by content key,
    verified against the builders' keys given with --trust (or unsigned, on
    purpose, with --allow-unsigned), and cells built with --build-missing are
    pushed to it);
  - each driver version's userspace packages unpacked under /` + image.ImageDriversDir + `/VERSION,
    firmware packages, the kpreload binaries, the instance YAML (--instance);
  - the kpreload initramfs of each kernel and a systemd-boot ESP with one
    loader entry per kernel (root=UUID=... rw plus --cmdline);
  - /` + image.ImagePostinstHook + `, which rebuilds the initramfs and the boot entry
    of kernels installed later from the cache, and warns when the cache has no
    cell for them.

The disk is built without mounting anything (sfdisk on the file, mkfs.vfat +
mtools, mkfs.ext4 -d), so it works in containers and CI, and written in each
--format the clouds import:

  raw    NAME.raw      the disk itself
  qcow2  NAME.qcow2    QEMU, OpenStack
  vhd    NAME.vhd      Azure: fixed VHD, a whole number of MiB
  vmdk   NAME.vmdk     EC2 import-image, VMware: streamOptimized
  gce    NAME.tar.gz   GCE: disk.raw (grown to a whole GiB) in a sparse GNU tar, gzip'd

The manifest says which firmware the image boots under (boot_firmware: uefi
for systemd-boot, bios and uefi for GRUB) and whether it boots with Secure
Boot on (secure_boot), what each cloud's import asks. Outputs appear only when
complete. Progress goes to stderr (on a terminal under one status line: phase
done of all, the phase in progress, elapsed, an estimate of the time left); the manifest summary (or --json, the
whole manifest) to stdout.

--dry-run checks the options, the recipes and the binaries the image carries,
and prints what the build would write and its phases (with --json: as JSON),
building nothing; the archive's kernels, the tools and the driver cells are
checked by the build's first phase. Each example below builds without
--dry-run.`,
		Example: `  kpreload image build --name ci --kernel 6.1.0-56-cloud-amd64 --recipe testdriver --build-missing --out out/images --dry-run
  kpreload image build --name gpu --kernel 6.1.0-56-cloud-amd64 --recipe nvidia-535 --format vmdk,vhd,gce --dry-run
  kpreload image build --name gpu --kernel 6.1.0-56-cloud-amd64 --recipe nvidia-535 --instance images/instance-gpu.yaml --cmdline console=ttyS0 --json --dry-run`,
		Args: mistakes.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := m.validate(); err != nil {
				return err
			}
			return m.run(cmd)
		},
	}
	m.flags(c)
	return c
}

// flags adds the flags to c.
func (m *imageBuildCommand) flags(c *cobra.Command) {
	o, rf := &m.o, &m.rf
	f := c.Flags()
	f.StringVar(&o.Name, "name", "", "image name: output files are OUT/NAME.{raw,qcow2,vhd,vmdk,tar.gz,manifest.json}")
	f.StringArrayVar(&o.Kernels, "kernel", nil, "kernel release to install (linux-image-KVER; repeatable, the first boots by default)")
	f.StringArrayVar(&m.recipeArgs, "recipe", nil, "driver recipe the image carries: a file, or a name in --recipes (repeatable)")
	f.StringVar(&m.recipesDir, "recipes", "", "directory of recipes for --recipe names"+cells.RecipesDefaultHelp)
	f.StringVar(&o.Stage.CacheDir, "cache", cmdenv.CacheDefaultDir(), "module cache the driver cells are read from")
	f.BoolVar(&o.Stage.BuildMissing, "build-missing", false, "build cells missing from the cache with dkms instead of failing")
	rf.Register(f) // --remote: pull the cells the image needs; with --build-missing, push what was built
	f.BoolVar(&m.allowUnsigned, "allow-unsigned", false, "with --remote and no --trust: take the image's driver cells unsigned, on purpose (without it --remote needs --trust)")
	f.StringVar(&o.OutDir, "out", ".", "output directory")
	f.StringVar(&o.Stage.Instance, "instance", "", "instance YAML file to bake in at /"+image.ImageInstance)
	f.StringVar(&o.Stage.RemoteConfig, "remote-config", "", "registry configuration (remote, plain_http, credentials, trust, timeout) for the kernel hook, baked in at /"+install.RemoteFile+" with the keys and credentials it names")
	f.StringVar(&o.Boot.Cmdline, "cmdline", "", "extra kernel command line for the boot entries")
	f.BoolVar(&o.Plain, "plain", false, "an image without kpreload, like Debian's cloud images (GRUB, initramfs-tools): a base for the Packer provisioner; needs --bootloader grub")
	f.BoolVar(&o.Rootfs.CloudInit, "cloud-init", false, "add Debian's cloud-init (NoCloud, ConfigDrive, EC2, GCE, Azure, OpenStack): the default user and SSH key from the instance's metadata, the root grown to the disk (no image carries SSH host keys or a machine-id either way)")
	f.BoolVar(&o.Boot.SecureBoot, "secure-boot", false, "boot with UEFI Secure Boot on (needs --bootloader grub): Debian's signed shim, GRUB and kernel; the modules are signed with the recipes' one key or, where no recipe names one, the module cache's own (made on first use; kpreload keys show); its certificate is written beside the image (NAME.module-key.der/.pem) and enrolled as a MOK in NAME.ovmf-vars.fd for kpreload boot --firmware uefi-secure --vars")
	f.StringVar(&m.bootloader, "bootloader", string(install.SystemdBoot), "systemd-boot (UEFI) or grub (one disk that boots under BIOS and UEFI, as Debian's cloud images)")
	f.StringArrayVar(&o.Rootfs.Packages, "package", nil, "extra Debian package to install (repeatable)")
	f.StringArrayVar(&m.addFiles, "add", nil, "extra file DEST=SRC: copy the host file SRC to the absolute path DEST in the image (repeatable)")
	f.StringArrayVar(&o.Rootfs.Enable, "enable", nil, "systemd unit to enable in the image, e.g. one --add brought (repeatable)")
	f.BoolVar(&o.Stage.EarlyDrivers, "early-drivers", false, "put the driver sets into the initramfs with a complete index: /init chooses and loads them while it finds the root (larger initramfs)")
	f.StringVar(&o.Rootfs.Suite, "suite", image.DefaultSuite, "Debian release")
	f.StringVar(&o.Rootfs.Mirror, "mirror", image.DefaultMirror, "Debian archive")
	f.IntVar(&o.Disk.SizeMB, "size", image.DefaultSizeMB, "disk size in MiB")
	f.StringSliceVar(&o.Formats, "format", []string{formats.Raw, formats.QCOW2}, "disk formats to write, comma-separated: "+strings.Join(formats.Names(), ", ")+" (gce: NAME.tar.gz)")
	f.StringVar(&o.Stage.KpreloadBinary, "kpreload-binary", "", "static kpreload binary to install in the image (default: this executable)")
	f.StringVar(&o.Stage.InitBinary, "init", "", "the static /init binary (default: kpreload-init beside this executable, else in "+layout.LibDir+")")
	f.StringVar(&o.Rootfs.CacheDir, "rootfs-cache", image.DefaultRootfsCacheDir, `where mmdebstrap tarballs are kept for the day ("off": always run mmdebstrap)`)
	f.BoolVar(&o.Rootfs.EmptyRootPassword, "empty-root-password", false, "let root log in on the console without a password (test images only)")
	f.BoolVar(&m.asJSON, "json", false, "print the image manifest as JSON")
	f.BoolVar(&m.dryRun, "dry-run", false, "check the options and recipes, print what the build would write and its phases, and build nothing")
}

// validate checks the flags and fills in the image's options they make:
// the files to add and the bootloader.
func (m *imageBuildCommand) validate() error {
	o := &m.o
	if o.Name == "" {
		return fmt.Errorf("--name is required")
	}
	if len(o.Kernels) == 0 {
		return fmt.Errorf("--kernel is required (a kernel release such as 6.1.0-56-cloud-amd64; repeatable)")
	}
	if err := formats.Check(o.Formats); err != nil {
		return fmt.Errorf("--format: %w", err)
	}
	if err := m.rf.ImageTrust(m.allowUnsigned); err != nil {
		return err
	}
	for _, a := range m.addFiles {
		dst, src, ok := strings.Cut(a, "=")
		if !ok || dst == "" || src == "" {
			return fmt.Errorf("--add %q: want DEST=SRC (an absolute path in the image = a host file)", a)
		}
		if o.Rootfs.Files == nil {
			o.Rootfs.Files = map[string]string{}
		}
		o.Rootfs.Files[dst] = src
	}
	bl, err := install.ParseBootloader(m.bootloader)
	if err != nil {
		return err
	}
	o.Boot.Loader = bl
	return nil
}

// run opens the registry, reads the recipes, builds the image and prints
// its manifest, or with --dry-run what it would build.
func (m *imageBuildCommand) run(cmd *cobra.Command) error {
	ctx, stop := signal.NotifyContext(clirun.Context(cmd), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := &m.o
	rm, err := m.rf.Open()
	if err != nil {
		return err
	}
	o.Stage.Remote = rm
	if len(m.recipeArgs) > 0 {
		if o.Stage.Recipes, err = cells.LoadRecipes(m.recipeArgs, m.recipesDir); err != nil {
			return err
		}
	}
	if o.Stage.KpreloadBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this executable for the image (pass --kpreload-binary): %w", err)
		}
		o.Stage.KpreloadBinary = exe
	}
	if o.Stage.InitBinary == "" {
		o.Stage.InitBinary = cmdenv.DefaultInit()
	}
	if o.Stage.DownloadDir == "" {
		o.Stage.DownloadDir = cmdenv.DownloadDir()
	}
	if m.dryRun {
		return m.dryRunJob(cmd.OutOrStdout())
	}
	errw := cmd.ErrOrStderr()
	start := time.Now()
	line := progress.New(errw, cmdout.IsTerminal(errw), time.Now)
	o.Progress = func(msg string) {
		line.Note(fmt.Sprintf("[%6.1fs] %s", time.Since(start).Seconds(), msg))
	}
	stopTicks := cmdout.TickEverySecond(line)
	j := image.NewJob(*o)
	err = image.RunPhases(ctx, image.ShowPhases(j.Phases(), j.PhaseCosts(), line, time.Now))
	stopTicks()
	line.Stop()
	if err != nil {
		return err
	}
	if m.asJSON {
		return cmdout.PrintJSON(cmd.OutOrStdout(), j.Manifest())
	}
	printImageManifest(cmd.OutOrStdout(), j.Manifest(), o.OutDir)
	return nil
}

// printImageManifest prints the summary of an image's manifest m, built
// into outDir.
func printImageManifest(out io.Writer, m *image.Manifest, outDir string) {
	fmt.Fprintf(out, "image %s built in %.0fs (root UUID %s)\n", m.Name, m.Seconds, m.RootUUID)
	for _, f := range m.Files {
		fmt.Fprintf(out, "  %-6s %s  %d bytes  sha256 %s\n", f.Format, f.Path, f.Size, f.SHA256)
	}
	fmt.Fprintf(out, "  manifest %s\n", image.OutputPath(outDir, m.Name, "manifest.json"))
	for _, k := range m.Kernels {
		fmt.Fprintf(out, "  kernel %s (%s)\n", k, m.KernelPackages[k])
	}
	for _, d := range m.Drivers {
		fmt.Fprintf(out, "  driver %s %s %s for %s: set %s\n", d.Driver, d.Version, d.Flavor, d.Kernel, d.SetID[:16])
	}
	fmt.Fprintf(out, "  cmdline %s\n", m.Cmdline)
	fmt.Fprintf(out, "  boots under %s (secure boot: %v)\n", strings.Join(m.BootFirmware, " and "), m.SecureBoot)
}

// dryRunJob is image build --dry-run: the options, the recipes and the
// instance file checked, what the build would write and its phases
// printed on w, nothing built.
func (m *imageBuildCommand) dryRunJob(w io.Writer) error {
	j := image.NewJob(m.o)
	if err := j.Options().Validate(); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if m.o.Stage.Instance != "" {
		if _, err := instance.ReadFile(m.o.Stage.Instance); err != nil {
			return fmt.Errorf("--instance: %w", err)
		}
	}
	return printImagePlan(w, j, m.asJSON)
}

// imagePlan is what image build --dry-run prints.
type imagePlan struct {
	Name       string   `json:"name"`
	Suite      string   `json:"suite"`
	Bootloader string   `json:"bootloader"`
	Kernels    []string `json:"kernels"`
	Recipes    []string `json:"recipes"`
	Cache      string   `json:"cache"`
	// BuildMissing says cells missing from the cache are built with dkms.
	BuildMissing bool `json:"build_missing"`
	// Outputs are the files the build writes, the manifest last.
	Outputs []string `json:"outputs"`
	// Phases are the build's phases in order: name and what each does.
	Phases [][2]string `json:"phases"`
}

// printImagePlan is image build --dry-run: what j would write and its
// phases, as text or (asJSON) JSON.
func printImagePlan(w io.Writer, j *image.Job, asJSON bool) error {
	o := j.Options()
	p := imagePlan{Name: o.Name, Suite: o.Rootfs.Suite, Bootloader: string(o.Boot.Loader), Kernels: o.Kernels, Recipes: []string{}, Cache: o.Stage.CacheDir, BuildMissing: o.Stage.BuildMissing}
	for _, r := range o.Stage.Recipes {
		p.Recipes = append(p.Recipes, r.Name)
	}
	for _, f := range o.Formats {
		p.Outputs = append(p.Outputs, image.OutputPath(o.OutDir, o.Name, f))
	}
	p.Outputs = append(p.Outputs, image.OutputPath(o.OutDir, o.Name, "manifest.json"))
	for _, ph := range j.Phases() {
		p.Phases = append(p.Phases, [2]string{ph.Name, ph.Title})
	}
	if asJSON {
		return cmdout.PrintJSON(w, p)
	}
	cells := "from " + p.Cache
	if p.BuildMissing {
		cells += ", missing ones built with dkms"
	}
	fmt.Fprintf(w, "image %s: Debian %s, %s, kernels %s, recipes %s (cells %s)\n", p.Name, p.Suite, p.Bootloader, strings.Join(p.Kernels, " "), strings.Join(p.Recipes, " "), cells)
	fmt.Fprintf(w, "  would write %s\n", strings.Join(p.Outputs, ", "))
	for i, ph := range p.Phases {
		fmt.Fprintf(w, "  %d. %s: %s\n", i+1, ph[0], ph[1])
	}
	_, err := fmt.Fprintln(w, "dry run: nothing built")
	return err
}
