package qemu

import (
	"errors"
	"fmt"
)

// OVMFCode4M is OVMF's 4 MiB firmware code without Secure Boot, the code a
// variable store made for the Secure Boot build (SecureBootVars, or an
// image's own store) also fits.
const OVMFCode4M = "/usr/share/OVMF/OVMF_CODE_4M.fd"

// ForImage sets c to boot the disk image disk the way a cloud VM does:
// through firmware (FirmwareUEFI, FirmwareUEFISecure or FirmwareBIOS) and
// the disk's own bootloader, with the kernel command line from its boot
// entry. vars, when set, is the UEFI variable store to boot with (such as
// an image's own, which holds its module key); it goes with UEFI firmware
// only, and with plain FirmwareUEFI it takes OVMFCode4M, the code such a
// store fits. FirmwareUEFISecure without vars boots with SecureBootVars.
// persist boots the disk itself, keeping what the guest writes; otherwise
// through a throwaway overlay (Snapshot). A c without Until ends the run
// when the image is up (ImageUp and UntilUp). c must not set Kernel,
// Initramfs or Append: the disk's bootloader has them.
func (c *Config) ForImage(disk, firmware, vars string, persist bool) error {
	if c.Kernel != "" || c.Initramfs != "" || c.Append != "" {
		return errors.New("qemu: an image boots its own bootloader: leave Kernel, Initramfs and Append empty")
	}
	switch firmware {
	case FirmwareUEFI, FirmwareBIOS, FirmwareUEFISecure:
	default:
		return fmt.Errorf("qemu: firmware %q: want %s, %s or %s", firmware, FirmwareUEFI, FirmwareUEFISecure, FirmwareBIOS)
	}
	switch {
	case vars != "" && firmware == FirmwareBIOS:
		return errors.New("qemu: a UEFI variable store goes with UEFI firmware, not bios")
	case vars != "" && firmware == FirmwareUEFI:
		// A store made for Secure Boot firmware fits only its code.
		c.OVMFCode, c.OVMFVars = OVMFCode4M, vars
	case vars != "":
		c.OVMFVars = vars
	case firmware == FirmwareUEFISecure:
		c.OVMFVars = SecureBootVars
	}
	c.Firmware, c.RootDisk, c.Snapshot = firmware, disk, !persist
	if c.Until == nil {
		c.Until, c.UntilUp = ImageUp, true
	}
	return nil
}
