package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/install"
)

// rootfs makes the root filesystem in the work directory and records its
// kernel packages.
func (j *Job) rootfs(ctx context.Context) error {
	o := j.o
	spec := rootfsSpec(o, time.Now().UTC().Format("2006-01-02"))
	tarball, info, err := rootfs.Tarball(ctx, j.tools().forRootfs(), spec, o.RootfsCacheDir, j.work, o.Progress)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	j.m.Rootfs = info
	j.root = filepath.Join(j.work, "root")
	o.Progress.say("rootfs: unpacking")
	if err := rootfs.Unpack(ctx, j.tools().Mmdebstrap, tarball, j.root); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if j.m.KernelPackages, err = rootfs.KernelPackages(ctx, j.tools().Dpkg, j.root, o.Kernels); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}

// cleanupRootfs removes the unpacked root and what rootfs.Tarball made in the
// work directory (a tarball kept in RootfsCacheDir stays: it is complete).
func (j *Job) cleanupRootfs(bool) {
	if j.work == "" {
		return
	}
	for _, p := range []string{filepath.Join(j.work, "root"), filepath.Join(j.work, "deb"), filepath.Join(j.work, "rootfs.tar")} {
		os.RemoveAll(p)
	}
}

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
