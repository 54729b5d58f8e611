// Package disk writes an image's GPT disk without mounting anything: the
// layout (Layout: the ESP, the root filesystem, GRUB's BIOS boot partition),
// the partition table (sfdisk), the ESP (mkfs.vfat, mtools), the root
// filesystem (mkfs.ext4 -d) and GRUB's BIOS boot code (BIOSSetup), each tool
// behind Tools.
package disk

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path"
	"strings"
)

// GiB is one GiB in bytes.
const GiB = 1 << 30

// GPT partition type GUIDs.
const (
	// TypeESP is the EFI system partition.
	TypeESP = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
	// TypeRootX86_64 is a Linux x86-64 root partition (Discoverable Partitions
	// Specification), so systemd's gpt-auto-generator recognizes it too.
	TypeRootX86_64 = "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"
	// TypeBIOSBoot is GRUB's BIOS boot partition, where core.img is embedded
	// on a GPT disk booted by BIOS.
	TypeBIOSBoot = "21686148-6449-6E6F-744E-656564454649"
)

// SectorSize is the disk's logical sector size.
const SectorSize = 512

// MiB is one MiB in bytes.
const MiB = 1 << 20

// Partition is one partition of a Layout, in bytes.
type Partition struct {
	// Offset is where the partition starts.
	Offset int64
	// Size is the partition's size.
	Size int64
	// Type is the GPT type GUID.
	Type string
	// UUID is the partition's unique GUID.
	UUID string
	// Name is the GPT partition name.
	Name string
}

// Layout is an image's GPT disk: the ESP first (partition 1), then the root
// filesystem (partition 2), each aligned to 1 MiB, with 1 MiB left at the end
// for the backup GPT.
type Layout struct {
	// DiskSize is the disk image's size in bytes.
	DiskSize int64
	// DiskGUID is the GPT disk GUID.
	DiskGUID string
	// ESP and Root are the partitions.
	ESP, Root Partition
	// BIOSBoot, when set, is GRUB's BIOS boot partition (partition 3, first on the disk).
	BIOSBoot *Partition
}

// WithBIOSBoot returns l with a 1 MiB BIOS boot partition at 1 MiB, as
// partition 3 (the ESP and root keep numbers 1 and 2), the others moved up by
// 1 MiB and the root 1 MiB smaller.
func (l Layout) WithBIOSBoot(uuid string) Layout {
	l.BIOSBoot = &Partition{Offset: MiB, Size: MiB, Type: TypeBIOSBoot, UUID: uuid, Name: "BIOS boot"}
	l.ESP.Offset += MiB
	l.Root.Offset += MiB
	l.Root.Size -= MiB
	return l
}

// NewLayout lays out a disk of sizeMB MiB with an ESP of espMB MiB and the
// rest for the root filesystem, with the given GUIDs.
func NewLayout(sizeMB, espMB int, diskGUID, espUUID, rootUUID string) (Layout, error) {
	if espMB <= 0 || sizeMB < espMB+3 {
		return Layout{}, fmt.Errorf("disk of %d MiB cannot hold a %d MiB ESP, a root partition and the GPT", sizeMB, espMB)
	}
	l := Layout{DiskSize: int64(sizeMB) * MiB, DiskGUID: diskGUID}
	l.ESP = Partition{Offset: MiB, Size: int64(espMB) * MiB, Type: TypeESP, UUID: espUUID, Name: "ESP"}
	rootStart := l.ESP.Offset + l.ESP.Size
	l.Root = Partition{Offset: rootStart, Size: l.DiskSize - MiB - rootStart, Type: TypeRootX86_64, UUID: rootUUID, Name: "root"}
	return l, nil
}

// SfdiskScript is the sfdisk(8) input that writes l's partition table.
func (l Layout) SfdiskScript() string {
	var b strings.Builder
	fmt.Fprintf(&b, "label: gpt\nlabel-id: %s\nunit: sectors\nsector-size: %d\nfirst-lba: %d\n\n", l.DiskGUID, SectorSize, MiB/SectorSize)
	parts := []Partition{l.ESP, l.Root}
	if l.BIOSBoot != nil {
		parts = append(parts, *l.BIOSBoot)
	}
	for _, p := range parts {
		fmt.Fprintf(&b, "start=%d, size=%d, type=%s, uuid=%s, name=%q\n", p.Offset/SectorSize, p.Size/SectorSize, p.Type, p.UUID, p.Name)
	}
	return b.String()
}

// NewUUID returns a random (version 4) UUID.
func NewUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// NewVolumeID returns a random FAT volume serial as 8 hex digits; the
// filesystem's UUID is written "ABCD-1234".
func NewVolumeID() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return fmt.Sprintf("%08X", b)
}

// FATUUID is how blkid and fstab name a FAT volume serial: "ABCD-1234".
func FATUUID(volumeID string) string { return volumeID[:4] + "-" + volumeID[4:] }

// File is one file to put on the ESP.
type File struct {
	Src string // host file
	Dst string // path on the ESP, slash-separated, relative
}

// Write makes the disk image at out: a sparse file of the layout's size,
// the GPT (sfdisk), the ESP (mkfs.vfat at its offset, files by mtools) and the
// root filesystem (mkfs.ext4 -d at its offset). Nothing is mounted.
func Write(ctx context.Context, t Tools, out string, l Layout, espVolumeID string, esp []File, rootDir, rootUUID string) error {
	f, err := os.OpenFile(out, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if err := f.Truncate(l.DiskSize); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := t.Partition(ctx, out, l.SfdiskScript()); err != nil {
		return err
	}
	if err := t.MkfsVFAT(ctx, out, l.ESP.Offset/SectorSize, l.ESP.Size/1024, FATClusterSectors(l.ESP.Size), "ESP", espVolumeID); err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	img := fmt.Sprintf("%s@@%d", out, l.ESP.Offset)
	made := map[string]bool{}
	for _, e := range esp {
		var dirs []string
		for d := path.Dir(e.Dst); d != "." && d != "/" && !made[d]; d = path.Dir(d) {
			dirs = append([]string{d}, dirs...)
		}
		for _, d := range dirs {
			if err := t.Mkdir(ctx, img, d); err != nil {
				return fmt.Errorf("ESP: %w", err)
			}
			made[d] = true
		}
		if err := t.Copy(ctx, img, e.Src, e.Dst); err != nil {
			return fmt.Errorf("ESP: %w", err)
		}
	}
	// ext4 with mke2fs's defaults (imageRoot), populated from rootDir (-d),
	// written at the root partition's offset; the size is given in KiB.
	if err := t.MkfsExt4(ctx, out, l.Root.Offset, l.Root.Size/1024, "root", rootUUID, rootDir); err != nil {
		return fmt.Errorf("root filesystem: %w", err)
	}
	return nil
}

// FATClusterSectors is the sectors per cluster for a FAT32 filesystem of size
// bytes: the largest of 1, 2, 4 and 8 that leaves well over 65525 clusters, FAT32's
// minimum (with fewer, mtools and some firmware take the filesystem for FAT16). The
// margin (70000 clusters before the FATs are taken off) covers the reserved sectors
// and the two FATs, under 7% of a small ESP.
func FATClusterSectors(size int64) int {
	s := 8
	for s > 1 && size/SectorSize/int64(s) < 70000 {
		s /= 2
	}
	return s
}

// Offsets in GRUB's boot.img and diskboot.img (grub 2.06 include/grub/i386/pc/boot.h).
const (
	bootBPBStart     = 0x03  // BIOS parameter block, kept from the disk
	bootBPBEnd       = 0x5a  //
	bootKernelSector = 0x5c  // LBA of core.img's first sector, 8 bytes little-endian
	bootDriveCheck   = 0x66  // a short jmp, replaced by two nops on hard disks
	bootNTMagic      = 0x1b8 // disk signature and partition table, kept from the disk
	bootPartEnd      = 0x1fe //
	blocklistSize    = 12    // diskboot.img's last blocklist entry: start (8), len (2), segment (2)
)

// BIOSSetup makes a GPT disk boot GRUB under BIOS as grub-bios-setup does for
// a BIOS boot partition: core.img goes into the partition, boot.img into the
// MBR (keeping the protective partition table) pointing at core.img's first
// sector, and core.img's first blocklist covers the rest of it. The disk must
// hold l's partition table already.
func BIOSSetup(disk string, l Layout, bootImg, coreImg string) error {
	if l.BIOSBoot == nil {
		return fmt.Errorf("BIOS boot: the layout has no BIOS boot partition")
	}
	boot, err := os.ReadFile(bootImg)
	if err != nil {
		return fmt.Errorf("BIOS boot: %w", err)
	}
	core, err := os.ReadFile(coreImg)
	if err != nil {
		return fmt.Errorf("BIOS boot: %w", err)
	}
	if len(boot) != SectorSize {
		return fmt.Errorf("BIOS boot: %s is %d bytes, want %d", bootImg, len(boot), SectorSize)
	}
	if int64(len(core)) > l.BIOSBoot.Size || len(core) < SectorSize {
		return fmt.Errorf("BIOS boot: core.img is %d bytes, the BIOS boot partition %d", len(core), l.BIOSBoot.Size)
	}
	if pad := len(core) % SectorSize; pad != 0 {
		core = append(core, make([]byte, SectorSize-pad)...)
	}
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("BIOS boot: %w", err)
	}
	defer f.Close()
	mbr := make([]byte, SectorSize)
	if _, err := f.ReadAt(mbr, 0); err != nil {
		return fmt.Errorf("BIOS boot: read the MBR: %w", err)
	}
	first := uint64(l.BIOSBoot.Offset / SectorSize)
	copy(boot[bootBPBStart:bootBPBEnd], mbr[bootBPBStart:bootBPBEnd])
	copy(boot[bootNTMagic:bootPartEnd], mbr[bootNTMagic:bootPartEnd])
	binary.LittleEndian.PutUint64(boot[bootKernelSector:], first)
	boot[bootDriveCheck], boot[bootDriveCheck+1] = 0x90, 0x90
	bl := core[SectorSize-blocklistSize : SectorSize]
	binary.LittleEndian.PutUint64(bl[0:], first+1)
	binary.LittleEndian.PutUint16(bl[8:], uint16(len(core)/SectorSize-1))
	if _, err := f.WriteAt(core, l.BIOSBoot.Offset); err != nil {
		return fmt.Errorf("BIOS boot: write core.img: %w", err)
	}
	if _, err := f.WriteAt(boot, 0); err != nil {
		return fmt.Errorf("BIOS boot: write the MBR: %w", err)
	}
	return f.Sync()
}
