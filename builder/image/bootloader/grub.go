package bootloader

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/internal/sandbox"
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
# kpreload image build: grub-probe for the disk being built (see builder/image/bootloader/grub.go).
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
// built: the root's own grub-mkconfig, in its sandbox, with grub-probe and
// grub-mkrelpath answered for the disk being made (restored afterwards).
func buildRootUpdateGrub(g Grub, rootUUID string) func(context.Context, string, io.Writer) error {
	return func(ctx context.Context, root string, log io.Writer) error {
		shims := map[string]string{
			"usr/sbin/grub-probe":    fmt.Sprintf(grubProbeShim, rootUUID),
			"usr/bin/grub-mkrelpath": grubMkrelpathShim,
		}
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
		return g.MkConfig(ctx, root, "/"+install.GrubConfig, grubDevLinks(rootUUID))
	}
}

// grubDevLinks are what grub-mkconfig finds in /dev of the disk being built:
// 10_linux names the root by UUID only where /dev/disk/by-uuid has it, as
// udev makes it, a link to the device grub-probe names (grubProbeShim's
// /dev/kpreload-root, which stands for it as /dev/null).
func grubDevLinks(rootUUID string) []sandbox.Link {
	return []sandbox.Link{
		{Path: "/dev/kpreload-root", Target: "null"},
		{Path: "/dev/disk/by-uuid/" + rootUUID, Target: "../../kpreload-root"},
	}
}

// GrubEarlyConfig is embedded in GRUB's core images: find the root
// filesystem by UUID and read /boot/grub from it.
func GrubEarlyConfig(rootUUID string) string {
	return "search.fs_uuid " + rootUUID + " root\nset prefix=($root)/boot/grub\n"
}

// grubImages makes GRUB's BIOS core.img with the root's own grub-mkimage
// (in its sandbox), reading /boot/grub of the root filesystem, and copies GRUB's
// BIOS and UEFI modules to /boot/grub/<platform>/ as grub-install does. It
// returns core.img's host path, in outDir. (The UEFI path is Debian's signed
// shim and GRUB, shimESP, which carries its modules built in.)
func grubImages(ctx context.Context, g Grub, root, rootUUID, outDir string) (core string, err error) {
	dir := filepath.Join(root, grubBuildDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "early.cfg"), []byte(GrubEarlyConfig(rootUUID)), 0o644); err != nil {
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
