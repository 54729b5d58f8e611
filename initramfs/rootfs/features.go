package rootfs

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// Superblock features that make a mount ask the kernel for more modules
// (request_module) than the filesystem's own. Features reports them by these
// names; builder checks (initramfs/rootcheck) map them to the modules.
const (
	// FeatureMetadataCsum is ext4's metadata_csum (mkfs.ext4's default since
	// e2fsprogs 1.43; csum_seed implies it): ext4 and jbd2 load crc32c.
	FeatureMetadataCsum = "metadata_csum"
	// FeatureEAInode is ext4's ea_inode, whose checksums need crc32c too.
	FeatureEAInode = "ea_inode"
	// FeatureXFSv5 is an xfs v5 superblock (mkfs.xfs's only kind since
	// xfsprogs 5.x): CRCs on all metadata, crc32c.
	FeatureXFSv5 = "v5"
	// FeatureBtrfsCsum prefixes btrfs's checksum algorithm: "csum=crc32c"
	// (the default), "csum=xxhash64", "csum=sha256", "csum=blake2b".
	FeatureBtrfsCsum = "csum="
)

// ext4 superblock fields (from the start of the superblock, at 1024).
const (
	ext4SB                   = 1024
	ext4IncompatOff          = 0x60
	ext4RoCompatOff          = 0x64
	ext4RoCompatMetadataCsum = 0x400
	ext4IncompatEAInode      = 0x400
	ext4IncompatCsumSeed     = 0x2000
)

// btrfsCsumNames are the btrfs_csum_type values (BTRFS_CSUM_TYPE_*).
var btrfsCsumNames = []string{"crc32c", "xxhash64", "sha256", "blake2b"}

// ReadFeatures identifies the filesystem on dev (as FSType does) and returns
// its type and the features Features reports.
func ReadFeatures(dev string) (fstype string, features []string, err error) {
	f, err := os.Open(dev)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	return Features(f)
}

// Features identifies the filesystem on r and returns its type and those of
// its superblock's features that make mounting it need modules beyond the
// filesystem's own: ext4's FeatureMetadataCsum and FeatureEAInode,
// FeatureXFSv5, and btrfs's checksum (FeatureBtrfsCsum + its name). vfat
// and iso9660 have none.
func Features(r io.ReaderAt) (fstype string, features []string, err error) {
	fstype, err = fsType(r)
	if err != nil {
		return "", nil, err
	}
	read := func(off int64, n int) ([]byte, error) {
		b := make([]byte, n)
		if _, err := r.ReadAt(b, off); err != nil {
			return nil, fmt.Errorf("%s superblock at byte %d: %w", fstype, off, err)
		}
		return b, nil
	}
	switch fstype {
	case "ext4":
		b, err := read(ext4SB+ext4IncompatOff, 8)
		if err != nil {
			return "", nil, err
		}
		incompat, rocompat := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
		if rocompat&ext4RoCompatMetadataCsum != 0 || incompat&ext4IncompatCsumSeed != 0 {
			features = append(features, FeatureMetadataCsum)
		}
		if incompat&ext4IncompatEAInode != 0 {
			features = append(features, FeatureEAInode)
		}
	case "xfs":
		b, err := read(100, 2) // sb_versionnum, big-endian
		if err != nil {
			return "", nil, err
		}
		if binary.BigEndian.Uint16(b)&0xf == 5 {
			features = append(features, FeatureXFSv5)
		}
	case "btrfs":
		b, err := read(0x10000+0xc4, 2) // csum_type
		if err != nil {
			return "", nil, err
		}
		name := fmt.Sprintf("unknown(%d)", binary.LittleEndian.Uint16(b))
		if t := int(binary.LittleEndian.Uint16(b)); t < len(btrfsCsumNames) {
			name = btrfsCsumNames[t]
		}
		features = append(features, FeatureBtrfsCsum+name)
	}
	return fstype, features, nil
}
