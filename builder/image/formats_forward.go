package image

import (
	"context"

	"github.com/kpreload/kpreload/builder/image/formats"
)

// The formats stage lives in builder/image/formats; these names keep the
// image package's API.

// Formats an image can be written in (Options.Formats): formats'.
const (
	FormatRaw   = formats.Raw
	FormatQCOW2 = formats.QCOW2
	FormatVHD   = formats.VHD
	FormatVMDK  = formats.VMDK
	FormatGCE   = formats.GCE
)

// Firmware an image boots under (Manifest.BootFirmware).
const (
	BootUEFI = formats.BootUEFI
	BootBIOS = formats.BootBIOS
)

// FormatNames lists the formats an image can be written in.
func FormatNames() []string { return formats.Names() }

// CheckFormats checks format names: each known, none twice.
func CheckFormats(names []string) error { return formats.Check(names) }

// FormatFile is the file name of an image called name in format.
func FormatFile(name, format string) string { return formats.File(name, format) }

// QEMUFormat is QEMU's block driver for a file of format.
func QEMUFormat(format string) (string, bool) { return formats.QEMU(format) }

var (
	formatProblems = formats.Problems
	bootFirmware   = formats.BootFirmware
)

// writeFormat writes the raw disk in format with t's tools (formats.Write).
func writeFormat(ctx context.Context, t Tools, raw, format, dir, name string, progress Progress) (string, int64, error) {
	return formats.Write(ctx, formats.Tools{Disk: t.Disk, QemuImg: t.QemuImg}, raw, format, dir, name, progress)
}
