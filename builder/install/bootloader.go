package install

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
)

// Bootloader names the boot loader a root boots with.
type Bootloader string

// The boot loaders kpreload knows how to point at its initramfs.
const (
	// GRUB: /boot/grub/grub.cfg made by grub-mkconfig (update-grub), BIOS or UEFI.
	GRUB Bootloader = "grub"
	// SystemdBoot: systemd-boot with Boot Loader Specification entries on the ESP.
	SystemdBoot Bootloader = "systemd-boot"
)

// ParseBootloader reads a --bootloader value ("" or "auto" means detect).
func ParseBootloader(s string) (Bootloader, error) {
	switch s {
	case "", "auto":
		return "", nil
	case string(GRUB), "grub2":
		return GRUB, nil
	case string(SystemdBoot), "sd-boot":
		return SystemdBoot, nil
	}
	return "", fmt.Errorf("unknown bootloader %q (grub, systemd-boot or auto)", s)
}

// NoBootloaderError says that a root has no boot loader kpreload can use,
// and what was looked for.
type NoBootloaderError struct {
	Root   string
	Looked []string
}

func (e *NoBootloaderError) Error() string {
	return fmt.Sprintf("no boot loader found in %s: looked for %s. kpreload needs GRUB (grub-mkconfig or update-grub in the root) "+
		"or systemd-boot (its loader/ directory on the EFI system partition; mount the ESP first, or pass --esp)",
		e.Root, strings.Join(e.Looked, ", "))
}

// Detect finds the boot loader of root whose ESP is at esp (a host path).
// GRUB is a root with grub-mkconfig (and so update-grub); systemd-boot is an
// ESP with a loader/ directory. A root with both is GRUB unless its ESP holds
// systemd-boot's loader.conf and the root has no grub.cfg yet.
func Detect(root, esp string) (Bootloader, error) {
	e := espOf(root, esp)
	grubTools := []string{"usr/sbin/grub-mkconfig", "usr/sbin/update-grub"}
	grub := false
	for _, t := range grubTools {
		if exists(root, t) {
			grub = true
		}
	}
	grubCfg := exists(root, GrubConfig)
	sdboot := exists(e.root, e.name("loader"))
	switch {
	case grub && (grubCfg || !sdboot):
		return GRUB, nil
	case sdboot:
		return SystemdBoot, nil
	}
	looked := []string{}
	for _, t := range grubTools {
		looked = append(looked, filepath.Join(root, t))
	}
	looked = append(looked, e.host("loader")+"/")
	return "", &NoBootloaderError{Root: root, Looked: looked}
}

// espTree is where a root's EFI system partition is: the tree its paths are
// resolved in (links inside it followed as in a chroot of that tree) and its
// directory there. An ESP inside the root (the default, root/boot/efi) is
// resolved inside the root; one given elsewhere is a tree of its own.
type espTree struct{ root, dir string }

// espOf locates the ESP at esp (a path on this machine; "" is root/boot/efi).
func espOf(root, esp string) espTree {
	if esp == "" {
		return espTree{root, ESPMount}
	}
	ar, err1 := filepath.Abs(root)
	ae, err2 := filepath.Abs(esp)
	if err1 == nil && err2 == nil {
		if rel, err := filepath.Rel(ar, ae); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return espTree{root, filepath.ToSlash(rel)}
		}
	}
	return espTree{esp, ""}
}

// name is p, a path relative to the ESP, in the ESP's tree.
func (e espTree) name(p string) string { return path.Join(e.dir, p) }

// host names p on the ESP for messages.
func (e espTree) host(p string) string { return inroot.Host(e.root, e.name(p)) }
