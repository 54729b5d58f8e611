package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRootDevices: a root that is the mount point of a whole filesystem on a
// block device gets that device, and the disk of a partition unless another
// mounted filesystem lies on it; a bind of a directory, a plain directory or
// a device /dev lacks get none.
func TestRootDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes device nodes: it needs root")
	}
	base := t.TempDir()
	sys, dev := filepath.Join(base, "sys"), filepath.Join(base, "dev")
	// name, its sysfs directory, major:minor, whether it is a partition.
	for _, d := range []struct{ name, dir, mm string }{
		{"loop0", "devices/virtual/block/loop0", "7:0"},
		{"sda", "devices/pci/block/sda", "8:0"},
		{"sda1", "devices/pci/block/sda/sda1", "8:1"},
		{"sda2", "devices/pci/block/sda/sda2", "8:2"},
		{"sdb", "devices/pci/block/sdb", "8:16"},
		{"sdb1", "devices/pci/block/sdb/sdb1", "8:17"},
		{"gone", "devices/virtual/block/gone", "9:9"},
	} {
		dir := filepath.Join(sys, d.dir)
		files := map[string]string{"uevent": "MAJOR=x\nDEVNAME=" + d.name + "\n", "dev": d.mm + "\n"}
		if strings.Count(d.dir, "/") == 4 {
			files["partition"] = "1\n"
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, s := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		link := filepath.Join(sys, "dev/block", d.mm)
		os.MkdirAll(filepath.Dir(link), 0o755)
		if err := os.Symlink(filepath.Join("../..", d.dir), link); err != nil {
			t.Fatal(err)
		}
		if d.name == "gone" {
			continue
		}
		var maj, min uint32
		fmt.Sscanf(d.mm, "%d:%d", &maj, &min)
		os.MkdirAll(dev, 0o755)
		if err := unix.Mknod(filepath.Join(dev, d.name), unix.S_IFBLK|0o600, int(unix.Mkdev(maj, min))); err != nil {
			t.Fatal(err)
		}
	}
	dirs := map[string]string{}
	for _, n := range []string{"img", "bind", "plain", "vol", "hostpart", "gone"} {
		dirs[n] = filepath.Join(base, n)
		os.MkdirAll(dirs[n], 0o755)
	}
	dirs["plain"] = filepath.Join(dirs["img"], "sub")
	os.MkdirAll(dirs["plain"], 0o755)
	mountinfo := strings.Join([]string{
		"1 0 8:2 / / rw - ext4 /dev/sda2 rw",
		"2 1 7:0 / " + dirs["img"] + " rw - ext4 /dev/loop0 rw",
		"3 1 8:2 /srv/x " + dirs["bind"] + " rw - ext4 /dev/sda2 rw",
		"4 1 8:17 / " + dirs["vol"] + " rw - ext4 /dev/sdb1 rw",
		"5 1 8:1 / " + dirs["hostpart"] + " rw - ext4 /dev/sda1 rw",
		"6 1 9:9 / " + dirs["gone"] + " rw - ext4 /dev/gone rw",
	}, "\n") + "\n"
	mi := filepath.Join(base, "mountinfo")
	if err := os.WriteFile(mi, []byte(mountinfo), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, root string
		want       []string
	}{
		{"loop-mounted image", dirs["img"], []string{"loop0"}},
		{"a volume's partition, its disk free", dirs["vol"], []string{"sdb1", "sdb"}},
		{"a partition of the host's disk", dirs["hostpart"], []string{"sda1"}},
		{"a bind of a directory", dirs["bind"], nil},
		{"a directory of a filesystem", dirs["plain"], nil},
		{"a device /dev lacks", dirs["gone"], nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var want []string
			for _, w := range c.want {
				want = append(want, filepath.Join(dev, w))
			}
			if got := rootDevices(c.root, mi, sys, dev); !slices.Equal(got, want) {
				t.Errorf("rootDevices = %q, want %q", got, want)
			}
		})
	}
}
