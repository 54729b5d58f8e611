package rootfs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fsTypeFuzz and labelFuzz are the superblock readers the fuzz target calls,
// on a reader and on a device file (local wrappers, so that a change of their
// signatures is one line here).
func fsTypeFuzz(b []byte) (string, error) { return fsType(bytes.NewReader(b)) }

func labelFuzz(b []byte) (string, error) { return label(bytes.NewReader(b)) }

// labelField is where each filesystem keeps its label, and the bytes a label
// is trimmed of: Label never returns more than the field holds.
var labelField = map[string]struct {
	off, n int
	trim   string
}{
	"ext4":    {1024 + 120, 16, "\x00"},
	"xfs":     {108, 12, "\x00"},
	"btrfs":   {0x10000 + 0x12b, 256, "\x00"},
	"vfat":    {0x2b, 11, " \x00"}, // FAT12/16; FAT32 at 0x47
	"iso9660": {0x8000 + 40, 32, " \x00"},
}

// superblockSeeds are the starts of real-looking filesystem images: what
// each mkfs writes where fsType and label look, and a real mkfs.ext4's first
// 4 KiB where the tool is installed.
func superblockSeeds(f *testing.F) [][]byte {
	ext4 := make([]byte, 2048)
	binary.LittleEndian.PutUint32(ext4[1024:], 65536) // s_inodes_count
	binary.LittleEndian.PutUint16(ext4[1024+56:], 0xef53)
	copy(ext4[1024+104:], "\x3f\x1c\x9a\x2e\x7b\x1d\x4c\x55\x9e\x0e\x0a\x1b\x2c\x3d\x4e\x5f") // s_uuid
	copy(ext4[1024+120:], "root")
	ext4full := bytes.Clone(ext4)
	copy(ext4full[1024+120:], "sixteen-chars-ok")

	xfs := make([]byte, 512)
	copy(xfs, "XFSB")
	binary.BigEndian.PutUint32(xfs[4:], 4096)
	copy(xfs[108:], "xfslbl")

	fat := func(kind string, labelOff int, lbl string) []byte {
		b := make([]byte, 512)
		copy(b, "\xeb\x3c\x90mkfs.fat")
		binary.LittleEndian.PutUint16(b[11:], 512)
		b[13] = 4
		if kind == "FAT32   " {
			copy(b[0x52:], kind)
		} else {
			copy(b[0x36:], kind)
		}
		copy(b[labelOff:], fmt.Sprintf("%-11s", lbl))
		b[510], b[511] = 0x55, 0xaa
		return b
	}

	iso := make([]byte, 0x8800)
	pvd := iso[0x8000:]
	pvd[0] = 1
	copy(pvd[1:], "CD001")
	pvd[6] = 1
	copy(pvd[8:40], fmt.Sprintf("%-32s", "LINUX"))
	copy(pvd[40:72], fmt.Sprintf("%-32s", "config-2"))

	btrfs := make([]byte, 0x10048)
	copy(btrfs[0x10040:], "_BHRfS_M")

	seeds := [][]byte{
		ext4, ext4full, xfs, fat("FAT12   ", 0x2b, "CIDATA"), fat("FAT16   ", 0x2b, "cidata"), fat("FAT32   ", 0x47, "CONFIG-2"),
		fat("FAT16   ", 0x2b, ""), iso, btrfs, nil, []byte("XFS"), ext4[:1024+57], iso[:0x8006],
	}
	if mkfs, err := exec.LookPath("mkfs.ext4"); err == nil {
		p := filepath.Join(f.TempDir(), "ext4.img")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			f.Fatal(err)
		}
		if err := os.Truncate(p, 4<<20); err != nil {
			f.Fatal(err)
		}
		if out, err := exec.Command(mkfs, "-q", "-F", "-L", "cloudimg-rootfs", p).CombinedOutput(); err != nil {
			f.Fatalf("mkfs.ext4: %v\n%s", err, out)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b[:4096])
	}
	return seeds
}

// FuzzSuperblock checks the superblock readers /init runs on every block
// device to find root= by LABEL= and the seed disks (a disk anyone with the
// instance's hardware may attach): no panic; a filesystem type comes with its
// magic at its offset and is one fsType knows, an error with no type; a
// label comes only with a known type, is never longer than its field (16
// bytes for ext4, 12 for xfs, 256 for btrfs, 11 for vfat, 32 for iso9660), is what the
// field holds up to its padding, and never ends in padding; and FSType and
// Label on a device file say the same as on the bytes.
func FuzzSuperblock(f *testing.F) {
	for _, s := range superblockSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fstype, err := fsTypeFuzz(data)
		if err != nil {
			if fstype != "" {
				t.Fatalf("fsType = %q with error %v, want none", fstype, err)
			}
		} else {
			found := false
			for _, p := range probes {
				if p.fstype == fstype && int(p.off)+len(p.magic) <= len(data) && bytes.Equal(data[p.off:int(p.off)+len(p.magic)], p.magic) {
					found = true
				}
			}
			if !found {
				t.Fatalf("fsType = %q, but no magic of %s is where it belongs", fstype, fstype)
			}
		}
		lbl, lerr := labelFuzz(data)
		switch {
		case lerr == nil && err != nil:
			t.Fatalf("label = %q for bytes fsType refuses (%v)", lbl, err)
		case lerr == nil:
			field, ok := labelField[fstype]
			if !ok {
				t.Fatalf("label = %q for %s, whose labels are not read", lbl, fstype)
			}
			if fstype == "vfat" && len(data) >= 0x5a && string(data[0x52:0x5a]) == "FAT32   " {
				field.off = 0x47
			}
			if len(lbl) > field.n {
				t.Fatalf("label of %s = %q, longer than its %d-byte field", fstype, lbl, field.n)
			}
			if lbl != "" && strings.ContainsAny(lbl[len(lbl)-1:], field.trim) {
				t.Fatalf("label of %s = %q ends in padding", fstype, lbl)
			}
			if end := field.off + field.n; end > len(data) || !bytes.HasPrefix(data[field.off:end], []byte(lbl)) ||
				strings.Trim(string(data[field.off+len(lbl):end]), field.trim) != "" {
				t.Fatalf("label of %s = %q, not what its field holds", fstype, lbl)
			}
		}
		if u, uerr := fsUUID(bytes.NewReader(data)); uerr == nil && (err != nil || u == "") {
			t.Fatalf("UUID = %q, nil; fsType says %q, %v: want a UUID only for a known filesystem", u, fstype, err)
		}
		dev := filepath.Join(t.TempDir(), "vdb")
		if err := os.WriteFile(dev, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if got, gerr := FSType(dev); got != fstype || (gerr == nil) != (err == nil) {
			t.Fatalf("FSType(device) = %q, %v; on the bytes %q, %v", got, gerr, fstype, err)
		}
		if got, gerr := Label(dev); got != lbl || (gerr == nil) != (lerr == nil) {
			t.Fatalf("Label(device) = %q, %v; on the bytes %q, %v", got, gerr, lbl, lerr)
		}
	})
}
