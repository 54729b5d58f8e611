package image

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/builder/archive"
)

// initramfsTool is the virtual package every Debian initramfs generator
// provides and conflicts with; kpreload-initramfs-tool provides it in a
// kpreload image (see initramfsToolControl).
const initramfsTool = "linux-initramfs-tool"

// initramfsTools are the packages of bookworm and trixie that provide
// initramfsTool (or are the halves of one): refused in a kpreload image
// without asking the archive.
var initramfsTools = []string{
	"initramfs-tools", "initramfs-tools-core", "dracut", "dracut-core",
	"tiny-initramfs", "tiny-initramfs-core", "booster", initramfsTool,
}

// initramfsRefusal is the reason a package that brings another initramfs
// generator is refused, and what to do instead.
func initramfsRefusal(pkg string, plain bool) error {
	if plain {
		return fmt.Errorf("package %s: a plain image uses Debian's initramfs-tools, which %s conflicts with (both are a %s); leave it out", pkg, pkg, initramfsTool)
	}
	return fmt.Errorf("package %s: kpreload's images make their own initramfs (kpreload-initramfs-tool is the image's %s, and Debian allows one), so %s cannot be installed beside it; leave it out (the boot loader's fallback entry boots the full kpreload initramfs), or build a Debian-style image without kpreload with --plain --bootloader grub", pkg, initramfsTool, pkg)
}

// packageProblems refuses, offline, extra packages that cannot go into the
// image: Debian's initramfs generators in a kpreload image (others besides
// initramfs-tools in a plain one).
func packageProblems(o Options) []error {
	var errs []error
	for _, p := range o.Rootfs.Packages {
		name, _, _ := strings.Cut(p, "=")
		if !slices.Contains(initramfsTools, name) || (o.Plain && name == "initramfs-tools") {
			continue
		}
		errs = append(errs, initramfsRefusal(name, o.Plain))
	}
	return errs
}

// checkPackages refuses, before mmdebstrap runs, extra packages the suite
// does not carry and those whose control record (read from the archive's
// apt lists by controls) provides or conflicts with the image's initramfs
// tool.
func checkPackages(o Options, controls func(names ...string) (map[string]archive.Control, error)) error {
	if len(o.Rootfs.Packages) == 0 {
		return nil
	}
	names := make([]string, 0, len(o.Rootfs.Packages))
	for _, p := range o.Rootfs.Packages {
		name, _, _ := strings.Cut(p, "=")
		names = append(names, name)
	}
	got, err := controls(names...)
	if err != nil {
		return fmt.Errorf("extra packages: %w", err)
	}
	var errs []error
	for _, name := range names {
		c, ok := got[name]
		if !ok {
			errs = append(errs, fmt.Errorf("package %s: Debian %s does not carry it (main contrib non-free non-free-firmware, with -updates, -security and -backports): check the name with apt-cache search, or name the real package a virtual one stands for", name, o.Rootfs.Suite))
			continue
		}
		bringsTool := slices.Contains(c.Provides, initramfsTool) || slices.Contains(c.Conflicts, initramfsTool) || slices.Contains(c.Conflicts, "kpreload-initramfs-tool")
		if o.Plain {
			bringsTool = name != "initramfs-tools" && name != "initramfs-tools-core" && (slices.Contains(c.Provides, initramfsTool) || slices.Contains(c.Conflicts, "initramfs-tools"))
		}
		if bringsTool {
			errs = append(errs, initramfsRefusal(name, o.Plain))
		}
	}
	return errors.Join(errs...)
}

// archiveControls reads control records from the suite's archive.
func archiveControls(ctx context.Context, o Options) func(names ...string) (map[string]archive.Control, error) {
	return func(names ...string) (map[string]archive.Control, error) {
		a, err := archive.New(o.Rootfs.Suite, o.Stage.DownloadDir)
		if err != nil {
			return nil, err
		}
		return a.Controls(ctx, names...)
	}
}
