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
		t := j.tools()
		res, err := stage.Stage(ctx, stage.Options{
			Kernels: o.Kernels, Recipes: o.Recipes, CacheDir: o.CacheDir, DownloadDir: o.DownloadDir,
			Lister: o.Lister, KpreloadBinary: o.KpreloadBinary, InitBinary: o.InitBinary,
			Instance: o.Instance, Cmdline: m.Cmdline, Progress: o.Progress, EarlyDrivers: o.EarlyDrivers,
			RemoteConfig: o.RemoteConfig, Tools: stage.Tools{Dpkg: t.Dpkg, Userspace: t.Userspace},
			// BuildMissing already ran in the drivers phase; stage.Stage finds the cells in the cache.
		}, j.root)
		if err != nil {
			return fmt.Errorf("image: %w", err)
		}
		m.Drivers, m.Userspace, m.Firmware, m.Initramfs = res.Drivers, res.Userspace, res.Firmware, res.Initramfs
	}
	if m.Drivers == nil {
		m.Drivers = []Driver{}
	}
	if o.SecureBoot {
		for _, k := range o.Kernels {
			if err := bootloader.CheckSignedKernel(filepath.Join(j.root, install.KernelImagePath(k))); err != nil {
				return fmt.Errorf("image: secure boot: %w", err)
			}
		}
	}
	return nil
}
