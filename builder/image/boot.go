package image

import (
	"strings"
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
