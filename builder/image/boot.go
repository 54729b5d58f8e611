package image

import (
	"fmt"
	"strings"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
)

// ESP layout: where Build (and the install hook on a running image) put
// systemd-boot, its configuration and each kernel's files.
const (
	// espBootloader is systemd-boot as the removable-media default loader,
	// which firmware boots with no NVRAM entry.
	espBootloader = "EFI/BOOT/BOOTX64.EFI"
	// espSystemdBoot is systemd-boot's own path (bootctl's layout).
	espSystemdBoot = "EFI/systemd/systemd-bootx64.efi"
	// espLoaderConf is systemd-boot's configuration.
	espLoaderConf = "loader/loader.conf"
	// espEntriesDir holds one loader entry per kernel.
	espEntriesDir = "loader/entries"
	// espKernelsDir holds <release>/vmlinuz and <release>/initrd.img.
	espKernelsDir = "kpreload"
)

// SystemdBootEFI is systemd-boot's EFI binary on the build host (package
// systemd-boot-efi).
const SystemdBootEFI = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi"

// EntryName is the loader entry file name of a kernel, such as
// "kpreload-6.1.0-56-cloud-amd64.conf".
func EntryName(kernel string) string { return "kpreload-" + kernel + ".conf" }

// EntryPath is the loader entry's path on the ESP.
func EntryPath(kernel string) string { return espEntriesDir + "/" + EntryName(kernel) }

// ESPKernelPath and ESPInitrdPath are where a kernel's image and kpreload
// initramfs go on the ESP.
func ESPKernelPath(kernel string) string { return espKernelsDir + "/" + kernel + "/vmlinuz" }

// ESPInitrdPath is where a kernel's kpreload initramfs goes on the ESP.
func ESPInitrdPath(kernel string) string { return espKernelsDir + "/" + kernel + "/initrd.img" }

// LoaderEntry returns the systemd-boot loader entry (Boot Loader Specification
// type #1) of a kernel with the given command line. The install hook writes
// the same text (tests hold them equal).
func LoaderEntry(kernel, cmdline string) string {
	return fmt.Sprintf("title Debian GNU/Linux %s (kpreload)\nversion %s\nlinux /%s\ninitrd /%s\noptions %s\n",
		kernel, kernel, ESPKernelPath(kernel), ESPInitrdPath(kernel), strings.TrimSpace(cmdline))
}

// LoaderConf returns systemd-boot's loader.conf booting the given kernel's
// entry by default with no menu delay (the menu still appears while a key is held).
func LoaderConf(defaultKernel string) string {
	return fmt.Sprintf("default %s\ntimeout 0\nconsole-mode keep\neditor no\n", EntryName(defaultKernel))
}

// ImageCmdlineFor is the kernel command line of an image's loader entries: the
// root filesystem by UUID, read-write, then the extra parameters.
func ImageCmdlineFor(rootUUID, extra string) string {
	s := "root=UUID=" + rootUUID + " rw"
	if e := strings.TrimSpace(extra); e != "" {
		s += " " + e
	}
	return s
}

// PostinstHook is /etc/kernel/postinst.d/zz-kpreload: Debian's kernel packages
// run it as "zz-kpreload <release> <image>" after installing a kernel. It
// builds the kpreload initramfs for the new kernel from its module tree and the
// image's module cache (no compiling), installs kernel, initramfs and loader
// entry on the ESP mounted at /boot/efi and makes the new kernel the default,
// and warns clearly when the cache has no driver cell for the kernel (the
// kernel still boots; kpreload then loads no GPU driver for it). KPRELOAD_ROOT
// prefixes every path (tests run it on a directory tree).
const PostinstHook = `#!/bin/sh
# kpreload: make the kpreload initramfs and the systemd-boot entry of a newly
# installed kernel. Installed by kpreload's image builder; run by the kernel
# packages as: zz-kpreload <release> [<image>]. Nothing is compiled here: the
# drivers come precompiled from the module cache.
set -eu

version="${1:-}"
root="${KPRELOAD_ROOT:-}"
image="${2:-/boot/vmlinuz-$version}"
kpreload="${KPRELOAD_BIN:-$root/usr/bin/kpreload}"
cache="$root/` + ImageCacheDir + `"
esp="$root/boot/efi"

if [ -z "$version" ]; then
	echo "kpreload: kernel postinst hook: no kernel release given" >&2
	exit 0
fi
# A chrooted install may pass the image's path inside the root.
case "$image" in
"$root"/*) ;;
*) image="$root$image" ;;
esac

if [ ! -f "$cache/` + bootindex.IndexDir + `/$version.json" ]; then
	cached=$(ls "$cache/` + bootindex.IndexDir + `" 2>/dev/null | sed -n 's/\.json$//p' | tr '\n' ' ')
	echo "kpreload: WARNING: the module cache has no driver cell for kernel $version." >&2
	echo "kpreload: WARNING: it will boot, but kpreload will load no GPU driver for it." >&2
	echo "kpreload: WARNING: kernels the cache holds: ${cached:-none}" >&2
	echo "kpreload: WARNING: rebuild the image with this kernel (kpreload image build --kernel $version ...)." >&2
fi

mkdir -p "$root/boot/kpreload"
initrd="$root/boot/kpreload/initrd.img-$version"
set --
if [ -f "$root/etc/kpreload/early-drivers" ]; then
	# The image asked for the early decision: the driver sets go in, the index is complete.
	set -- --cache "$cache" --complete
	[ -f "$root/etc/kpreload/instance.yaml" ] && set -- "$@" --instance "$root/etc/kpreload/instance.yaml"
fi
"$kpreload" initramfs --kernel "$version" --modules-dir "$root/lib/modules/$version" \
	--init "$root/usr/lib/kpreload/kpreload-init" --firmware-dir "$root/lib/firmware" "$@" -o "$initrd" >/dev/null
echo "kpreload: built $initrd"

if [ ! -d "$esp/loader" ]; then
	echo "kpreload: WARNING: no systemd-boot ESP at $esp (is it mounted?): kernel $version is not added to the boot menu" >&2
	exit 0
fi
if [ -f "$root/etc/kpreload/cmdline" ]; then
	cmdline=$(cat "$root/etc/kpreload/cmdline")
else
	cmdline=$(sed -e 's/BOOT_IMAGE=[^ ]* *//' -e 's/initrd=[^ ]* *//g' /proc/cmdline)
fi
mkdir -p "$esp/kpreload/$version" "$esp/loader/entries"
cp "$image" "$esp/kpreload/$version/vmlinuz.new"
mv "$esp/kpreload/$version/vmlinuz.new" "$esp/kpreload/$version/vmlinuz"
cp "$initrd" "$esp/kpreload/$version/initrd.img.new"
mv "$esp/kpreload/$version/initrd.img.new" "$esp/kpreload/$version/initrd.img"
entry="$esp/loader/entries/kpreload-$version.conf"
printf 'title Debian GNU/Linux %s (kpreload)\nversion %s\nlinux /kpreload/%s/vmlinuz\ninitrd /kpreload/%s/initrd.img\noptions %s\n' \
	"$version" "$version" "$version" "$version" "$cmdline" >"$entry.new"
mv "$entry.new" "$entry"
conf="$esp/loader/loader.conf"
if [ -f "$conf" ] && grep -q '^default ' "$conf"; then
	sed "s/^default .*/default kpreload-$version.conf/" "$conf" >"$conf.new"
else
	{ [ -f "$conf" ] && cat "$conf"; echo "default kpreload-$version.conf"; } >"$conf.new"
fi
mv "$conf.new" "$conf"
sync
echo "kpreload: kernel $version installed on $esp and made the default boot entry"
`

// PostrmHook is /etc/kernel/postrm.d/zz-kpreload: after a kernel is removed it
// deletes that kernel's initramfs, ESP files and loader entry, and points the
// default entry at a remaining kpreload kernel when it named the removed one.
const PostrmHook = `#!/bin/sh
# kpreload: remove a removed kernel's kpreload initramfs and boot entry.
set -eu

version="${1:-}"
root="${KPRELOAD_ROOT:-}"
esp="$root/boot/efi"
[ -n "$version" ] || exit 0

rm -f "$root/boot/kpreload/initrd.img-$version"
[ -d "$esp/loader" ] || exit 0
rm -rf "$esp/kpreload/$version"
rm -f "$esp/loader/entries/kpreload-$version.conf"
conf="$esp/loader/loader.conf"
if [ -f "$conf" ] && grep -q "^default kpreload-$version.conf\$" "$conf"; then
	other=$(ls "$esp/loader/entries" 2>/dev/null | grep '^kpreload-.*\.conf$' | sort -V | tail -n 1 || true)
	if [ -n "$other" ]; then
		sed "s/^default .*/default $other/" "$conf" >"$conf.new"
	else
		grep -v '^default ' "$conf" >"$conf.new" || true
	fi
	mv "$conf.new" "$conf"
fi
sync
echo "kpreload: kernel $version removed from $esp"
`
