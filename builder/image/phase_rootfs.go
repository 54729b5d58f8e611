package image

import (
	"fmt"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/install"
)

// rootfsSpec returns the spec of o's root filesystem, read on day date.
func rootfsSpec(o Options, date string) rootfs.Spec {
	comps := "main contrib non-free non-free-firmware"
	pkgs := append([]string{}, rootfs.BasePackages...)
	for _, k := range o.Kernels {
		pkgs = append(pkgs, "linux-image-"+k)
	}
	pkgs = append(pkgs, o.Packages...)
	if o.CloudInit {
		pkgs = append(pkgs, rootfs.CloudInitPackages...)
	}
	if o.Bootloader == install.GRUB {
		pkgs = append(pkgs, bootloader.GrubPackages...)
		pkgs = append(pkgs, bootloader.SecureBootPackages...)
	}
	if o.Plain {
		pkgs = append(pkgs, "initramfs-tools")
	}
	return rootfs.Spec{
		DistributionInitramfs: o.Plain,
		Suite:                 o.Suite,
		Sources: []string{
			fmt.Sprintf("deb %s %s %s", o.Mirror, o.Suite, comps),
			fmt.Sprintf("deb %s %s-updates %s", o.Mirror, o.Suite, comps),
			fmt.Sprintf("deb %s %s-security %s", o.SecurityMirror, o.Suite, comps),
			fmt.Sprintf("deb %s %s-backports %s", o.Mirror, o.Suite, comps),
		},
		Packages: sortedUnique(pkgs),
		Date:     date,
	}
}
