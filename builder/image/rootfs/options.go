package rootfs

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Options is the root filesystem an image asks for: the archive its packages
// come from, what goes in on top of the base and how the root is set up.
// builder/image's Options.Resolve fills in its defaults.
type Options struct {
	// Suite is the Debian release. Its -updates, -security and -backports
	// suites are enabled too (backports carries the 6.12 cloud kernels; apt
	// takes nothing else from it unless asked).
	Suite string
	// Mirror is the Debian archive.
	Mirror string
	// SecurityMirror is the Debian security archive.
	SecurityMirror string
	// Packages are extra Debian packages to install into the image.
	Packages []string
	// Files are extra files copied into the image: absolute path in the image
	// -> file on the build host (mode kept). They are copied after kpreload's
	// own files, so they may replace a configuration file (AddFiles).
	Files map[string]string
	// Enable are systemd units to enable in the image (systemctl --root
	// enable), such as one that Files brought.
	Enable []string
	// CloudInit adds Debian's cloud-init with the datasources clouds use
	// (NoCloud, ConfigDrive, EC2, GCE, Azure, OpenStack): the default user
	// and its SSH key from the instance's metadata, the root partition grown
	// to the disk (ConfigureCloudInit). Every image, with or without it,
	// carries no SSH host keys and no machine-id: each instance makes its own
	// at first boot (ResetIdentity).
	CloudInit bool
	// EmptyRootPassword clears root's password so root logs in on the serial
	// console without one: for test images only.
	EmptyRootPassword bool
	// CacheDir keeps mmdebstrap tarballs between builds (Tarball's cacheDir);
	// "off" always runs mmdebstrap. See Key for why a cached tarball cannot
	// be stale.
	CacheDir string
}

// Problems returns what is wrong with o's files and packages, one error
// each, without reading the archive: a destination that is not a clean
// absolute path in the image, a source that is no regular file, a package
// that is not one name.
func (o Options) Problems() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, dst := range slices.Sorted(maps.Keys(o.Files)) {
		src := o.Files[dst]
		if !filepath.IsAbs(dst) || filepath.Clean(dst) != dst || dst == "/" {
			bad("file %s=%s: the destination must be a clean absolute path in the image", dst, src)
		}
		if fi, err := os.Stat(src); err != nil {
			bad("file %s=%s: %v", dst, src, err)
		} else if !fi.Mode().IsRegular() {
			bad("file %s=%s: not a regular file", dst, src)
		}
	}
	for _, p := range o.Packages {
		if p == "" || strings.ContainsAny(p, " ,\t\n") {
			bad("package %q: want one package name (optionally =version)", p)
		}
	}
	return errs
}

// Spec returns the spec of the tarball o asks for, read on day date (UTC,
// YYYY-MM-DD): BasePackages, the image's own packages (its kernels, its boot
// loader's), o's Packages and, with CloudInit, CloudInitPackages, sorted
// once each; the main, -updates, -security and -backports suites of o's
// mirrors. distributionInitramfs is Spec.DistributionInitramfs.
func (o Options) Spec(own []string, distributionInitramfs bool, date string) Spec {
	comps := "main contrib non-free non-free-firmware"
	pkgs := slices.Concat(BasePackages, own, o.Packages)
	if o.CloudInit {
		pkgs = append(pkgs, CloudInitPackages...)
	}
	slices.Sort(pkgs)
	return Spec{
		DistributionInitramfs: distributionInitramfs,
		Suite:                 o.Suite,
		Sources: []string{
			fmt.Sprintf("deb %s %s %s", o.Mirror, o.Suite, comps),
			fmt.Sprintf("deb %s %s-updates %s", o.Mirror, o.Suite, comps),
			fmt.Sprintf("deb %s %s-security %s", o.SecurityMirror, o.Suite, comps),
			fmt.Sprintf("deb %s %s-backports %s", o.Mirror, o.Suite, comps),
		},
		Packages: slices.Compact(pkgs),
		Date:     date,
	}
}
