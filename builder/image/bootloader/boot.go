// Package bootloader lays out an image's boot loaders: systemd-boot's ESP
// (UEFI), or GRUB for BIOS and UEFI with Debian's signed shim and GRUB on the
// ESP, made through builder/install as the kernel hooks do on the running
// image; the kernel command line of their entries; and what Secure Boot adds
// (the module signing key, its certificate files and a MOK-enrolled OVMF
// variable store).
package bootloader

import (
	"strings"
)

// SystemdBootEFI is systemd-boot's EFI binary on the build host (package
// systemd-boot-efi).
const SystemdBootEFI = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi"

// Cmdline is the kernel command line of an image's loader entries: the
// root filesystem by UUID, read-write, then the extra parameters.
func Cmdline(rootUUID, extra string) string {
	s := "root=UUID=" + rootUUID + " rw"
	if e := strings.TrimSpace(extra); e != "" {
		s += " " + e
	}
	return s
}
