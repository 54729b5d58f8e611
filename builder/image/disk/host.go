package disk

import (
	"context"
	"fmt"
	"strings"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// Host is the real tools, run by Runner.
type Host struct{ Runner runner.Runner }

// sfdiskImage are sfdisk's options for a disk image: no kernel to tell.
var sfdiskImage = []string{"--quiet", "--no-reread", "--no-tell-kernel"}

// mtoolsEnv lets mtools work on a filesystem inside an image file.
var mtoolsEnv = []string{"MTOOLS_SKIP_CHECK=1"}

func (h Host) run(ctx context.Context, c runner.Cmd) error {
	_, err := runner.Or(h.Runner).Run(ctx, c)
	return err
}

// Partition implements Tools.
func (h Host) Partition(ctx context.Context, disk, script string) error {
	return h.run(ctx, runner.Cmd{Name: "sfdisk", Args: append(append([]string{}, sfdiskImage...), disk), Stdin: strings.NewReader(script)})
}

// RelocateBackupGPT implements Tools.
func (h Host) RelocateBackupGPT(ctx context.Context, disk string) error {
	return h.run(ctx, runner.Cmd{Name: "sfdisk", Args: append(append([]string{}, sfdiskImage...), "--relocate", "gpt-bak-std", disk)})
}

// MkfsVFAT implements Tools.
func (h Host) MkfsVFAT(ctx context.Context, disk string, offsetSectors, sizeKiB int64, clusterSectors int, label, volumeID string) error {
	return h.run(ctx, runner.Cmd{Name: "mkfs.vfat", Args: []string{"-F", "32", "-s", fmt.Sprint(clusterSectors), "-n", label, "-i", volumeID,
		fmt.Sprintf("--offset=%d", offsetSectors), disk, fmt.Sprint(sizeKiB)}})
}

// Mkdir implements Tools.
func (h Host) Mkdir(ctx context.Context, img, dir string) error {
	return h.run(ctx, runner.Cmd{Name: "mmd", Args: []string{"-i", img, "::/" + dir}, Env: mtoolsEnv})
}

// Copy implements Tools.
func (h Host) Copy(ctx context.Context, img, src, dst string) error {
	return h.run(ctx, runner.Cmd{Name: "mcopy", Args: []string{"-o", "-i", img, src, "::/" + dst}, Env: mtoolsEnv})
}

// MkfsExt4 implements Tools. The filesystem has ext4's verity feature
// (mkfs needs no kernel support for it), so the booted image's /init can
// turn fs-verity on for the module cache's files and later boots measure
// them instead of reading them (live/loader); it is a read-only-compatible
// feature, which GRUB ignores and Debian's kernels (CONFIG_FS_VERITY=y)
// mount read-write. Its blocks are 4096 bytes whatever its size: kernels
// before 6.3 turn fs-verity on only where the block size is the page size.
func (h Host) MkfsExt4(ctx context.Context, disk string, offset, sizeKiB int64, label, uuid, rootDir string) error {
	return h.run(ctx, runner.Cmd{Name: "mkfs.ext4", Args: []string{"-q", "-F", "-O", "verity", "-b", "4096", "-L", label, "-U", uuid,
		"-E", fmt.Sprintf("offset=%d", offset), "-d", rootDir, disk, fmt.Sprintf("%dk", sizeKiB)}})
}

// CopySparse implements Tools.
func (h Host) CopySparse(ctx context.Context, src, dst string) error {
	return h.run(ctx, runner.Cmd{Name: "cp", Args: []string{"--sparse=always", "--reflink=auto", src, dst}})
}

// TarSparse implements Tools.
func (h Host) TarSparse(ctx context.Context, dir, name, out string) error {
	return h.run(ctx, runner.Cmd{Name: "tar", Args: []string{"--format=gnu", "--owner=0", "--group=0", "--numeric-owner", "-Sczf", out, name}, Dir: dir})
}
