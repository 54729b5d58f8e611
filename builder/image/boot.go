package image

import (
	"strings"

	"github.com/kpreload/kpreload/kmodcache/secureboot"
)

// SystemdBootEFI is systemd-boot's EFI binary on the build host (package
// systemd-boot-efi).
const SystemdBootEFI = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi"

// ImageCmdlineFor is the kernel command line of an image's loader entries: the
// root filesystem by UUID, read-write, then the extra parameters.
func ImageCmdlineFor(rootUUID, extra string) string {
	s := "root=UUID=" + rootUUID + " rw"
	if e := strings.TrimSpace(extra); e != "" {
		s += " " + e
	}
	return s
}

// cmdlineExtra is what an image's kernel command line carries after the
// root: Options.Cmdline, and for a Secure Boot image the parameter that makes
// /init report an instance started without Secure Boot.
func cmdlineExtra(o Options) string {
	if !o.SecureBoot {
		return o.Cmdline
	}
	return strings.TrimSpace(secureboot.ExpectFlag + "=" + secureboot.ExpectValue + " " + o.Cmdline)
}
