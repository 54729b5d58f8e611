package image

import (
	"context"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/internal/runner"
)

// Tools are the external programs a Job's phases run, each behind its own
// small interface (as a Packer plugin puts a driver in front of QEMU), all
// over one runner.Runner: NewTools(runner.Exec{}) runs the real programs,
// a unit test's runner records the commands and makes the files they would.
type Tools struct {
	// Runner finds the programs (the prepare phase's checks).
	Runner runner.Runner
	// Mmdebstrap makes the root filesystem tarball and unpacks it.
	Mmdebstrap Mmdebstrap
	// Dpkg builds, queries and unpacks Debian packages.
	Dpkg Dpkg
	// Systemctl enables units in a root.
	Systemctl Systemctl
	// Disk partitions the disk and makes its filesystems.
	Disk disk.Tools
	// Grub runs the root's own GRUB tools.
	Grub bootloader.Grub
	// QemuImg converts the raw disk to the other formats.
	QemuImg formats.QemuImg
	// Userspace builds a recipe's userspace source.
	Userspace stage.Userspace
	// VirtFwVars writes OVMF variable stores.
	VirtFwVars bootloader.VirtFwVars
}

// NewTools returns the real tools, run through r.
func NewTools(r runner.Runner) Tools {
	boot, root, st := bootloader.Host{Runner: r}, rootfs.Host{Runner: r}, stage.Host{Runner: r}
	return Tools{Runner: r, Mmdebstrap: root, Dpkg: dpkgTools{root, st}, Systemctl: root, Disk: disk.Host{Runner: r}, Grub: boot, QemuImg: formats.Host{Runner: r}, Userspace: st, VirtFwVars: boot}
}

// DefaultTools are the real tools, run by runner.Default.
func DefaultTools() Tools { return NewTools(runner.Default) }

// orDefault returns t, or DefaultTools when t is the zero value.
func (t Tools) orDefault() Tools {
	if t.Runner == nil {
		return DefaultTools()
	}
	return t
}

// Mmdebstrap makes a Debian root filesystem (rootfs.Mmdebstrap).
type Mmdebstrap = rootfs.Mmdebstrap

// Systemctl is systemctl on a root that is not running (rootfs.Systemctl).
type Systemctl = rootfs.Systemctl

// Dpkg is dpkg's package tools: rootfs's and stage's.
type Dpkg interface {
	rootfs.Dpkg
	stage.Dpkg
}

// dpkgTools are the real dpkg tools: rootfs's and stage's (dpkg -x).
type dpkgTools struct {
	rootfs.Host
	x stage.Host
}

// Extract implements Dpkg.
func (d dpkgTools) Extract(ctx context.Context, deb, dir string) error {
	return d.x.Extract(ctx, deb, dir)
}

// forRootfs returns the tools the rootfs stage runs.
func (t Tools) forRootfs() rootfs.Tools {
	return rootfs.Tools{Runner: t.Runner, Mmdebstrap: t.Mmdebstrap, Dpkg: t.Dpkg}
}

// forFormats returns the tools the formats stage runs.
func (t Tools) forFormats() formats.Tools {
	return formats.Tools{Disk: t.Disk, QemuImg: t.QemuImg}
}
