package pid1

import (
	"os"
	"path/filepath"
	"strings"
)

// firmwareFromRoot lets drivers loaded before switch_root find firmware on
// the root: until then the kernel reads firmware from the initramfs (its
// loader resolves paths against pid 1's root), so while /init loads the
// driver sets it points the kernel's custom search path at the root's
// /lib/firmware (unless the command line set one), and handOver puts it back
// before switch_root. It returns the directories the kernel now searches,
// for the loader's declared-firmware check.
func (b *Boot) firmwareFromRoot() []string {
	dirs := b.firmwareDirs
	param := b.o.FirmwareParam
	old, err := os.ReadFile(param)
	if err != nil {
		return dirs("")
	}
	if cur := strings.TrimSpace(string(old)); cur != "" {
		return dirs(cur) // the command line chose one: leave it
	}
	rootFW := filepath.Join(b.o.NewRoot, "lib/firmware")
	if fi, err := os.Stat(rootFW); err != nil || !fi.IsDir() {
		return dirs("")
	}
	if err := os.WriteFile(param, []byte(rootFW), 0o644); err != nil {
		b.warnf("cannot point the kernel's firmware search at %s: %v", rootFW, err)
		return dirs("")
	}
	b.fwRestore = func() {
		// The kernel takes "\n" as an empty path.
		if err := os.WriteFile(param, []byte("\n"), 0o644); err != nil {
			b.warnf("cannot reset the kernel's firmware search path: %v", err)
		}
		b.fwRestore = nil
	}
	b.event("firmware searched in %s while the driver sets load", rootFW)
	return dirs(rootFW)
}

// firmwareDirs lists where the kernel's firmware loader looks, custom path
// first, then the initramfs's (the kernel's view before switch_root).
func (b *Boot) firmwareDirs(custom string) []string {
	var out []string
	if custom != "" {
		out = append(out, custom)
	}
	for _, d := range []string{"/lib/firmware/updates/" + b.release, "/lib/firmware/updates", "/lib/firmware/" + b.release, "/lib/firmware"} {
		out = append(out, b.initramfsPath(d))
	}
	return out
}
