package rootcheck

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// tool returns the path of a real program, failing loudly when it is missing.
func tool(t *testing.T, name string) string {
	t.Helper()
	for _, p := range []string{name, "/usr/sbin/" + name, "/sbin/" + name} {
		if q, err := exec.LookPath(p); err == nil {
			return q
		}
	}
	t.Fatalf("%s is required by this test but not installed: run scripts/deps.sh", name)
	return ""
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(tool(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// mounted makes a filesystem image with mkfs, attaches it to a loop device
// and mounts it on a new directory, undone when the test ends; it returns
// the directory and the device. It needs root and loop devices.
func mounted(t *testing.T, size int64, mkfs ...string) (dir, dev string) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	run(t, mkfs[0], append(mkfs[1:], img)...)
	dev = run(t, "losetup", "-f", "--show", img)
	t.Cleanup(func() { run(t, "losetup", "-d", dev) })
	dir = t.TempDir()
	if err := unix.Mount(dev, dir, strings.TrimPrefix(filepath.Base(mkfs[0]), "mkfs."), 0, ""); err != nil {
		t.Fatalf("mount %s on %s: %v (this test needs root and loop devices)", dev, dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, 0) })
	return dir, dev
}

// TestDetect reads real filesystems mounted from loop devices, the way
// kpreload install reads the root it installs into, and refuses a
// directory on a filesystem with no block device.
func TestDetect(t *testing.T) {
	for _, c := range []struct {
		name     string
		size     int64
		mkfs     []string
		fstype   string
		features []string
	}{
		{"ext4 as mkfs.ext4 makes it", 16 << 20, []string{"mkfs.ext4", "-q", "-F"}, "ext4", []string{"metadata_csum"}},
		{"ext4 without metadata_csum", 16 << 20, []string{"mkfs.ext4", "-q", "-F", "-O", "^metadata_csum"}, "ext4", nil},
		{"btrfs with xxhash checksums", 128 << 20, []string{"mkfs.btrfs", "-q", "-f", "--csum", "xxhash"}, "btrfs", []string{"csum=xxhash64"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, dev := mounted(t, c.size, c.mkfs...)
			sub := filepath.Join(dir, "a dir")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			got, err := Detect(sub)
			if err != nil || got.FSType != c.fstype || !slices.Equal(got.Features, c.features) || got.Device != dev || got.Stack != "" {
				t.Errorf("Detect(%s) = %+v, %v; want %s %q on %s", sub, got, err, c.fstype, c.features, dev)
			}
		})
	}

	dir := t.TempDir()
	if err := unix.Mount("kpreload-test", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v (this test needs root)", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, 0) })
	if got, err := Detect(dir); err == nil || !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "tmpfs") {
		t.Errorf("Detect(tmpfs) = %+v, %v; want an ErrUnknown naming tmpfs", got, err)
	}
	if _, err := Detect(filepath.Join(dir, "missing")); err == nil || errors.Is(err, ErrUnknown) {
		t.Errorf("Detect(missing dir) = %v, want the stat error", err)
	}
}

// TestMountOf picks the longest mount point holding a path (the last of
// those stacked on one point), and undoes mountinfo's escapes.
func TestMountOf(t *testing.T) {
	info := filepath.Join(t.TempDir(), "mountinfo")
	text := `26 1 254:1 / / rw,relatime - ext4 /dev/vda1 rw
27 26 254:1 /srv /mnt/my\040image rw shared:1 - ext4 /dev/vda1 rw
28 26 0:22 / /mnt/my\040image/run rw - tmpfs tmpfs rw
29 26 254:2 / /mnt/other rw - xfs /dev/vda2 rw
30 26 254:3 / /mnt/stacked rw - ext4 /dev/vdb rw
31 26 254:4 / /mnt/stacked rw - btrfs /dev/vdc rw
`
	if err := os.WriteFile(info, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	old := mountinfoPath
	mountinfoPath = info
	t.Cleanup(func() { mountinfoPath = old })
	for _, c := range []struct {
		path string
		want mount
		err  string
	}{
		{"/mnt/my image/etc", mount{"/mnt/my image", "ext4", "/dev/vda1"}, ""},
		{"/mnt/my image/run/x", mount{"/mnt/my image/run", "tmpfs", "tmpfs"}, ""},
		{"/usr", mount{"/", "ext4", "/dev/vda1"}, ""},
		{"/mnt/other/x", mount{"/mnt/other", "xfs", "/dev/vda2"}, ""},
		{"/mnt/otherx", mount{"/", "ext4", "/dev/vda1"}, ""},
		{"/mnt/stacked", mount{"/mnt/stacked", "btrfs", "/dev/vdc"}, ""},
	} {
		got, err := mountOf(c.path)
		if err != nil || got != c.want {
			t.Errorf("mountOf(%s) = %+v, %v; want %+v", c.path, got, err, c.want)
		}
	}
	if err := os.WriteFile(info, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := mountOf("/x"); err == nil || !errors.Is(err, ErrUnknown) {
		t.Errorf("mountOf with no mounts = %+v, %v; want an ErrUnknown", got, err)
	}
}

// TestStackOf tells device-mapper and md devices from plain disks by their
// sysfs directories.
func TestStackOf(t *testing.T) {
	sys := t.TempDir()
	for _, d := range []string{"254:0/dm", "9:0/md", "8:1"} {
		if err := os.MkdirAll(filepath.Join(sys, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := sysDevBlock
	sysDevBlock = sys
	t.Cleanup(func() { sysDevBlock = old })
	for _, c := range []struct {
		major, minor uint32
		want         string
	}{{254, 0, "device-mapper (LVM, LUKS)"}, {9, 0, "md RAID"}, {8, 1, ""}, {7, 0, ""}} {
		if got := stackOf(c.major, c.minor); got != c.want {
			t.Errorf("stackOf(%d:%d) = %q, want %q", c.major, c.minor, got, c.want)
		}
	}
}
