package image

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/internal/fileutil"
)

// GrubPackages are the Debian packages a GRUB image carries: GRUB's BIOS and
// UEFI modules and images, and update-grub. Unlike grub-pc and grub-efi-amd64
// they install no boot code by themselves (the image builder does, once).
var GrubPackages = []string{"grub-pc-bin", "grub-efi-amd64-bin", "grub2-common"}

// grubBuildDir is where, inside the root, the build makes GRUB's images; it
// is removed before the root filesystem is written.
const grubBuildDir = "tmp/kpreload-grub"

// defaultGrub is /etc/default/grub of a GRUB image: the first entry
// (kpreload's) by default, no menu delay, the console on the screen and the
// first serial port, and the image's kernel parameters.
func defaultGrub(cmdline string) string {
	return `# Written by kpreload image build; update-grub reads it. kpreload's entries
# (/etc/grub.d/09_kpreload) come first, so GRUB_DEFAULT=0 boots kpreload's
# initramfs; the distribution's initramfs stays bootable as its own entry
# (raise GRUB_TIMEOUT to see the menu).
GRUB_DEFAULT=0
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="` + strings.ReplaceAll(strings.TrimSpace(cmdline), `"`, "") + `"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --speed=115200"
GRUB_DISABLE_OS_PROBER=true
GRUB_DISABLE_RECOVERY=true
`
}

// grubProbeShim answers grub-mkconfig's questions about the disk being built
// (a directory has no device grub-probe could examine): the root filesystem
// is ext4 (GRUB's ext2 module) with UUID %[1]s on partition 2 of a GPT disk,
// /boot on it. Only the build uses it; on the image, update-grub runs the
// real grub-probe.
const grubProbeShim = `#!/bin/sh
# kpreload image build: grub-probe for the disk being built (see builder/image/grub.go).
target=
for a in "$@"; do case "$a" in --target=*) target=${a#--target=} ;; esac; done
case "$target" in
device) echo /dev/kpreload-root ;;
fs_uuid) echo %[1]s ;;
fs) echo ext2 ;;
partmap) echo gpt ;;
abstraction | hints_string) ;;
drive) echo '(hd0,gpt2)' ;;
compatibility_hint) echo hd0,gpt2 ;;
*) echo "kpreload: grub-probe --target=$target is not answered at image build" >&2; exit 1 ;;
esac
`

// grubMkrelpathShim: /boot is on the root filesystem, so a path is its own
// path on its filesystem.
const grubMkrelpathShim = "#!/bin/sh\necho \"$1\"\n"

// buildRootUpdateGrub returns install.Options.UpdateGrub for a root being
// built: the root's own grub-mkconfig, through chroot, with grub-probe and
// grub-mkrelpath answered for the disk being made (restored afterwards).
func buildRootUpdateGrub(g Grub, rootUUID string) func(context.Context, string, io.Writer) error {
	return func(ctx context.Context, root string, log io.Writer) error {
		shims := map[string]string{
			"usr/sbin/grub-probe":    fmt.Sprintf(grubProbeShim, rootUUID),
			"usr/bin/grub-mkrelpath": grubMkrelpathShim,
		}
		// 10_linux names the root by UUID only where /dev/disk/by-uuid has
		// it, as udev makes it: a link to the device grub-probe names.
		dev := filepath.Join(root, "dev/kpreload-root")
		if err := os.WriteFile(dev, nil, 0o600); err != nil {
			return fmt.Errorf("GRUB: %w", err)
		}
		defer os.Remove(dev)
		byUUID := filepath.Join(root, "dev/disk/by-uuid", rootUUID)
		if err := os.MkdirAll(filepath.Dir(byUUID), 0o755); err != nil {
			return fmt.Errorf("GRUB: %w", err)
		}
		if err := os.Symlink("../../kpreload-root", byUUID); err != nil {
			return fmt.Errorf("GRUB: %w", err)
		}
		defer os.RemoveAll(filepath.Join(root, "dev/disk"))
		for p, text := range shims {
			real := filepath.Join(root, p)
			if err := os.Rename(real, real+".kpreload-real"); err != nil {
				return fmt.Errorf("GRUB: %w", err)
			}
			defer os.Rename(real+".kpreload-real", real)
			if err := os.WriteFile(real, []byte(text), 0o755); err != nil {
				return fmt.Errorf("GRUB: %w", err)
			}
		}
		return g.MkConfig(ctx, root, "/"+install.GrubConfig)
	}
}

// grubEarlyConfig is embedded in GRUB's core images: find the root
// filesystem by UUID and read /boot/grub from it.
func grubEarlyConfig(rootUUID string) string {
	return "search.fs_uuid " + rootUUID + " root\nset prefix=($root)/boot/grub\n"
}

// grubImages makes GRUB's BIOS core.img with the root's own grub-mkimage
// (chroot), reading /boot/grub of the root filesystem, and copies GRUB's
// BIOS and UEFI modules to /boot/grub/<platform>/ as grub-install does. It
// returns core.img's host path, in outDir. (The UEFI path is Debian's signed
// shim and GRUB, shimESP, which carries its modules built in.)
func grubImages(ctx context.Context, g Grub, root, rootUUID, outDir string) (core string, err error) {
	dir := filepath.Join(root, grubBuildDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "early.cfg"), []byte(grubEarlyConfig(rootUUID)), 0o644); err != nil {
		return "", err
	}
	args := []string{"-O", "i386-pc", "-d", "/usr/lib/grub/i386-pc", "-p", "/boot/grub",
		"-c", "/" + grubBuildDir + "/early.cfg", "-o", "/" + grubBuildDir + "/core.img",
		"biosdisk", "part_gpt", "ext2", "search_fs_uuid"}
	if err := g.MkImage(ctx, root, args...); err != nil {
		return "", fmt.Errorf("GRUB i386-pc image: %w", err)
	}
	core = filepath.Join(outDir, "core.img")
	if err := fileutil.CopyFile(filepath.Join(dir, "core.img"), core, 0o644); err != nil {
		return "", err
	}
	for _, format := range []string{"i386-pc", "x86_64-efi"} {
		lib := filepath.Join("usr/lib/grub", format)
		mods, _ := filepath.Glob(filepath.Join(root, lib, "*.mod"))
		lists, _ := filepath.Glob(filepath.Join(root, lib, "*.lst"))
		mods = append(mods, lists...)
		if len(mods) == 0 {
			return "", fmt.Errorf("GRUB %s: no modules in /%s (is %s in the image?)", format, lib, strings.Join(GrubPackages, ", "))
		}
		dst := filepath.Join(root, "boot/grub", format)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return "", err
		}
		for _, m := range mods {
			if err := fileutil.CopyFile(m, filepath.Join(dst, filepath.Base(m)), 0o644); err != nil {
				return "", err
			}
		}
	}
	return core, nil
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

// biosSetup makes a GPT disk boot GRUB under BIOS as grub-bios-setup does for
// a BIOS boot partition: core.img goes into the partition, boot.img into the
// MBR (keeping the protective partition table) pointing at core.img's first
// sector, and core.img's first blocklist covers the rest of it. The disk must
// hold l's partition table already.
func biosSetup(disk string, l Layout, bootImg, coreImg string) error {
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
