// Package rootfs finds the root filesystem named by the kernel command line
// (root=UUID=..., LABEL=..., PARTUUID=..., or a device path), identifies its type
// from the superblock and mounts it.
package rootfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/u-root/u-root/pkg/mount/block"
	"golang.org/x/sys/unix"
)

// Spec is a parsed root= value.
type Spec struct {
	// Kind is "uuid", "label", "partuuid" or "path".
	Kind  string
	Value string
}

// ParseSpec parses the value of root=.
func ParseSpec(s string) (Spec, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Spec{}, errors.New("no root= on the kernel command line")
	}
	for _, k := range []string{"UUID", "LABEL", "PARTUUID"} {
		if v, ok := strings.CutPrefix(s, k+"="); ok {
			if v == "" {
				return Spec{}, fmt.Errorf("root=%s: empty %s", s, k)
			}
			return Spec{Kind: strings.ToLower(k), Value: v}, nil
		}
	}
	if strings.HasPrefix(s, "/dev/") {
		return Spec{Kind: "path", Value: s}, nil
	}
	return Spec{}, fmt.Errorf("root=%s: want UUID=, LABEL=, PARTUUID= or a /dev/ path", s)
}

// String renders the spec as it appears on the command line.
func (s Spec) String() string {
	if s.Kind == "path" {
		return s.Value
	}
	return strings.ToUpper(s.Kind) + "=" + s.Value
}

// Find returns the /dev path of the block device the spec names, or an error that
// lists what block devices exist.
func Find(s Spec) (string, error) {
	switch s.Kind {
	case "path":
		if _, err := os.Stat(s.Value); err != nil {
			return "", fmt.Errorf("%s not present yet (have: %s)", s.Value, present())
		}
		return s.Value, nil
	case "partuuid":
		devs, err := block.GetBlockDevices()
		if err != nil {
			return "", fmt.Errorf("list block devices: %w", err)
		}
		devs = devs.FilterPartID(s.Value)
		if len(devs) == 0 {
			return "", fmt.Errorf("no block device with %s (have: %s)", s, present())
		}
		return "/dev/" + devs[0].Name, nil
	case "uuid":
		// Read here rather than by u-root's block package, which knows no btrfs.
		if dev, ok := firstDevice(func(dev string) bool { u, err := UUID(dev); return err == nil && strings.EqualFold(u, s.Value) }); ok {
			return dev, nil
		}
		return "", fmt.Errorf("no block device with %s (have: %s)", s, present())
	case "label":
		if dev, ok := firstDevice(func(dev string) bool { l, err := Label(dev); return err == nil && l == s.Value }); ok {
			return dev, nil
		}
		return "", fmt.Errorf("no filesystem labelled %q (have: %s)", s.Value, present())
	}
	return "", fmt.Errorf("unknown root kind %q", s.Kind)
}

// firstDevice returns the first block device, in name order, that match says is it.
func firstDevice(match func(dev string) bool) (string, bool) {
	names, _ := filepath.Glob("/sys/class/block/*")
	sort.Strings(names)
	for _, n := range names {
		if dev := "/dev/" + filepath.Base(n); match(dev) {
			return dev, true
		}
	}
	return "", false
}

func present() string {
	names, _ := filepath.Glob("/sys/class/block/*")
	if len(names) == 0 {
		return "no block devices"
	}
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	return strings.Join(names, ", ")
}

// Superblock magic numbers and offsets of the filesystems we identify.
var probes = []struct {
	fstype string
	off    int64
	magic  []byte
}{
	{"ext4", 1024 + 56, []byte{0x53, 0xef}},
	{"xfs", 0, []byte("XFSB")},
	{"btrfs", 0x10040, []byte("_BHRfS_M")},
	{"vfat", 0x52, []byte("FAT32   ")},
	{"vfat", 0x36, []byte("FAT16   ")},
	{"vfat", 0x36, []byte("FAT12   ")},
	{"iso9660", 0x8001, []byte("CD001")},
}

// FSType identifies the filesystem on dev from its superblock.
func FSType(dev string) (string, error) {
	f, err := os.Open(dev)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return fsType(f)
}

func fsType(r io.ReaderAt) (string, error) {
	for _, p := range probes {
		b := make([]byte, len(p.magic))
		if _, err := r.ReadAt(b, p.off); err != nil {
			continue
		}
		if bytes.Equal(b, p.magic) {
			return p.fstype, nil
		}
	}
	return "", errors.New("unknown filesystem (not ext2/3/4, xfs, btrfs, vfat or iso9660)")
}

// Label reads the filesystem label of an ext2/3/4, xfs, btrfs or vfat filesystem,
// or the volume id of an iso9660 one, on dev.
func Label(dev string) (string, error) {
	f, err := os.Open(dev)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return label(f)
}

func label(r io.ReaderAt) (string, error) {
	t, err := fsType(r)
	if err != nil {
		return "", err
	}
	var off, n int64
	trim := "\x00"
	switch t {
	case "ext4":
		off, n = 1024+120, 16
	case "xfs":
		off, n = 108, 12
	case "btrfs":
		off, n = 0x10000+0x12b, 256
	case "vfat":
		// The boot sector's BS_VolLab: after the FAT32 extended BPB when
		// "FAT32   " names the type there, else after FAT12/16's.
		off, n, trim = 0x2b, 11, " \x00"
		if b := make([]byte, 8); func() bool { _, err := r.ReadAt(b, 0x52); return err == nil }() && string(b) == "FAT32   " {
			off = 0x47
		}
	case "iso9660":
		// The primary volume descriptor's volume identifier.
		off, n, trim = 0x8000+40, 32, " \x00"
	default:
		return "", fmt.Errorf("labels of %s are not read", t)
	}
	b := make([]byte, n)
	if _, err := r.ReadAt(b, off); err != nil {
		return "", err
	}
	return string(bytes.TrimRight(b, trim)), nil
}

// Options are the mount choices from the kernel command line.
type Options struct {
	FSType string // rootfstype=, or "" to detect
	Flags  string // rootflags=
	RW     bool   // rw (default ro, as the kernel does)
}

// Mount mounts dev on target.
func Mount(dev, target, fstype string, o Options) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	var flags uintptr
	if !o.RW {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount(dev, target, fstype, flags, o.Flags); err != nil {
		return fmt.Errorf("mount %s (%s) on %s: %w", dev, fstype, target, err)
	}
	return nil
}
