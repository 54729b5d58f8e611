package disk

import "fmt"

// Options is the disk an image asks for. builder/image's Options.Resolve
// fills in its defaults.
type Options struct {
	// SizeMB is the whole disk's size in MiB.
	SizeMB int
	// ESPSizeMB is the EFI system partition's size in MiB.
	ESPSizeMB int
}

// Problems returns what is wrong with o's sizes, one error each: an ESP
// under 64 MiB, a disk without 512 MiB for the root filesystem beside it.
func (o Options) Problems() []error {
	var errs []error
	if o.ESPSizeMB < 64 {
		errs = append(errs, fmt.Errorf("ESP size %d MiB: want at least 64 MiB", o.ESPSizeMB))
	}
	if o.SizeMB < o.ESPSizeMB+512 {
		errs = append(errs, fmt.Errorf("disk size %d MiB: want at least the ESP (%d MiB) + 512 MiB for the root filesystem", o.SizeMB, o.ESPSizeMB))
	}
	return errs
}

// Layout lays out o's disk (NewLayout) with the given GUIDs.
func (o Options) Layout(diskGUID, espUUID, rootUUID string) (Layout, error) {
	return NewLayout(o.SizeMB, o.ESPSizeMB, diskGUID, espUUID, rootUUID)
}
