package image

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/image/rootfiles"
)

// configureRoot makes the root tree bootable as an image: fstab (root and ESP
// by UUID), the ESP mount point, hostname, networking by DHCP through
// systemd-networkd, kpreload's units as their presets say (when the image
// carries kpreload), and optionally an empty root password.
func configureRoot(ctx context.Context, sc Systemctl, root, rootUUID, espUUID string, emptyRootPassword, kpreload bool) error {
	fstab := fmt.Sprintf("# kpreload image: root and EFI system partition by filesystem UUID\nUUID=%s / ext4 errors=remount-ro 0 1\nUUID=%s /%s vfat umask=0077 0 1\n", rootUUID, espUUID, ImageESPMount)
	files := map[string]string{
		"etc/fstab":    fstab,
		"etc/hostname": "kpreload\n",
		"etc/hosts":    "127.0.0.1\tlocalhost\n127.0.1.1\tkpreload\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/systemd/network/80-kpreload-dhcp.network": "[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n",
	}
	for name, content := range files {
		if err := writeFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(root, ImageESPMount), 0o755); err != nil {
		return err
	}
	if err := sc.Enable(ctx, root, "systemd-networkd.service"); err != nil {
		return fmt.Errorf("enable systemd-networkd: %w", err)
	}
	if !kpreload {
		return setRootPassword(root, emptyRootPassword)
	}
	// kpreload's own units (rootfiles) are enabled as their preset file says.
	units, err := fs.Glob(rootfiles.FS, "files/usr/lib/systemd/system/kpreload-*")
	if err != nil {
		return err
	}
	for i, u := range units {
		units[i] = path.Base(u)
	}
	if err := sc.Preset(ctx, root, units...); err != nil {
		return fmt.Errorf("preset kpreload units: %w", err)
	}
	return setRootPassword(root, emptyRootPassword)
}

// setRootPassword clears root's password when empty is set.
func setRootPassword(root string, empty bool) error {
	if !empty {
		return nil
	}
	return setEmptyRootPassword(filepath.Join(root, "etc", "shadow"))
}

// setEmptyRootPassword clears root's password in a shadow file, so root logs
// in on the console without one.
func setEmptyRootPassword(shadow string) error {
	b, err := os.ReadFile(shadow)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	found := false
	for i, l := range lines {
		fields := strings.Split(l, ":")
		if len(fields) > 2 && fields[0] == "root" {
			fields[1] = ""
			lines[i] = strings.Join(fields, ":")
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%s has no root entry", shadow)
	}
	return writeFile(shadow, []byte(strings.Join(lines, "\n")), 0o640)
}
