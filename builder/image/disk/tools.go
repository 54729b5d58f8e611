package disk

import "context"

// Tools are the partitioning and filesystem tools, on a disk image file.
type Tools interface {
	// Partition writes the partition table script (sfdisk's input) to disk.
	Partition(ctx context.Context, disk, script string) error
	// RelocateBackupGPT moves the backup GPT to the end of disk.
	RelocateBackupGPT(ctx context.Context, disk string) error
	// MkfsVFAT makes a FAT32 filesystem of sizeKiB KiB at the offset (in
	// sectors) of disk, with the label, volume serial and cluster size.
	MkfsVFAT(ctx context.Context, disk string, offsetSectors, sizeKiB int64, clusterSectors int, label, volumeID string) error
	// Mkdir makes dir (slash-separated, on the FAT filesystem at img, mtools' file@@offset).
	Mkdir(ctx context.Context, img, dir string) error
	// Copy copies the host file src to dst on the FAT filesystem at img.
	Copy(ctx context.Context, img, src, dst string) error
	// MkfsExt4 makes an ext4 filesystem of sizeKiB KiB at the byte offset of
	// disk, populated from rootDir, with the label and UUID.
	MkfsExt4(ctx context.Context, disk string, offset, sizeKiB int64, label, uuid, rootDir string) error
	// CopySparse copies src to dst keeping its holes.
	CopySparse(ctx context.Context, src, dst string) error
	// TarSparse writes the file name of dir, alone, into the gzip'd GNU tar
	// out with its holes recorded.
	TarSparse(ctx context.Context, dir, name, out string) error
}
