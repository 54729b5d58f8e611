package image

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
)

// initramfs stages everything kpreload-specific into the root (stage.Stage;
// nothing in a plain image), each kernel's initramfs included, and checks
// that the kernels are signed for Secure Boot.
func (j *Job) initramfs(ctx context.Context) error {
	o, m := j.o, j.m
	if !o.Plain {
		// The image adds its loader entries' command line and its tools.
		// The drivers phase put every cell into the cache: Stage finds them
		// there, with neither dkms nor the registry again.
		so := o.Stage
		so.Cmdline = m.Cmdline
		so.Tools = stage.Tools{Dpkg: j.tools().Dpkg, Userspace: j.tools().Userspace}
		so.BuildMissing, so.Remote = false, nil
		res, err := stage.Stage(ctx, so, j.root)
		if err != nil {
			return fmt.Errorf("image: %w", err)
		}
		m.Drivers, m.Userspace, m.Firmware, m.Initramfs = res.Drivers, res.Userspace, res.Firmware, res.Initramfs
	}
	if m.Drivers == nil {
		m.Drivers = []Driver{}
	}
	if o.Boot.SecureBoot {
		for _, k := range o.Kernels {
			if err := bootloader.CheckSignedKernel(filepath.Join(j.root, install.KernelImagePath(k))); err != nil {
				return fmt.Errorf("image: secure boot: %w", err)
			}
		}
	}
	return nil
}
