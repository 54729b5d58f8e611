package rootfs

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// UUID reads the filesystem UUID of an ext2/3/4, xfs or btrfs filesystem
// ("8-4-4-4-12" lower-case hex), or the volume serial of a vfat one
// ("XXXX-XXXX"), on dev: what root=UUID= and blkid's UUID name.
func UUID(dev string) (string, error) {
	f, err := os.Open(dev)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return fsUUID(f)
}

func fsUUID(r io.ReaderAt) (string, error) {
	t, err := fsType(r)
	if err != nil {
		return "", err
	}
	var off int64
	switch t {
	case "ext4":
		off = 1024 + 0x68 // s_uuid
	case "xfs":
		off = 32 // sb_uuid
	case "btrfs":
		off = 0x10000 + 0x20 // the superblock's fsid, after its checksum
	case "vfat":
		// BS_VolID: after the FAT32 extended BPB, else after FAT12/16's.
		off = 0x27
		if b := make([]byte, 8); func() bool { _, err := r.ReadAt(b, 0x52); return err == nil }() && string(b) == "FAT32   " {
			off = 0x43
		}
		b := make([]byte, 4)
		if _, err := r.ReadAt(b, off); err != nil {
			return "", err
		}
		id := binary.LittleEndian.Uint32(b)
		return fmt.Sprintf("%04X-%04X", id>>16, id&0xffff), nil
	default:
		return "", fmt.Errorf("UUIDs of %s are not read", t)
	}
	b := make([]byte, 16)
	if _, err := r.ReadAt(b, off); err != nil {
		return "", err
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
