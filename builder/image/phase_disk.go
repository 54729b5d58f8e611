package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/install"
)

// disk writes the raw GPT disk into the temporary output directory: the ESP
// with the boot loader's files and the root filesystem (and GRUB's boot.img
// and core.img for BIOS).
func (j *Job) disk(ctx context.Context) error {
	o := j.o
	layout, err := o.Disk.Layout(j.m.DiskGUID, disk.NewUUID(), disk.NewUUID())
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if o.Boot.Loader == install.GRUB {
		layout = layout.WithBIOSBoot(disk.NewUUID())
	}
	j.raw = filepath.Join(j.outTmp, o.Name+"."+formats.Raw)
	o.Progress.say("disk: %d MiB GPT (ESP %d MiB, root ext4), mkfs.ext4 -d", o.Disk.SizeMB, o.Disk.ESPSizeMB)
	if err := disk.Write(ctx, j.tools().Disk, j.raw, layout, j.espVol, j.esp, j.root, j.m.RootUUID); err != nil {
		return fmt.Errorf("image: disk: %w", err)
	}
	if j.coreImg != "" {
		o.Progress.say("disk: GRUB's boot.img in the MBR, core.img in the BIOS boot partition")
		if err := disk.BIOSSetup(j.raw, layout, filepath.Join(j.root, "usr/lib/grub/i386-pc/boot.img"), j.coreImg); err != nil {
			return fmt.Errorf("image: disk: %w", err)
		}
	}
	return nil
}

// cleanupDisk removes the raw disk from the temporary output directory (gone
// already when the formats phase moved it into OutDir as formats.Raw).
func (j *Job) cleanupDisk(bool) {
	if j.raw != "" {
		os.Remove(j.raw)
	}
}
