// Package formats writes an image's raw disk in the formats the clouds
// import (raw, qcow2, VHD, VMDK, GCE's tar.gz): the one table of formats,
// each made by qemu-img or GNU tar behind Tools.
package formats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/internal/progress"
)

// Formats an image can be written in (Options.Formats, `--format`). Every
// one is made from the raw disk by qemu-img or GNU tar; diskFormats says how.
const (
	// Raw is the plain disk image (<Name>.raw).
	Raw = "raw"
	// QCOW2 is QEMU's copy-on-write format (<Name>.qcow2).
	QCOW2 = "qcow2"
	// VHD is a fixed VHD whose virtual size is a whole number of MiB
	// (<Name>.vhd), what Azure imports.
	VHD = "vhd"
	// VMDK is a streamOptimized VMDK (<Name>.vmdk), what EC2's
	// import-image and VMware take.
	VMDK = "vmdk"
	// GCE is GCE's image import format (<Name>.tar.gz): disk.raw, grown
	// to a whole number of GiB, in a gzip'd sparse GNU tar.
	GCE = "gce"
)

// diskFormat is one output format: its file and how it is made from the raw
// disk. The table below is the one place formats are decided.
type diskFormat struct {
	// name is the format's name in Options.Formats.
	name string
	// ext is the file's extension: <Name>.<ext>.
	ext string
	// qemu is QEMU's block driver for the file ("" when QEMU cannot boot it as is).
	qemu string
	// align, when above 0, is what the virtual disk size must be a whole
	// multiple of: a raw disk of another size is grown first (growDisk).
	align int64
	// how says how it is made, for progress lines.
	how string
	// make writes out from raw (nil: the raw disk itself); scratch is an empty
	// directory on the output's filesystem, removed afterwards.
	make func(ctx context.Context, t Tools, raw, out, scratch string) error
}

// diskFormats are the formats, in the order Names lists them.
var diskFormats = []diskFormat{
	{Raw, "raw", "raw", 0, "the raw disk", nil},
	{QCOW2, "qcow2", "qcow2", 0, "qemu-img convert -O qcow2", qemuImg("qcow2")},
	{VHD, "vhd", "vpc", disk.MiB, "qemu-img convert -O vpc -o subformat=fixed,force_size=on", qemuImg("vpc", "subformat=fixed,force_size=on")},
	{VMDK, "vmdk", "vmdk", 0, "qemu-img convert -O vmdk -o subformat=streamOptimized", qemuImg("vmdk", "subformat=streamOptimized")},
	{GCE, "tar.gz", "", disk.GiB, "tar --format=gnu -Sczf of disk.raw", gceTarball},
}

// lookupFormat returns the format called name.
func lookupFormat(name string) (diskFormat, bool) {
	for _, f := range diskFormats {
		if f.name == name {
			return f, true
		}
	}
	return diskFormat{}, false
}

// Names lists the formats an image can be written in.
func Names() []string {
	names := make([]string, len(diskFormats))
	for i, f := range diskFormats {
		names[i] = f.name
	}
	return names
}

// Check checks format names (Options.Formats): each known, none twice.
// An unknown name's error lists the valid ones.
func Check(names []string) error {
	return errors.Join(Problems(names)...)
}

// Problems is Check' problems, one error each.
func Problems(names []string) []error {
	var errs []error
	seen := map[string]bool{}
	for _, n := range names {
		if _, ok := lookupFormat(n); !ok {
			errs = append(errs, fmt.Errorf("format %q: want one of %s", n, strings.Join(Names(), ", ")))
		} else if seen[n] {
			errs = append(errs, fmt.Errorf("format %s given twice", n))
		}
		seen[n] = true
	}
	return errs
}

// File is the file name of an image called name in format (such as
// "ci.vmdk", or "ci.tar.gz" for GCE).
func File(name, format string) string {
	if f, ok := lookupFormat(format); ok {
		format = f.ext
	}
	return name + "." + format
}

// QEMU is QEMU's block driver for a file of format (the format= of its
// -drive: "vpc" for VHD), and false for formats QEMU cannot boot as
// they are (GCE) or unknown ones.
func QEMU(format string) (string, bool) {
	f, ok := lookupFormat(format)
	return f.qemu, ok && f.qemu != ""
}

// Firmware an image boots under (Manifest.BootFirmware).
const (
	BootUEFI = "uefi"
	BootBIOS = "bios"
)

// BootFirmware is the firmware an image with bootloader b boots under:
// systemd-boot is a UEFI program; GRUB's image has a BIOS boot partition and
// GRUB's UEFI image on the ESP.
func BootFirmware(b install.Bootloader) []string {
	if b == install.GRUB {
		return []string{BootBIOS, BootUEFI}
	}
	return []string{BootUEFI}
}

// Write writes the raw disk raw in format into dir as File(name,
// format) and returns the file's path and the virtual disk size it holds.
// Raw returns raw itself (which must be that file already).
func Write(ctx context.Context, t Tools, raw, format, dir, name string, report func(string)) (string, int64, error) {
	f, ok := lookupFormat(format)
	if !ok {
		return "", 0, Check([]string{format})
	}
	st, err := os.Stat(raw)
	if err != nil {
		return "", 0, err
	}
	size := st.Size()
	if f.make == nil {
		return raw, size, nil
	}
	scratch, err := os.MkdirTemp(dir, ".scratch-")
	if err != nil {
		return "", 0, err
	}
	defer os.RemoveAll(scratch)
	src := raw
	if f.align > 0 && size%f.align != 0 {
		grown := (size + f.align - 1) / f.align * f.align
		progress.Say(report, "disk: %s wants a whole number of %s: growing a copy of the disk from %d to %d bytes", format, unitName(f.align), size, grown)
		src = filepath.Join(scratch, "disk.raw")
		if err := growDisk(ctx, t.Disk, raw, src, grown); err != nil {
			return "", 0, fmt.Errorf("%s: %w", format, err)
		}
		size = grown
	}
	out := filepath.Join(dir, File(name, format))
	progress.Say(report, "disk: %s (%s)", format, f.how)
	if err := f.make(ctx, t, src, out, scratch); err != nil {
		os.Remove(out)
		return "", 0, fmt.Errorf("%s: %w", format, err)
	}
	return out, size, nil
}

// unitName names align for messages.
func unitName(align int64) string {
	switch align {
	case disk.GiB:
		return "GiB"
	case disk.MiB:
		return "MiB"
	}
	return fmt.Sprintf("%d bytes", align)
}

// qemuImg makes a format with qemu-img convert -O format [-o options].
func qemuImg(format string, options ...string) func(context.Context, Tools, string, string, string) error {
	return func(ctx context.Context, t Tools, raw, out, _ string) error {
		return t.QemuImg.Convert(ctx, format, options, raw, out)
	}
}

// gceTarball writes GCE's import format: the raw disk as disk.raw (a hard
// link to raw, or raw itself when growDisk made it there), alone in a gzip'd
// GNU tar with its holes recorded (-S), so the archive never holds the
// unallocated space.
func gceTarball(ctx context.Context, t Tools, raw, out, scratch string) error {
	disk := filepath.Join(scratch, "disk.raw")
	if raw != disk {
		if err := os.Link(raw, disk); err != nil {
			if err := t.Disk.CopySparse(ctx, raw, disk); err != nil {
				return err
			}
		}
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	return t.Disk.TarSparse(ctx, scratch, "disk.raw", abs)
}

// growDisk writes a sparse copy of the GPT disk raw to out, grown to size
// bytes, with its backup GPT moved to the new end (sfdisk --relocate): the
// partitions are unchanged and the new space is free at the end of the disk.
func growDisk(ctx context.Context, t disk.Tools, raw, out string, size int64) error {
	if err := t.CopySparse(ctx, raw, out); err != nil {
		return err
	}
	if err := os.Truncate(out, size); err != nil {
		return err
	}
	if err := t.RelocateBackupGPT(ctx, out); err != nil {
		return fmt.Errorf("move the backup GPT to the end of the grown disk (is it a GPT disk?): %w", err)
	}
	return nil
}

// Tools are the programs that write the formats.
type Tools struct {
	// Disk copies and grows the raw disk (cp, sfdisk) and tars it (GCE).
	Disk disk.Tools
	// QemuImg converts it.
	QemuImg QemuImg
}

// QemuImg is qemu-img.
type QemuImg interface {
	// Convert converts the raw disk to out in format, with -o options.
	Convert(ctx context.Context, format string, options []string, raw, out string) error
}
