package rootcheck

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/initramfs/rootfs"
	"github.com/kpreload/kpreload/internal/mountinfo"
)

// Where Detect reads the mounts and the block devices' sysfs entries.
var (
	mountinfoPath = "/proc/self/mountinfo"
	sysDevBlock   = "/sys/dev/block"
)

// Detect returns the filesystem holding dir, as /init will find it when
// that filesystem is the root: the mount holding dir (/proc/self/mountinfo),
// its source device's superblock (type and features, read by
// initramfs/rootfs) and any device-mapper or md layer under it (sysfs).
// A device this process may not read is taken as the mount's filesystem
// type with its mkfs's default features (Default). An error wrapping
// ErrUnknown says why it cannot be told: dir is on a filesystem with no
// block device (tmpfs, overlay, NFS) or one /init does not identify.
func Detect(dir string) (Root, error) {
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs) // fails for a missing dir
	}
	if err != nil {
		return Root{}, fmt.Errorf("root %s: %w", dir, err)
	}
	m, err := mountOf(abs)
	if err != nil {
		return Root{}, fmt.Errorf("root %s: %w", dir, err)
	}
	var dev unix.Stat_t
	if err := unix.Stat(m.source, &dev); err != nil || dev.Mode&unix.S_IFMT != unix.S_IFBLK {
		return Root{}, fmt.Errorf("root %s is on %s (%s, mounted on %s), not on a block device /init could mount: %w", dir, m.source, m.fstype, m.point, ErrUnknown)
	}
	stack := stackOf(unix.Major(dev.Rdev), unix.Minor(dev.Rdev))
	fstype, features, err := rootfs.ReadFeatures(m.source)
	if errors.Is(err, fs.ErrPermission) {
		// A device this process may not open (a container's cgroup): the
		// mount's type, with the features its mkfs gives by default.
		r, derr := Default(m.fstype)
		if derr != nil {
			return Root{}, fmt.Errorf("root %s is on %s (%s, mounted on %s): %w: %w", dir, m.source, m.fstype, m.point, derr, ErrUnknown)
		}
		r.Device, r.Stack = fmt.Sprintf("%s (superblock not readable: %v; taken as mkfs's defaults)", m.source, err), stack
		return r, nil
	}
	if err != nil {
		return Root{}, fmt.Errorf("root %s is on %s (%s, mounted on %s): %w: %w", dir, m.source, m.fstype, m.point, err, ErrUnknown)
	}
	return Root{FSType: fstype, Features: features, Device: m.source, Stack: stack}, nil
}

// stackOf names the block layer /init does not assemble that device
// major:minor belongs to, or "".
func stackOf(major, minor uint32) string {
	dir := filepath.Join(sysDevBlock, fmt.Sprintf("%d:%d", major, minor))
	if _, err := os.Stat(filepath.Join(dir, "dm")); err == nil {
		return "device-mapper (LVM, LUKS)"
	}
	if _, err := os.Stat(filepath.Join(dir, "md")); err == nil {
		return "md RAID"
	}
	return ""
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	point, fstype, source string
}

// mountOf returns the mount whose mount point is the longest prefix of path
// (of mounts on the same point, the last one, which hides the others), as
// findmnt --target finds it: a btrfs subvolume's files have a device number
// of their own, not the mount's.
func mountOf(path string) (mount, error) {
	f, err := os.Open(mountinfoPath)
	if err != nil {
		return mount{}, err
	}
	defer f.Close()
	var best mount
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 {
			continue
		}
		point := mountinfo.Unescape(f[4])
		if !within(path, point) || (found && len(point) < len(best.point)) {
			continue
		}
		best, found = mount{point: point, fstype: g[0], source: mountinfo.Unescape(g[1])}, true
	}
	if err := sc.Err(); err != nil {
		return mount{}, fmt.Errorf("%s: %w", mountinfoPath, err)
	}
	if !found {
		return mount{}, fmt.Errorf("no mount in %s holds it: %w", mountinfoPath, ErrUnknown)
	}
	return best, nil
}

// within reports whether path is point or under it.
func within(path, point string) bool {
	return point == "/" || path == point || strings.HasPrefix(path, point+"/")
}
