// Package install makes a root filesystem boot kpreload: it writes the kernel
// hooks and the GRUB script, builds each kernel's kpreload initramfs from the
// root's own modules and module cache, and points the root's bootloader (GRUB
// or systemd-boot) at it, keeping the distribution's own initramfs bootable.
// It is the one door for that job: `kpreload install`, `kpreload kernel-hook`
// (what Debian's kernel packages run), the image builder and the Packer
// provisioner all come through here.
package install

import "github.com/kpreload/kpreload/kmodcache/bootindex"

// Paths inside a root, relative to it. The image builder stages files at the
// same paths (builder/image re-exports them).
const (
	// CacheDir is the module cache subset the root's kernels boot from.
	CacheDir = bootindex.RootCacheDir
	// EarlyDrivers, when present, says the root's initramfs images carry the
	// driver sets and a complete index (the early decision).
	EarlyDrivers = "etc/kpreload/early-drivers"
	// Kpreload is the kpreload CLI (static), which the hooks run.
	Kpreload = "usr/bin/kpreload"
	// Init is the static /init every kpreload initramfs carries.
	Init = "usr/lib/kpreload/kpreload-init"
	// Instance is the instance YAML baked into the root, if any.
	Instance = "etc/kpreload/instance.yaml"
	// Cmdline is the kernel command line of systemd-boot entries, one line.
	Cmdline = "etc/kpreload/cmdline"
	// PostinstHook is run by Debian's kernel packages after a kernel is installed.
	PostinstHook = "etc/kernel/postinst.d/zz-kpreload"
	// PostrmHook is run by Debian's kernel packages after a kernel is removed.
	PostrmHook = "etc/kernel/postrm.d/zz-kpreload"
	// KernelInstallPlugin is run by systemd's kernel-install (add, remove)
	// after its own plugins, where the root has kernel-install.
	KernelInstallPlugin = "etc/kernel/install.d/95-kpreload.install"
	// KernelInstallBinary is systemd's kernel-install.
	KernelInstallBinary = "usr/bin/kernel-install"
	// GrubScript is the grub-mkconfig script that writes kpreload's menu
	// entries first (09 sorts before Debian's 10_linux).
	GrubScript = "etc/grub.d/09_kpreload"
	// InitramfsDir holds each kernel's kpreload initramfs as initrd.img-<release>.
	InitramfsDir = "boot/kpreload"
	// ESPMount is where a root mounts its EFI system partition.
	ESPMount = "boot/efi"
	// GrubConfig is GRUB's generated configuration.
	GrubConfig = "boot/grub/grub.cfg"
)

// InitramfsPath is a kernel's kpreload initramfs, relative to the root.
func InitramfsPath(kernel string) string { return InitramfsDir + "/initrd.img-" + kernel }

// KernelImagePath is a kernel's image as Debian installs it, relative to the root.
func KernelImagePath(kernel string) string { return "boot/vmlinuz-" + kernel }
