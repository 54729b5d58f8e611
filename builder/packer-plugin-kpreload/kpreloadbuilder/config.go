//go:generate go tool packer-sdc mapstructure-to-hcl2 -type Config
//go:generate go tool packer-sdc struct-markdown

package kpreloadbuilder

import (
	"fmt"
	"os"

	"github.com/hashicorp/packer-plugin-sdk/common"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/packer-plugin-kpreload/internal/pkrcfg"
)

// Config is the kpreload builder's configuration: the `source "kpreload" "name" {...}`
// block of a template.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`
	// The fields the provisioner has too: kernels, recipes, caches, remote,
	// early drivers, instance file, kernel command line, binaries.
	pkrcfg.Shared `mapstructure:",squash"`

	// The image's name: the outputs are `<name>.raw`, `<name>.qcow2` and
	// `<name>.manifest.json` in `output_directory`. Letters, digits, `.`, `_`
	// and `-`. Defaults to the source's name.
	Name string `mapstructure:"name"`
	// The directory the image is written to. It must not exist unless Packer
	// runs with `-force`, which deletes it first; it is deleted again when the
	// build fails or is cancelled. Defaults to `output-<source name>`.
	OutputDir string `mapstructure:"output_directory"`
	// Extra Debian packages to install into the image (`name` or `name=version`).
	Packages []string `mapstructure:"packages"`
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
	// Where the build's work directory is made; it needs about twice the disk
	// size free. Defaults to the system's temporary directory.
	TempDir string `mapstructure:"temp_dir"`

	ctx interpolate.Context

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
	var err2 error
	if c.sizeMB, err2 = pkrcfg.ParseSize("disk_size", c.DiskSize); err2 != nil {
		add(err2)
	}
	if c.espMB, err2 = pkrcfg.ParseSize("esp_size", c.ESPSize); err2 != nil {
		add(err2)
	}
	for _, e := range c.Shared.Prepare() {
		add(e)
	}
	for _, e := range c.checkDirs() {
		add(e)
	}
	if c.bootloader, err2 = install.ParseBootloader(c.Bootloader); err2 != nil {
		add(fmt.Errorf("bootloader: %w", err2))
	}
	// The image library checks names, formats, sizes, binaries and files; its
	// problems join ours (each on its own line) instead of stopping at the first.
	if err := c.Options().Validate(); err != nil {
		for _, e := range pkrcfg.Unjoin(err) {
			add(fmt.Errorf("image: %w", e))
		}
	}
	if len(c.LoadedRecipes()) == 0 && len(c.Recipes) == 0 {
		warnings = append(warnings, "recipes is empty: the image carries kpreload's /init but no driver")
	}
	if errs != nil && len(errs.Errors) > 0 {
		return warnings, errs
	}
	return warnings, nil
}

// Options is the image the configuration describes, for image.NewJob
// (without Progress, which Builder.Run sets).
func (c *Config) Options() image.Options {
	return image.Options{
		Name:    c.Name,
		OutDir:  c.OutputDir,
		Kernels: c.Kernels,
		Rootfs: rootfs.Options{
			Suite:          c.Suite,
			Mirror:         c.Mirror,
			SecurityMirror: c.SecurityMirror,
			Packages:       c.Packages,
			CloudInit:      c.CloudInit,
			CacheDir:       c.RootfsCacheDir,
		},
		Stage:   c.StageOptions(),
		Boot:    bootloader.Options{Loader: c.bootloader, Cmdline: c.KernelCmdline, SecureBoot: c.SecureBoot},
		Disk:    disk.Options{SizeMB: c.sizeMB, ESPSizeMB: c.espMB},
		Formats: c.Formats,
		TempDir: c.TempDir,
	}
}

// checkDirs checks the output directory: absent unless -force, its parent
// writable.
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
	return errs
}
