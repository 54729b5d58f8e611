package bootloader

import (
	"fmt"
	"strings"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/kmodcache/secureboot"
)

// Options is the boot loader an image asks for. builder/image's
// Options.Resolve fills in its defaults.
type Options struct {
	// Loader is the image's boot loader: install.SystemdBoot (UEFI only) or
	// install.GRUB (BIOS and UEFI from one disk, as Debian's cloud images do:
	// a BIOS boot partition and GRUB's UEFI image on the ESP).
	Loader install.Bootloader
	// Cmdline is added to every loader entry's kernel command line after
	// "root=UUID=<root> rw" (systemd-boot), or is GRUB_CMDLINE_LINUX (GRUB).
	Cmdline string
	// SecureBoot makes an image that boots with UEFI Secure Boot on (GRUB
	// only; its UEFI path is always Debian's signed shim and GRUB): the
	// kernels must be Debian's signed ones and the recipes sign their
	// modules with one certificate, which the build writes beside the image
	// (SecureBootFiles: <name>.module-key.der and .pem, for the clouds' UEFI
	// variables, and <name>.ovmf-vars.fd with it enrolled as a MOK, for
	// QEMU), and puts in the image for mokutil --import.
	SecureBoot bool
}

// Extra is what the image's kernel command line carries after the root: its
// own parameters (Cmdline), and for a Secure Boot image the parameter that
// makes /init report an instance started without Secure Boot.
func (o Options) Extra() string {
	if !o.SecureBoot {
		return o.Cmdline
	}
	return strings.TrimSpace(secureboot.ExpectFlag + "=" + secureboot.ExpectValue + " " + o.Cmdline)
}

// Problems returns what is wrong with o, one error each: an unknown loader,
// Secure Boot without GRUB, a command line of several lines or one naming
// the root (the image names its own).
func (o Options) Problems() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if o.Loader != install.SystemdBoot && o.Loader != install.GRUB {
		bad("bootloader %q: want %s or %s", o.Loader, install.GRUB, install.SystemdBoot)
	}
	if o.SecureBoot && o.Loader != install.GRUB {
		bad("secure boot needs the grub bootloader: it boots through Debian's signed shim and GRUB (Debian's systemd-boot is not signed)")
	}
	if strings.ContainsAny(o.Cmdline, "\n\r") {
		bad("cmdline: must be one line")
	}
	for _, f := range strings.Fields(o.Cmdline) {
		if strings.HasPrefix(f, "root=") {
			bad("cmdline %q: the image names its root itself (root=UUID= of the root filesystem it makes); leave root= out", f)
		}
	}
	return errs
}
