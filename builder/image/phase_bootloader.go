package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/install"
)

// bootloader lays out the boot loader's files for the ESP (and, for GRUB,
// core.img for the BIOS boot partition), made through builder/install as
// the kernel hooks do on the running image, and Secure Boot's key files.
func (j *Job) bootloader(ctx context.Context) error {
	o := j.o
	espDir := filepath.Join(j.work, "esp")
	if err := os.MkdirAll(espDir, 0o755); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	var err error
	if o.Boot.Loader == install.GRUB {
		j.esp, j.coreImg, err = bootloader.GrubFiles(ctx, j.tools().Grub, j.work, j.root, j.m.RootUUID, o.Boot.Extra(), !o.Plain)
		if err == nil && j.moduleKey != nil {
			j.m.SecureBoot = true
			j.m.ModuleKey, err = bootloader.SecureBootFiles(ctx, bootloader.Tools{Runner: j.tools().Runner, Grub: j.tools().Grub, VirtFwVars: j.tools().VirtFwVars}, j.root, j.outTmp, o.OutDir, o.Name, j.moduleKey)
		}
	} else {
		j.esp, err = bootloader.SystemdBootFiles(ctx, espDir, j.root, o.Kernels, j.m.Cmdline)
	}
	if err != nil {
		return fmt.Errorf("image: %s: %w", o.Boot.Loader, err)
	}
	return nil
}

// cleanupBootloader removes the ESP's files laid out in the work directory,
// GRUB's core.img and the Secure Boot files not moved into OutDir.
func (j *Job) cleanupBootloader(bool) {
	if j.work == "" {
		return
	}
	for _, p := range []string{filepath.Join(j.work, "esp"), filepath.Join(j.work, "esp-grub.cfg"), filepath.Join(j.work, "core.img")} {
		os.RemoveAll(p)
	}
	if j.m == nil || j.outTmp == "" {
		return
	}
	if k := j.m.ModuleKey; k != nil {
		for _, p := range k.Files() {
			os.Remove(filepath.Join(j.outTmp, filepath.Base(p)))
		}
	}
}
