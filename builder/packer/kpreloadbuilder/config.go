//go:generate packer-sdc mapstructure-to-hcl2 -type Config
//go:generate ../gendocs.sh config.go

package kpreloadbuilder

import (
	"fmt"
	"os"

	"github.com/hashicorp/packer-plugin-sdk/common"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/packer/internal/pkrcfg"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/remote"
)

// Config is the kpreload builder's configuration: the `source "kpreload" "name" {...}`
// block of a template.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`

	// The image's name: the outputs are `<name>.raw`, `<name>.qcow2` and
	// `<name>.manifest.json` in `output_directory`. Letters, digits, `.`, `_`
	// and `-`. Defaults to the source's name.
	Name string `mapstructure:"name"`
	// The directory the image is written to. It must not exist unless Packer
	// runs with `-force`, which deletes it first; it is deleted again when the
	// build fails or is cancelled. Defaults to `output-<source name>`.
	OutputDir string `mapstructure:"output_directory"`
	// The kernel releases (`uname -r`) to install into the image, such as
	// `6.1.0-56-cloud-amd64`; the first one is the default boot entry. Each must
	// be in the kernel matrix of every recipe in `recipes`.
	Kernels []string `mapstructure:"kernels" required:"true"`
	// The drivers the image carries: recipe names (the `name:` of a recipe in
	// `recipes_dir`, such as `testdriver` or `nvidia-535`) or paths to recipe
	// YAML files. May be empty for an image with kpreload's initramfs and no
	// extra driver.
	Recipes []string `mapstructure:"recipes"`
	// The directory recipe names are looked up in. Defaults to `recipes` in the
	// directory Packer runs in; templates usually set `"${path.root}/../recipes"`.
	RecipesDir string `mapstructure:"recipes_dir"`
	// The kpreload module cache the driver builds are read from and added to.
	// Defaults to `$KPRELOAD_CACHE_DIR`, else `/var/lib/kpreload/cache`.
	CacheDir string `mapstructure:"cache_dir"`
	// Where downloaded packages and unpacked kernels are kept between builds.
	// Defaults to `$KPRELOAD_CACHE`, else `/var/cache/kpreload`.
	DownloadDir string `mapstructure:"download_dir"`
	// Build the driver for every kernel that the cache has no build of, with the
	// real dkms (minutes per kernel for a GPU driver). When false, a missing
	// build is an error that lists what the cache holds. Defaults to true.
	BuildMissing config.Trilean `mapstructure:"build_missing"`
	// A remote module cache: an OCI registry repository, `oci://HOST[:PORT]/REPO`
	// (ECR, GAR, GHCR, Harbor, a local registry). Cells the module cache lacks
	// are pulled from it by their content keys (exactly the cells the image
	// needs, every blob verified); with `build_missing`, cells it lacks too are
	// built and pushed to it. Credentials come from the Docker config and its
	// credential helpers (`docker login`).
	Remote string `mapstructure:"remote"`
	// Talk HTTP, not HTTPS, to the `remote` registry: a local registry only.
	PlainHTTP bool `mapstructure:"plain_http"`
	// Take only cells from `remote` signed by one of these Ed25519 public keys
	// (PEM files; `kpreload cache keygen`): unsigned and foreign-signed cells
	// are refused, naming the key.
	RemoteTrust []string `mapstructure:"remote_trust"`
	// Sign the cells `build_missing` pushes to `remote` with this Ed25519
	// private key (PEM file).
	RemoteSign string `mapstructure:"remote_sign"`
	// Put the driver sets into each initramfs too, with a complete index: `/init`
	// then chooses and loads the drivers while it finds the root (the early
	// decision) instead of after mounting it. The initramfs grows by the sets;
	// the kernel install hook keeps building it this way.
	EarlyDrivers bool `mapstructure:"early_drivers"`
	// Extra Debian packages to install into the image (`name` or `name=version`).
	Packages []string `mapstructure:"packages"`
	// A registry configuration file for the image's kernel hook (`remote`,
	// `plain_http`, `credentials`, `trust`, `timeout`): baked in at
	// `/etc/kpreload/remote.yaml` with the keys and credentials it names, so
	// that a kernel installed later gets its driver cells from the registry,
	// verified against the trusted keys.
	RemoteConfig string `mapstructure:"remote_config"`
	// The image's boot loader: `systemd-boot` (UEFI only) or `grub` (one disk
	// that boots under BIOS and UEFI, as Debian's cloud images: a BIOS boot
	// partition and GRUB's UEFI image, kpreload's entries first in
	// `grub.cfg`). Defaults to `systemd-boot`.
	Bootloader string `mapstructure:"bootloader"`
	// Build an image that boots with UEFI Secure Boot on (needs `bootloader =
	// "grub"`): Debian's signed shim, GRUB and kernel, the drivers' modules
	// signed by the recipes' one signing certificate, which is written beside
	// the image as `<name>.module-key.der` and `.pem` (the clouds' UEFI
	// signature data) and enrolled as a MOK in `<name>.ovmf-vars.fd` (for
	// QEMU).
	SecureBoot bool `mapstructure:"secure_boot"`
	// Add Debian's cloud-init with the datasources clouds use (NoCloud,
	// ConfigDrive, EC2, GCE, Azure, OpenStack): the default user and its SSH
	// key from the instance's metadata, the root partition grown to the
	// disk. No image carries SSH host keys or a machine-id either way.
	CloudInit bool `mapstructure:"cloud_init"`
	// An instance YAML file baked into the image as `/etc/kpreload/instance.yaml`:
	// the driver request `/init` uses when the kernel command line and QEMU's
	// fw_cfg carry none.
	InstanceFile string `mapstructure:"instance_file"`
	// Added to every boot entry's kernel command line after `root=UUID=<root> rw`,
	// such as `console=ttyS0 kpreload.report=/dev/ttyS1`.
	KernelCmdline string `mapstructure:"kernel_cmdline"`
	// The whole disk's size: a number of MiB or a number with a `M`, `G` or `T`
	// suffix (binary units), such as `4G`. Defaults to 4096 MiB.
	DiskSize string `mapstructure:"disk_size"`
	// The EFI system partition's size, in the same units as `disk_size`.
	// Defaults to 256 MiB.
	ESPSize string `mapstructure:"esp_size"`
	// The disk formats to write, each once: `raw` (`<name>.raw`), `qcow2`
	// (`<name>.qcow2`), `vhd` (`<name>.vhd`, a fixed VHD of a whole number of
	// MiB, for Azure), `vmdk` (`<name>.vmdk`, streamOptimized, for EC2's
	// import-image and VMware) and `gce` (`<name>.tar.gz`: `disk.raw`, grown to
	// a whole GiB, in a sparse GNU tar, gzip'd, for GCE's image import).
	// Defaults to `raw` and `qcow2`. Every file is in the artifact.
	Formats []string `mapstructure:"formats"`
	// The Debian release the root filesystem is made from: `bookworm` (Debian
	// 12) or `trixie` (Debian 13; the recipes' packages still come from each
	// recipe's own `suite`). Defaults to `bookworm`.
	Suite string `mapstructure:"suite"`
	// The Debian archive. Defaults to `http://deb.debian.org/debian`.
	Mirror string `mapstructure:"mirror"`
	// The Debian security archive. Defaults to `http://deb.debian.org/debian-security`.
	SecurityMirror string `mapstructure:"security_mirror"`
	// Where root filesystem tarballs are kept between builds (keyed by
	// everything that goes into them, so a cached one cannot be stale); `off`
	// always runs mmdebstrap. Defaults to `/var/cache/kpreload/rootfs`.
	RootfsCacheDir string `mapstructure:"rootfs_cache_dir"`
	// A static build of the kpreload CLI, installed into the image for its
	// kernel install hook. Defaults to `kpreload` next to the plugin
	// binary, else `bin/kpreload` in the directory Packer runs in.
	KpreloadBinary string `mapstructure:"kpreload_binary"`
	// The static `/init` program (`make build` makes `bin/kpreload-init`).
	// Defaults to `kpreload-init` next to the plugin binary, else
	// `bin/kpreload-init` in the directory Packer runs in.
	InitBinary string `mapstructure:"init_binary"`
	// Where the build's work directory is made; it needs about twice the disk
	// size free. Defaults to the system's temporary directory.
	TempDir string `mapstructure:"temp_dir"`

	ctx interpolate.Context

	// recipes are the loaded Recipes, in order.
	recipes []*recipe.Recipe
	// remote is the opened Remote, or nil.
	remote *remote.Remote
	// bootloader is Bootloader, parsed.
	bootloader install.Bootloader
	// sizeMB and espMB are DiskSize and ESPSize in MiB (0: image's default).
	sizeMB, espMB int
}

// Prepare decodes raws into c, fills in defaults and checks everything it can
// before a build starts, returning every problem at once.
func (c *Config) Prepare(raws ...interface{}) ([]string, error) {
	err := config.Decode(c, &config.DecodeOpts{
		PluginType:         BuilderID,
		Interpolate:        true,
		InterpolateContext: &c.ctx,
	}, raws...)
	if err != nil {
		return nil, err
	}
	var (
		errs     *packersdk.MultiError
		warnings []string
	)
	add := func(err error) { errs = packersdk.MultiErrorAppend(errs, err) }

	if c.Name == "" {
		c.Name = c.PackerBuildName
	}
	if c.Name == "" {
		c.Name = "kpreload"
	}
	if c.OutputDir == "" {
		c.OutputDir = "output-" + c.Name
	}
	if c.RecipesDir == "" {
		c.RecipesDir = "recipes"
	}
	if c.CacheDir == "" {
		c.CacheDir = image.DefaultCacheDir()
	}
	if c.DownloadDir == "" {
		c.DownloadDir = image.DefaultDownloadDir()
	}
	if c.KpreloadBinary == "" {
		c.KpreloadBinary = pkrcfg.DefaultBinary("kpreload")
	}
	if c.InitBinary == "" {
		c.InitBinary = pkrcfg.DefaultBinary("kpreload-init")
	}

	var err2 error
	if c.sizeMB, err2 = pkrcfg.ParseSize("disk_size", c.DiskSize); err2 != nil {
		add(err2)
	}
	if c.espMB, err2 = pkrcfg.ParseSize("esp_size", c.ESPSize); err2 != nil {
		add(err2)
	}
	var rerrs []error
	c.recipes, rerrs = pkrcfg.LoadRecipes(c.RecipesDir, c.Recipes)
	for _, e := range rerrs {
		add(e)
	}
	for _, e := range pkrcfg.CheckKernels(c.Kernels, c.recipes) {
		add(e)
	}
	for _, e := range c.checkDirs() {
		add(e)
	}
	if c.Remote != "" {
		o := remote.Options{PlainHTTP: c.PlainHTTP}
		if len(c.RemoteTrust) > 0 {
			if o.Trust, err2 = cellsign.LoadTrust(c.RemoteTrust...); err2 != nil {
				add(fmt.Errorf("remote_trust: %w", err2))
			}
		}
		if c.RemoteSign != "" {
			if o.Signer, err2 = cellsign.LoadSigner(c.RemoteSign); err2 != nil {
				add(fmt.Errorf("remote_sign: %w", err2))
			}
		}
		if c.remote, err2 = remote.Open(c.Remote, o); err2 != nil {
			add(fmt.Errorf("remote: %w", err2))
		}
	} else if c.PlainHTTP || len(c.RemoteTrust) > 0 || c.RemoteSign != "" {
		add(fmt.Errorf("plain_http, remote_trust and remote_sign are set but remote is not"))
	}
	if c.bootloader, err2 = install.ParseBootloader(c.Bootloader); err2 != nil {
		add(fmt.Errorf("bootloader: %w", err2))
	}
	if c.InstanceFile != "" {
		if st, err := os.Stat(c.InstanceFile); err == nil && st.IsDir() {
			add(fmt.Errorf("instance_file: %s is a directory, want an instance YAML file", c.InstanceFile))
		} else if err == nil {
			if err := pkrcfg.CheckInstance(c.InstanceFile); err != nil {
				add(err)
			}
		}
	}
	// The image library checks names, formats, sizes, binaries and files; its
	// problems join ours (each on its own line) instead of stopping at the first.
	if err := c.Options().Validate(); err != nil {
		for _, e := range pkrcfg.Unjoin(err) {
			add(fmt.Errorf("image: %w", e))
		}
	}
	if len(c.recipes) == 0 && len(c.Recipes) == 0 {
		warnings = append(warnings, "recipes is empty: the image carries kpreload's /init but no driver")
	}
	if errs != nil && len(errs.Errors) > 0 {
		return warnings, errs
	}
	return warnings, nil
}

// Options is the image the configuration describes, for image.Build (without
// Progress, which the build step sets).
func (c *Config) Options() image.Options {
	return image.Options{
		Name:           c.Name,
		OutDir:         c.OutputDir,
		Suite:          c.Suite,
		Mirror:         c.Mirror,
		SecurityMirror: c.SecurityMirror,
		Kernels:        c.Kernels,
		Recipes:        c.recipes,
		CacheDir:       c.CacheDir,
		BuildMissing:   c.BuildMissing.True() || c.BuildMissing == config.TriUnset,
		Remote:         c.remote,
		EarlyDrivers:   c.EarlyDrivers,
		Bootloader:     c.bootloader,
		SecureBoot:     c.SecureBoot,
		CloudInit:      c.CloudInit,
		RemoteConfig:   c.RemoteConfig,
		DownloadDir:    c.DownloadDir,
		Packages:       c.Packages,
		Instance:       c.InstanceFile,
		Cmdline:        c.KernelCmdline,
		SizeMB:         c.sizeMB,
		ESPSizeMB:      c.espMB,
		KpreloadBinary: c.KpreloadBinary,
		InitBinary:     c.InitBinary,
		Formats:        c.Formats,
		RootfsCacheDir: c.RootfsCacheDir,
		TempDir:        c.TempDir,
	}
}

// checkDirs checks the output directory (absent unless -force, its parent
// writable) and, when missing builds may be added, the cache directory.
func (c *Config) checkDirs() []error {
	var errs []error
	if st, err := os.Stat(c.OutputDir); err == nil {
		if !c.PackerForce {
			errs = append(errs, fmt.Errorf("output_directory %s already exists: remove it or run packer build with -force", c.OutputDir))
		} else if !st.IsDir() {
			errs = append(errs, fmt.Errorf("output_directory %s is not a directory", c.OutputDir))
		}
	}
	if err := pkrcfg.Creatable(c.OutputDir); err != nil {
		errs = append(errs, fmt.Errorf("output_directory: %w", err))
	}
	if c.BuildMissing != config.TriFalse || c.Remote != "" {
		if err := pkrcfg.Creatable(c.CacheDir); err != nil {
			errs = append(errs, fmt.Errorf("cache_dir (written to, since build_missing or remote is on): %w", err))
		}
	}
	return errs
}
