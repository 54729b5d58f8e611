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
	tarball, info, err := rootfs.Tarball(ctx, j.tools().forRootfs(), spec, o.Rootfs.CacheDir, j.work, o.Progress)
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
// work directory (a tarball kept in Rootfs.CacheDir stays: it is complete).
func (j *Job) cleanupRootfs(bool) {
	if j.work == "" {
		return
	}
	for _, p := range []string{filepath.Join(j.work, "root"), filepath.Join(j.work, "deb"), filepath.Join(j.work, "rootfs.tar")} {
		os.RemoveAll(p)
	}
}

// rootfsSpec returns the spec of o's root filesystem, read on day date: the
// root filesystem's options (Options.Rootfs) with the image's own packages,
// its kernels and its boot loader's (and initramfs-tools for a plain image).
func rootfsSpec(o Options, date string) rootfs.Spec {
	var own []string
	for _, k := range o.Kernels {
		own = append(own, "linux-image-"+k)
	}
	if o.Boot.Loader == install.GRUB {
		own = append(own, bootloader.GrubPackages...)
		own = append(own, bootloader.SecureBootPackages...)
	}
	if o.Plain {
		own = append(own, "initramfs-tools")
	}
	return o.Rootfs.Spec(own, o.Plain, date)
}
