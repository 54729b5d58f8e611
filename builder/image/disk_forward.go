package image

import "github.com/kpreload/kpreload/builder/image/disk"

// The disk stage lives in builder/image/disk; these names keep the image
// package's own callers short.

// Layout is an image's GPT disk (disk.Layout).
type Layout = disk.Layout

// Partition is one partition of a Layout (disk.Partition).
type Partition = disk.Partition

// NewLayout lays out a disk (disk.NewLayout).
func NewLayout(sizeMB, espMB int, diskGUID, espUUID, rootUUID string) (Layout, error) {
	return disk.NewLayout(sizeMB, espMB, diskGUID, espUUID, rootUUID)
}

// GPT partition types and the sector size (disk's).
const (
	TypeESP        = disk.TypeESP
	TypeRootX86_64 = disk.TypeRootX86_64
	TypeBIOSBoot   = disk.TypeBIOSBoot
	SectorSize     = disk.SectorSize
)

const (
	mib = disk.MiB
	gib = disk.GiB
)

type espFile = disk.File

var (
	newUUID     = disk.NewUUID
	newVolumeID = disk.NewVolumeID
	fatUUID     = disk.FATUUID
	writeDisk   = disk.Write
	biosSetup   = disk.BIOSSetup
)
