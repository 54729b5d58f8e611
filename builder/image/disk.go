package image

import (
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/image/rootfiles"
)

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

// mib is one MiB in bytes.
const mib = 1 << 20

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
	l.BIOSBoot = &Partition{Offset: mib, Size: mib, Type: TypeBIOSBoot, UUID: uuid, Name: "BIOS boot"}
	l.ESP.Offset += mib
	l.Root.Offset += mib
	l.Root.Size -= mib
	return l
}

// NewLayout lays out a disk of sizeMB MiB with an ESP of espMB MiB and the
// rest for the root filesystem, with the given GUIDs.
func NewLayout(sizeMB, espMB int, diskGUID, espUUID, rootUUID string) (Layout, error) {
	if espMB <= 0 || sizeMB < espMB+3 {
		return Layout{}, fmt.Errorf("disk of %d MiB cannot hold a %d MiB ESP, a root partition and the GPT", sizeMB, espMB)
	}
	l := Layout{DiskSize: int64(sizeMB) * mib, DiskGUID: diskGUID}
	l.ESP = Partition{Offset: mib, Size: int64(espMB) * mib, Type: TypeESP, UUID: espUUID, Name: "ESP"}
	rootStart := l.ESP.Offset + l.ESP.Size
	l.Root = Partition{Offset: rootStart, Size: l.DiskSize - mib - rootStart, Type: TypeRootX86_64, UUID: rootUUID, Name: "root"}
	return l, nil
}

// SfdiskScript is the sfdisk(8) input that writes l's partition table.
func (l Layout) SfdiskScript() string {
	var b strings.Builder
	fmt.Fprintf(&b, "label: gpt\nlabel-id: %s\nunit: sectors\nsector-size: %d\nfirst-lba: %d\n\n", l.DiskGUID, SectorSize, mib/SectorSize)
	parts := []Partition{l.ESP, l.Root}
	if l.BIOSBoot != nil {
		parts = append(parts, *l.BIOSBoot)
	}
	for _, p := range parts {
		fmt.Fprintf(&b, "start=%d, size=%d, type=%s, uuid=%s, name=%q\n", p.Offset/SectorSize, p.Size/SectorSize, p.Type, p.UUID, p.Name)
	}
	return b.String()
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// newVolumeID returns a random FAT volume serial as 8 hex digits; the
// filesystem's UUID is written "ABCD-1234".
func newVolumeID() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return fmt.Sprintf("%08X", b)
}

// fatUUID is how blkid and fstab name a FAT volume serial: "ABCD-1234".
func fatUUID(volumeID string) string { return volumeID[:4] + "-" + volumeID[4:] }

// espFile is one file to put on the ESP.
type espFile struct {
	src string // host file
	dst string // path on the ESP, slash-separated, relative
}

// writeDisk makes the disk image at out: a sparse file of the layout's size,
// the GPT (sfdisk), the ESP (mkfs.vfat at its offset, files by mtools) and the
// root filesystem (mkfs.ext4 -d at its offset). Nothing is mounted.
func writeDisk(ctx context.Context, t Disk, out string, l Layout, espVolumeID string, esp []espFile, rootDir, rootUUID string) error {
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
	if err := t.MkfsVFAT(ctx, out, l.ESP.Offset/SectorSize, l.ESP.Size/1024, fatClusterSectors(l.ESP.Size), "ESP", espVolumeID); err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	img := fmt.Sprintf("%s@@%d", out, l.ESP.Offset)
	made := map[string]bool{}
	for _, e := range esp {
		var dirs []string
		for d := path.Dir(e.dst); d != "." && d != "/" && !made[d]; d = path.Dir(d) {
			dirs = append([]string{d}, dirs...)
		}
		for _, d := range dirs {
			if err := t.Mkdir(ctx, img, d); err != nil {
				return fmt.Errorf("ESP: %w", err)
			}
			made[d] = true
		}
		if err := t.Copy(ctx, img, e.src, e.dst); err != nil {
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

// fatClusterSectors is the sectors per cluster for a FAT32 filesystem of size
// bytes: the largest of 1, 2, 4 and 8 that leaves well over 65525 clusters, FAT32's
// minimum (with fewer, mtools and some firmware take the filesystem for FAT16). The
// margin (70000 clusters before the FATs are taken off) covers the reserved sectors
// and the two FATs, under 7% of a small ESP.
func fatClusterSectors(size int64) int {
	s := 8
	for s > 1 && size/SectorSize/int64(s) < 70000 {
		s /= 2
	}
	return s
}

// configureRoot makes the root tree bootable as an image: fstab (root and ESP
// by UUID), the ESP mount point, hostname, networking by DHCP through
// systemd-networkd, kpreload's units as their presets say (when the image
// carries kpreload), and optionally an empty root password.
func configureRoot(ctx context.Context, sc Systemctl, root, rootUUID, espUUID string, emptyRootPassword, kpreload bool) error {
	fstab := fmt.Sprintf("# kpreload image: root and EFI system partition by filesystem UUID\nUUID=%s / ext4 errors=remount-ro 0 1\nUUID=%s /%s vfat umask=0077 0 1\n", rootUUID, espUUID, ImageESPMount)
	files := map[string]string{
		"etc/fstab":    fstab,
		"etc/hostname": "kpreload\n",
		"etc/hosts":    "127.0.0.1\tlocalhost\n127.0.1.1\tkpreload\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/systemd/network/80-kpreload-dhcp.network": "[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n",
	}
	for name, content := range files {
		if err := writeFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(root, ImageESPMount), 0o755); err != nil {
		return err
	}
	if err := sc.Enable(ctx, root, "systemd-networkd.service"); err != nil {
		return fmt.Errorf("enable systemd-networkd: %w", err)
	}
	if !kpreload {
		return setRootPassword(root, emptyRootPassword)
	}
	// kpreload's own units (rootfiles) are enabled as their preset file says.
	units, err := fs.Glob(rootfiles.FS, "files/usr/lib/systemd/system/kpreload-*")
	if err != nil {
		return err
	}
	for i, u := range units {
		units[i] = path.Base(u)
	}
	if err := sc.Preset(ctx, root, units...); err != nil {
		return fmt.Errorf("preset kpreload units: %w", err)
	}
	return setRootPassword(root, emptyRootPassword)
}

// setRootPassword clears root's password when empty is set.
func setRootPassword(root string, empty bool) error {
	if !empty {
		return nil
	}
	return setEmptyRootPassword(filepath.Join(root, "etc", "shadow"))
}

// setEmptyRootPassword clears root's password in a shadow file, so root logs
// in on the console without one.
func setEmptyRootPassword(shadow string) error {
	b, err := os.ReadFile(shadow)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	found := false
	for i, l := range lines {
		fields := strings.Split(l, ":")
		if len(fields) > 2 && fields[0] == "root" {
			fields[1] = ""
			lines[i] = strings.Join(fields, ":")
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%s has no root entry", shadow)
	}
	return writeFile(shadow, []byte(strings.Join(lines, "\n")), 0o640)
}
