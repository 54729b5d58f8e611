package rootdisk

import (
	"fmt"
	"strings"
)

// The root filesystems Build can make.
const (
	FSExt4  = "ext4"
	FSXFS   = "xfs"
	FSBtrfs = "btrfs"
)

// FSTypes lists the filesystems Build can make, the default first.
var FSTypes = []string{FSExt4, FSXFS, FSBtrfs}

// DefaultLabelXFS is the label of an xfs image when Options.Label is empty:
// DefaultLabel does not fit xfs's 12 characters.
const DefaultLabelXFS = "kpreloadroot"

// fsSpec is what Build needs to know about one filesystem: its mkfs, the
// package that ships it, its sizes and labels.
type fsSpec struct {
	name string
	// mkfs is the program that writes the image; pkg is the Debian package with it.
	mkfs, pkg string
	// minMB is the smallest size Build picks itself; minExplicitMB the smallest
	// Options.SizeMB it accepts (mkfs refuses, or silently grows, smaller images).
	minMB, minExplicitMB int
	// defaultLabel is the label when none is given; maxLabel the longest one mkfs takes.
	defaultLabel string
	maxLabel     int
}

// filesystems holds one fsSpec per name of FSTypes.
var filesystems = map[string]fsSpec{
	FSExt4:  {name: FSExt4, mkfs: "mkfs.ext4", pkg: "e2fsprogs", minMB: 64, defaultLabel: DefaultLabel, maxLabel: 16},
	FSXFS:   {name: FSXFS, mkfs: "mkfs.xfs", pkg: "xfsprogs", minMB: 300, minExplicitMB: 300, defaultLabel: DefaultLabelXFS, maxLabel: 12},
	FSBtrfs: {name: FSBtrfs, mkfs: "mkfs.btrfs", pkg: "btrfs-progs", minMB: 128, minExplicitMB: 109, defaultLabel: DefaultLabel, maxLabel: 255},
}

// lookupFS returns the spec of the filesystem name ("" is ext4), or an error
// listing the ones Build can make.
func lookupFS(name string) (fsSpec, error) {
	if name == "" {
		name = FSExt4
	}
	f, ok := filesystems[name]
	if !ok {
		return fsSpec{}, fmt.Errorf("rootdisk: filesystem %q: want one of %s", name, strings.Join(FSTypes, ", "))
	}
	return f, nil
}

// LabelFor returns the label Build gives an image of filesystem fstype when
// Options.Label is empty (DefaultLabel, or DefaultLabelXFS on xfs).
func LabelFor(fstype string) string {
	if f, err := lookupFS(fstype); err == nil {
		return f.defaultLabel
	}
	return DefaultLabel
}
