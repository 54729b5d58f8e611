package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/internal/fileutil"
)

// BasePackages are installed into every image on top of mmdebstrap's minbase
// variant: systemd as init, udev, kmod, dbus (logind, systemctl), e2fsprogs and
// dosfstools (fsck of the root and the ESP at boot).
var BasePackages = []string{"systemd-sysv", "udev", "kmod", "dbus", "e2fsprogs", "dosfstools"}

// initramfsToolControl is the control file of kpreload-initramfs-tool, a tiny
// package built on the fly and installed into every image. Debian's kernel
// packages depend on "initramfs-tools | linux-initramfs-tool"; kpreload makes
// the image's initramfs itself (Stage, and the zz-kpreload hook for kernels
// installed later), so this package satisfies the dependency instead of
// initramfs-tools. Installing initramfs-tools and ignoring its initrd would
// cost a mkinitramfs run per kernel at build time and at every kernel update,
// leave a second, unused 14 MB initrd per kernel in /boot, and make two hooks
// fight over what boots. Being a real, installed package, it also keeps apt
// from pulling initramfs-tools in when a kernel is installed later.
const initramfsToolControl = `Package: kpreload-initramfs-tool
Version: 1.0
Architecture: all
Maintainer: kpreload <kpreload@localhost>
Priority: optional
Section: kernel
Provides: linux-initramfs-tool
Description: kpreload makes this system's initramfs
 The kpreload kernel install hook (/etc/kernel/postinst.d/zz-kpreload) builds
 the initramfs of every kernel from its module tree and the precompiled driver
 cache. This package stands in for initramfs-tools.
`

// RootfsSpec is what decides the root filesystem tarball mmdebstrap makes.
type RootfsSpec struct {
	// Suite is the Debian release.
	Suite string
	// Sources are the apt sources lines ("deb URL suite components").
	Sources []string
	// Packages are installed on top of the minbase variant.
	Packages []string
	// Date is the UTC day (YYYY-MM-DD) the archive was read.
	Date string
	// DistributionInitramfs leaves out the stand-in initramfs tool: the
	// packages bring initramfs-tools (a plain image).
	DistributionInitramfs bool
}

// rootfsSpec returns the spec of o's root filesystem, read on day date.
func rootfsSpec(o Options, date string) RootfsSpec {
	comps := "main contrib non-free non-free-firmware"
	pkgs := append([]string{}, BasePackages...)
	for _, k := range o.Kernels {
		pkgs = append(pkgs, "linux-image-"+k)
	}
	pkgs = append(pkgs, o.Packages...)
	if o.CloudInit {
		pkgs = append(pkgs, CloudInitPackages...)
	}
	if o.Bootloader == install.GRUB {
		pkgs = append(pkgs, GrubPackages...)
		pkgs = append(pkgs, SecureBootPackages...)
	}
	if o.Plain {
		pkgs = append(pkgs, "initramfs-tools")
	}
	return RootfsSpec{
		DistributionInitramfs: o.Plain,
		Suite:                 o.Suite,
		Sources: []string{
			fmt.Sprintf("deb %s %s %s", o.Mirror, o.Suite, comps),
			fmt.Sprintf("deb %s %s-updates %s", o.Mirror, o.Suite, comps),
			fmt.Sprintf("deb %s %s-security %s", o.SecurityMirror, o.Suite, comps),
			fmt.Sprintf("deb %s %s-backports %s", o.Mirror, o.Suite, comps),
		},
		Packages: sortedUnique(pkgs),
		Date:     date,
	}
}

// RootfsKey is the cache key of a root filesystem tarball: the SHA-256 of the
// suite, the apt sources, the package list, the stand-in initramfs tool's
// control file and the UTC day. A cached tarball is reused only for the same
// inputs on the same day, so it is never older than a day: what a rebuild on
// that day could differ in is an archive update published since, the same
// exposure as building from a day-old mirror snapshot, and the next day's build
// reads the archive again. Pinned inputs (kernel releases, driver versions)
// never change under one key; set RootfsCacheDir to "off" to always read the
// archive.
func RootfsKey(s RootfsSpec) string {
	h := sha256.New()
	fmt.Fprintf(h, "kpreload-rootfs/1\nsuite %s\n", s.Suite)
	for _, l := range s.Sources {
		fmt.Fprintf(h, "source %s\n", l)
	}
	for _, p := range s.Packages {
		fmt.Fprintf(h, "package %s\n", p)
	}
	if s.DistributionInitramfs {
		fmt.Fprintf(h, "tool initramfs-tools\ndate %s\n", s.Date)
	} else {
		fmt.Fprintf(h, "tool %s\ndate %s\n", initramfsToolControl, s.Date)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// rootfsTarball returns a tarball of the root filesystem of spec: from
// cacheDir when one with its key is there, else made with mmdebstrap (and
// stored in cacheDir unless it is "off"). work is a scratch directory.
func rootfsTarball(ctx context.Context, t Tools, spec RootfsSpec, cacheDir, work string, progress Progress) (tarball string, info RootfsInfo, err error) {
	key := RootfsKey(spec)
	info = RootfsInfo{Key: key, Packages: spec.Packages, Date: spec.Date}
	cached := ""
	if cacheDir != "off" {
		cached = filepath.Join(cacheDir, key+".tar")
		if _, err := os.Stat(cached); err == nil {
			info.Cached = true
			progress.say("rootfs: reusing %s (same packages and sources today)", cached)
			return cached, info, nil
		}
	}
	if _, err := t.Runner.LookPath("mmdebstrap"); err != nil {
		return "", info, fmt.Errorf("rootfs: mmdebstrap is missing (install it with scripts/deps.sh): %w", err)
	}
	deb := ""
	if !spec.DistributionInitramfs {
		toolDir := filepath.Join(work, "deb")
		if err := os.MkdirAll(filepath.Join(toolDir, "pkg", "DEBIAN"), 0o755); err != nil {
			return "", info, err
		}
		if err := os.WriteFile(filepath.Join(toolDir, "pkg", "DEBIAN", "control"), []byte(initramfsToolControl), 0o644); err != nil {
			return "", info, err
		}
		deb = filepath.Join(toolDir, "kpreload-initramfs-tool.deb")
		if err := t.Dpkg.BuildDeb(ctx, filepath.Join(toolDir, "pkg"), deb); err != nil {
			return "", info, fmt.Errorf("rootfs: build kpreload-initramfs-tool: %w", err)
		}
	}
	out := filepath.Join(work, "rootfs.tar")
	if cached != "" {
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return "", info, fmt.Errorf("rootfs cache: %w", err)
		}
		f, err := os.CreateTemp(cacheDir, ".tmp-"+key+"-*.tar")
		if err != nil {
			return "", info, fmt.Errorf("rootfs cache: %w", err)
		}
		f.Close()
		out = f.Name()
		defer os.Remove(out) // renamed into place on success
	}
	args := mmdebstrapArgs(spec, deb, out)
	progress.say("rootfs: mmdebstrap %s with %d packages (%s)", spec.Suite, len(spec.Packages), strings.Join(spec.Packages, " "))
	start := time.Now()
	if err := t.Mmdebstrap.Mmdebstrap(ctx, args); err != nil {
		return "", info, fmt.Errorf("rootfs: %w", err)
	}
	progress.say("rootfs: mmdebstrap done in %.0fs", time.Since(start).Seconds())
	if cached == "" {
		return out, info, nil
	}
	if err := fileutil.Publish(out, cached); err != nil {
		return "", info, fmt.Errorf("rootfs cache: %w", err)
	}
	pruneRootfsCache(cacheDir, cached)
	return cached, info, nil
}

// rootfsCacheMaxAge is how long tarballs stay in the rootfs cache: a key holds
// its day, so older tarballs can never be used again.
const rootfsCacheMaxAge = 48 * time.Hour

// pruneRootfsCache removes tarballs (and leftovers of killed builds) older than
// rootfsCacheMaxAge from dir, keeping keep.
func pruneRootfsCache(dir, keep string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		info, err := e.Info()
		if err != nil || p == keep || !strings.HasSuffix(e.Name(), ".tar") || !info.Mode().IsRegular() {
			continue
		}
		if time.Since(info.ModTime()) > rootfsCacheMaxAge {
			os.Remove(p)
		}
	}
}

// mmdebstrapArgs is mmdebstrap's command line for spec: the minbase variant,
// the packages and the stand-in initramfs tool (copied into the chroot, where
// apt's dpkg can see it, and removed again), written as a tarball to out.
func mmdebstrapArgs(spec RootfsSpec, deb, out string) []string {
	include := append([]string{}, spec.Packages...)
	var hooks []string
	if deb != "" {
		debDir := filepath.Dir(deb)
		include = append(include, deb)
		hooks = []string{
			"--setup-hook=mkdir -p \"$1" + debDir + "\" && cp " + shellQuote(deb) + " \"$1" + debDir + "/\"",
			"--customize-hook=rm -rf \"$1" + debDir + "\"",
		}
	}
	args := append([]string{"--variant=minbase", "--include=" + strings.Join(include, ",")}, hooks...)
	args = append(args,
		// No apt lists and .debs in the image: apt update on first use.
		"--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*.bin",
		spec.Suite, out,
	)
	return append(args, spec.Sources...)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// extractTarball unpacks a root filesystem tarball into dir as it is (owners,
// modes, device nodes, extended attributes).
func extractTarball(ctx context.Context, t Mmdebstrap, tarball, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := t.Unpack(ctx, tarball, dir); err != nil {
		return fmt.Errorf("rootfs: unpack %s: %w", tarball, err)
	}
	return nil
}
