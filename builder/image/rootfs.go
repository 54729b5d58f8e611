package image

import (
	"context"
	"fmt"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/install"
)

// The root filesystem stage lives in builder/image/rootfs; these names keep
// the image package's API.

// RootfsSpec is what decides the root filesystem tarball (rootfs.Spec).
type RootfsSpec = rootfs.Spec

// RootfsInfo says how the root filesystem was made (rootfs.Info).
type RootfsInfo = rootfs.Info

// RootfsKey is the cache key of a root filesystem tarball (rootfs.Key).
func RootfsKey(s RootfsSpec) string { return rootfs.Key(s) }

// BasePackages are installed into every image (rootfs.BasePackages).
var BasePackages = rootfs.BasePackages

// CloudInitPackages are what Options.CloudInit adds (rootfs.CloudInitPackages).
var CloudInitPackages = rootfs.CloudInitPackages

const sshHostKeysUnitName = rootfs.SSHHostKeysUnitName

var (
	mmdebstrapArgs = rootfs.MmdebstrapArgs
	extractTarball = rootfs.Unpack
)

// rootfsTarball makes or reuses the root filesystem tarball with t's tools (rootfs.Tarball).
func rootfsTarball(ctx context.Context, t Tools, spec RootfsSpec, cacheDir, work string, progress Progress) (string, RootfsInfo, error) {
	return rootfs.Tarball(ctx, rootfs.Tools{Runner: t.Runner, Mmdebstrap: t.Mmdebstrap, Dpkg: t.Dpkg}, spec, cacheDir, work, progress)
}

// rootfsSpec returns the spec of o's root filesystem, read on day date.
func rootfsSpec(o Options, date string) RootfsSpec {
	comps := "main contrib non-free non-free-firmware"
	pkgs := append([]string{}, BasePackages...)
	for _, k := range o.Kernels {
		pkgs = append(pkgs, "linux-image-"+k)
	}
	pkgs = append(pkgs, o.Packages...)
	if o.CloudInit {
		pkgs = append(pkgs, CloudInitPackages...)
	}
	if o.Bootloader == install.GRUB {
		pkgs = append(pkgs, bootloader.GrubPackages...)
		pkgs = append(pkgs, bootloader.SecureBootPackages...)
	}
	if o.Plain {
		pkgs = append(pkgs, "initramfs-tools")
	}
	return RootfsSpec{
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
