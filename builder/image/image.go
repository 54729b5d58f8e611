// Package image assembles kpreload golden images offline, with no VM and no loop
// mounts: a Debian root filesystem made by mmdebstrap (rootfs), everything
// kpreload puts into an image (stage: the module cache subset for the image's
// kernels, each driver version's userspace side by side, firmware, the
// kpreload binaries, the kernel install hook, the kpreload initramfs per
// kernel), the boot loader (bootloader: an EFI system partition with
// systemd-boot and one loader entry per kernel, or GRUB for BIOS and UEFI), and
// a GPT disk (disk: sfdisk on the image file, mkfs.ext4 -d, mkfs.vfat + mtools)
// written in the formats the clouds import (formats: raw, qcow2, VHD, VMDK,
// GCE's tar.gz) with a manifest of what went in.
//
// This package holds the build as a Job of phases (Build runs them, the Packer
// builder runs each as a step), its Options, the Manifest and the progress
// display; each stage's work lives in its subpackage. stage.Stage alone fills
// a directory tree (a staging directory for another builder's image, as the
// Packer provisioner uses it, or the root filesystem Build is assembling) and
// never assumes it runs on the image itself.
package image

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/internal/progress"
	"github.com/kpreload/kpreload/internal/version"
	"github.com/kpreload/kpreload/kmodcache/names"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// Defaults Resolve fills in where an Options field is left zero.
const (
	// DefaultSuite is the Debian release images are built from (Rootfs.Suite).
	DefaultSuite = "bookworm"
	// DefaultMirror is the Debian archive mmdebstrap and apt-get download use
	// (Rootfs.Mirror).
	DefaultMirror = "http://deb.debian.org/debian"
	// DefaultSecurityMirror is the Debian security archive (Rootfs.SecurityMirror).
	DefaultSecurityMirror = "http://deb.debian.org/debian-security"
	// DefaultSizeMB is the disk size when Disk.SizeMB is 0: room for the root
	// filesystem, the ESP and a GPU driver's cache and userspace.
	DefaultSizeMB = 4096
	// DefaultESPSizeMB is the EFI system partition's size (Disk.ESPSizeMB):
	// kernels and kpreload initramfs images of a few kernels, with room for
	// later kernel updates.
	DefaultESPSizeMB = 256
	// DefaultRootfsCacheDir holds mmdebstrap tarballs between builds (Rootfs.CacheDir).
	DefaultRootfsCacheDir = "/var/cache/kpreload/rootfs"
)

// Paths inside an image (and inside a stage.Stage root), relative to its root: the
// same as builder/install's, which makes the root boot them.
const (
	// ImageCacheDir is the module cache subset for the image's kernels; /init's
	// root cache phase reads index/<release>.json there before switch_root.
	ImageCacheDir = install.CacheDir
	// ImageEarlyDrivers, when present in an image, says its initramfs images
	// carry the driver sets and a complete index (Options.Stage.EarlyDrivers): the
	// kernel install hook builds them that way too.
	ImageEarlyDrivers = install.EarlyDrivers
	// ImageDriversDir holds each driver version's userspace, unpacked with dpkg -x,
	// as <version>/ (side by side, so /init can choose the version at boot).
	ImageDriversDir = stage.DriversDir
	// ImageKpreload is the kpreload CLI (static), used by the kernel install hook.
	ImageKpreload = install.Kpreload
	// ImageInit is the static /init every kpreload initramfs carries.
	ImageInit = install.Init
	// ImageInstance is the instance YAML baked into the image, if any.
	ImageInstance = install.Instance
	// ImageCmdline is the kernel command line of systemd-boot entries
	// (root=UUID=... and Options.Boot.Cmdline), one line.
	ImageCmdline = install.Cmdline
	// ImagePostinstHook makes the kpreload initramfs and boot entry of a newly installed kernel.
	ImagePostinstHook = install.PostinstHook
	// ImagePostrmHook removes a removed kernel's initramfs and boot entry.
	ImagePostrmHook = install.PostrmHook
	// ImageInitramfsDir holds the kpreload initramfs of each kernel as
	// initrd.img-<release>.
	ImageInitramfsDir = install.InitramfsDir
	// ImageESPMount is where the image mounts its EFI system partition (fstab).
	ImageESPMount = install.ESPMount
)

// Progress receives one human-readable line per long step ("rootfs: mmdebstrap
// bookworm (12 packages)", "disk: qemu-img convert to qcow2"). It may be nil.
type Progress func(msg string)

// Options describes one image for Build: its name, where it goes and its
// kernels, then each stage's own options (the root filesystem, what kpreload
// stages into it, the boot loader, the disk, the formats), then a few
// build-wide knobs. Resolve fills in the defaults, once; Validate checks the
// whole.
type Options struct {
	// Name is the image's name: the output files are <OutDir>/<Name>.raw,
	// <Name>.qcow2 (by Formats: formats.File) and <Name>.manifest.json. Letters, digits, '.', '_' and '-'.
	Name string
	// OutDir is where the outputs are written (created if missing).
	OutDir string
	// Kernels are the kernel releases to install (uname -r, such as
	// "6.1.0-56-cloud-amd64"), as linux-image-<release> packages. At least one;
	// the first is the default boot entry. Resolve hands them to Stage.
	Kernels []string

	// Rootfs is the root filesystem (the rootfs and configure phases): the
	// Debian suite (default DefaultSuite) and mirrors (DefaultMirror,
	// DefaultSecurityMirror), extra packages, files and units, cloud-init,
	// the mmdebstrap tarball cache (default DefaultRootfsCacheDir).
	Rootfs rootfs.Options
	// Stage is what kpreload puts into the image (the drivers and initramfs
	// phases, stage.EnsureCells and stage.Stage): the recipes and the module
	// cache they are read from (default DefaultCacheDir), whether missing
	// cells are built or pulled from a registry, the downloads directory
	// (default DefaultDownloadDir), the kernel lister the kernels are checked
	// against (default the archive's package lists there), the kpreload
	// binaries (both required), the instance file, the kernel hook's registry
	// configuration and the early drivers. The image sets the rest itself:
	// Resolve copies Kernels into Stage.Kernels (Validate refuses others)
	// and Progress into Stage.Progress unless it is set, the initramfs phase
	// adds the loader entries' command line (Stage.Cmdline) and the job's
	// tools; Stage.ModulesDir and Stage.NoInitramfs stay unset (Validate
	// refuses them).
	Stage stage.Options
	// Boot is the boot loader (the bootloader phase): systemd-boot (the
	// default) or GRUB, the extra kernel command line, Secure Boot.
	Boot bootloader.Options
	// Disk is the GPT disk (the disk phase): its size (default
	// DefaultSizeMB) and its ESP's (default DefaultESPSizeMB).
	Disk disk.Options
	// Formats are the disk formats to write (the formats phase), each once:
	// formats.Raw, formats.QCOW2, formats.VHD, formats.VMDK, formats.GCE
	// (default formats.Raw and formats.QCOW2). The files are named by
	// formats.File.
	Formats []string

	// Plain makes an image without kpreload, as Debian's cloud images are:
	// GRUB, initramfs-tools and the distribution's own initramfs, no module
	// cache, no recipes (nothing of Stage is used). It is the base image
	// another builder starts from before the Packer provisioner installs
	// kpreload (and what the provisioner's end-to-end test starts from).
	Plain bool
	// TempDir is where the build's work directory (the unpacked root filesystem)
	// is made (default os.TempDir()); it is removed when Build returns. The disk
	// images are assembled in a temporary directory inside OutDir and renamed.
	TempDir string
	// BuiltWith names the kpreload version recorded in the manifest (default:
	// the VCS revision of this binary's build, else "devel").
	BuiltWith string
	// Progress, if set, is told about each long step.
	Progress Progress
}

// Manifest describes a built image; Build writes it as <Name>.manifest.json.
type Manifest struct {
	// Name is Options.Name.
	Name string `json:"name"`
	// Files are the disk images written, with their digests.
	Files []File `json:"files"`
	// Suite is the Debian release of the root filesystem.
	Suite string `json:"suite"`
	// Kernels are the installed kernel releases, the default boot entry first.
	Kernels []string `json:"kernels"`
	// Bootloader is the image's boot loader (grub or systemd-boot).
	Bootloader install.Bootloader `json:"bootloader"`
	// BootFirmware is what the image boots under: formats.BootUEFI alone
	// (systemd-boot), or formats.BootBIOS and formats.BootUEFI (GRUB). It is what a cloud's
	// import asks: GCE's UEFI_COMPATIBLE guest OS feature, EC2's --boot-mode,
	// Azure's generation 2 (UEFI) or 1 (BIOS).
	BootFirmware []string `json:"boot_firmware"`
	// SecureBoot says the image is Secure Boot capable: its boot chain is
	// signed so that it boots with UEFI Secure Boot on (GCE's Shielded VM,
	// EC2's UEFI Secure Boot, Azure's Trusted Launch). False unless set.
	SecureBoot bool `json:"secure_boot"`
	// ModuleKey is the certificate the driver modules are signed with and
	// the files written for it; only with SecureBoot.
	ModuleKey *ModuleKey `json:"module_key,omitempty"`
	// KernelPackages maps each kernel release to its linux-image package version.
	KernelPackages map[string]string `json:"kernel_packages,omitempty"`
	// Drivers are the module cache sets the image carries, one per recipe and kernel.
	Drivers []Driver `json:"drivers"`
	// Userspace lists, per driver version, the packages unpacked under ImageDriversDir.
	Userspace map[string][]string `json:"userspace,omitempty"`
	// Firmware lists the firmware packages unpacked into /lib/firmware.
	Firmware []string `json:"firmware,omitempty"`
	// Initramfs describes the kpreload initramfs of each kernel.
	Initramfs []Initramfs `json:"initramfs"`
	// Cmdline is the kernel command line of the loader entries.
	Cmdline string `json:"cmdline"`
	// RootUUID and ESPUUID identify the root and EFI system filesystems.
	RootUUID string `json:"root_uuid"`
	ESPUUID  string `json:"esp_uuid"`
	// DiskGUID is the GPT disk GUID.
	DiskGUID string `json:"disk_guid"`
	// Rootfs says how the root filesystem tarball was made (mmdebstrap key, cached or not).
	Rootfs rootfs.Info `json:"rootfs"`
	// BuiltWith is the kpreload version that built the image.
	BuiltWith string `json:"built_with"`
	// Created is when the build finished (RFC 3339, UTC).
	Created string `json:"created"`
	// Seconds is how long the build took.
	Seconds float64 `json:"seconds"`
}

// File is one output disk image.
type File struct {
	// Path is the file's path as written (OutDir joined with its name).
	Path string `json:"path"`
	// Format is one of formats.Names (formats.Raw, formats.QCOW2, ...).
	Format string `json:"format"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// VirtualSize is the size in bytes of the disk the file holds: the raw
	// disk's, or that grown to a whole GiB for formats.GCE.
	VirtualSize int64 `json:"virtual_size"`
	// SHA256 is the hex digest of the file.
	SHA256 string `json:"sha256"`
}

// Driver is one module cache set an image carries (stage.Driver: Stage
// records them, the manifest lists them).
type Driver = stage.Driver

// Initramfs is the kpreload initramfs of one kernel (stage.Initramfs).
type Initramfs = stage.Initramfs

// ModuleKey is the certificate a Secure Boot image's driver modules are
// signed with, and the files the build wrote for it (bootloader.ModuleKey).
type ModuleKey = bootloader.ModuleKey

// ErrMissingCells is wrapped by Build's error when the module cache lacks a
// (recipe, kernel) cell and Stage.BuildMissing is off (stage.ErrMissingCells).
var ErrMissingCells = stage.ErrMissingCells

// ErrUnknownKernel is wrapped by Build's error when a kernel is not in the
// archive or not in a recipe's kernel matrix (stage.ErrUnknownKernel).
var ErrUnknownKernel = stage.ErrUnknownKernel

// imageName is what Options.Name may hold.
var imageName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// kernelRelease is what a kernel release may hold (it becomes a package name
// and a path).
var kernelRelease = regexp.MustCompile(`^[0-9][A-Za-z0-9.+_~-]*$`)

// Resolve returns o with its defaults filled in: every zero field that has
// one (see Options' fields), and what the image hands Stage itself (its
// kernels, its progress). It is the one place the defaults are applied:
// NewJob and Validate resolve o, the phases read the result.
func (o Options) Resolve() Options {
	r := &o.Rootfs
	r.Suite = cmp.Or(r.Suite, DefaultSuite)
	r.Mirror = cmp.Or(r.Mirror, DefaultMirror)
	r.SecurityMirror = cmp.Or(r.SecurityMirror, DefaultSecurityMirror)
	r.CacheDir = cmp.Or(r.CacheDir, DefaultRootfsCacheDir)
	o.Stage.CacheDir = cmp.Or(o.Stage.CacheDir, DefaultCacheDir())
	o.Stage.DownloadDir = cmp.Or(o.Stage.DownloadDir, DefaultDownloadDir())
	if len(o.Stage.Kernels) == 0 {
		o.Stage.Kernels = o.Kernels
	}
	if o.Stage.Progress == nil {
		o.Stage.Progress = o.Progress
	}
	o.Stage = o.Stage.Resolve()
	o.Boot.Loader = cmp.Or(o.Boot.Loader, install.SystemdBoot)
	o.Disk.SizeMB = cmp.Or(o.Disk.SizeMB, DefaultSizeMB)
	o.Disk.ESPSizeMB = cmp.Or(o.Disk.ESPSizeMB, DefaultESPSizeMB)
	if len(o.Formats) == 0 {
		o.Formats = []string{formats.Raw, formats.QCOW2}
	}
	o.BuiltWith = cmp.Or(o.BuiltWith, Version())
	return o
}

// Validate checks o (resolved) without touching the network or the cache,
// and returns every problem found, joined: the image's own fields, then each
// stage's options through their own Problems, then what holds across them.
func (o Options) Validate() error {
	o = o.Resolve()
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !imageName.MatchString(o.Name) {
		bad("name %q: want letters, digits, '.', '_' and '-', starting with a letter or digit", o.Name)
	}
	if o.OutDir == "" {
		bad("no output directory")
	}
	if len(o.Kernels) == 0 {
		bad("no kernels: name at least one kernel release, such as 6.1.0-56-cloud-amd64")
	}
	seen := map[string]bool{}
	for _, k := range o.Kernels {
		if !kernelRelease.MatchString(k) {
			bad("kernel %.72q: not a kernel release (uname -r), such as 6.1.0-56-cloud-amd64", k)
		} else if err := names.Check("kernel", k); err != nil {
			bad("%v", err)
		}
		if seen[k] {
			bad("kernel %s given twice", k)
		}
		seen[k] = true
	}
	if err := archive.CheckSuite(o.Rootfs.Suite); err != nil {
		bad("suite: %v", err)
	}
	errs = append(errs, o.Rootfs.Problems()...)
	errs = append(errs, o.Boot.Problems()...)
	errs = append(errs, o.Disk.Problems()...)
	errs = append(errs, formats.Problems(o.Formats)...)
	s := o.Stage
	if !slices.Equal(s.Kernels, o.Kernels) {
		bad("stage kernels %q: leave them out, the image's kernels (%q) are the stage's", s.Kernels, o.Kernels)
	}
	if s.Cmdline != "" || s.ModulesDir != nil || s.NoInitramfs {
		bad("stage: the image sets the command line, the module trees and the initramfs images itself; leave Cmdline, ModulesDir and NoInitramfs out (the boot options carry the command line)")
	}
	if o.Plain {
		if len(s.Recipes) > 0 || s.Instance != "" || s.EarlyDrivers || s.Remote != nil || s.RemoteConfig != "" {
			bad("a plain image carries no kpreload: no recipes, instance, early drivers or remote")
		}
		if o.Boot.Loader != install.GRUB {
			bad("a plain image boots with GRUB, as Debian's cloud images: pass the grub bootloader")
		}
		if o.Boot.SecureBoot {
			bad("secure boot and plain: a plain image has no driver modules to sign")
		}
	} else {
		errs = append(errs, s.Problems()...)
	}
	errs = append(errs, packageProblems(o)...)
	return errors.Join(errs...)
}

// DefaultCacheDir is the module cache used when none is named: store.DefaultDir
// (commands name $KPRELOAD_CACHE_DIR instead when it is set).
func DefaultCacheDir() string {
	return store.DefaultDir
}

// DefaultDownloadDir is where downloaded .debs and unpacked kernels live when
// none is named: /var/cache/kpreload, as in scripts/lib.sh (commands name
// $KPRELOAD_CACHE instead when it is set).
func DefaultDownloadDir() string {
	return archive.DefaultCache()
}

// Version is the kpreload version recorded in manifests: the release and
// the commit it was built from (internal/version), such as "0.2.0+0123456789ab".
func Version() string {
	v := version.Get()
	if v.Commit == "" {
		return v.Version
	}
	return v.Version + "+" + v.Commit
}

// OutputPath is where Build writes an image file of the given format
// (formats.File), or name.<format> for anything else ("manifest.json").
func OutputPath(outDir, name, format string) string {
	return filepath.Join(outDir, formats.File(name, format))
}

// say calls p if it is set.
func (p Progress) say(format string, a ...any) {
	progress.Say(p, format, a...)
}

// Build makes the image described by o: root filesystem, stage.Stage, ESP, GPT disk,
// the requested formats and the manifest, and returns the manifest. It runs
// the phases of NewJob(o) in order (RunPhases), as the Packer builder runs
// them as steps. The outputs are written under temporary names and renamed
// into place only when all of them are complete, so a failed or cancelled
// build leaves no file under the final names (earlier outputs of the same
// name are kept until then), and no work or temporary directory.
func Build(ctx context.Context, o Options) (*Manifest, error) {
	j := NewJob(o)
	if err := RunPhases(ctx, j.Phases()); err != nil {
		return nil, err
	}
	return j.Manifest(), nil
}
