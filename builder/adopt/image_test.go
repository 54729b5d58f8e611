package adopt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/internal/runner/runnertest"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

// TestImage puts kpreload into a raw MBR disk image (sfdisk, mkfs.ext4 at
// the partition's offset, as another builder leaves one) through the real
// sfdisk and a loop mount at the offset: kpreload's files are in the
// image's filesystem afterwards (debugfs), update-grub's stand-in ran with
// /dev, /proc and /sys bound into the root, and nothing stays mounted.
// Needs root and loop devices.
func TestImage(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test needs root (loop mounts)")
	}
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.raw")
	root := distroRoot(t)
	treetest.Write(t, root, map[string]string{install.InitramfsPath(testKernel): "kpreload initramfs", "dev/": "", "proc/": "", "sys/": ""})
	const offset = 1 << 20
	for _, c := range [][]string{
		{"truncate", "-s", "48M", disk},
		{"sh", "-c", "printf 'label: dos\\nstart=2048, type=83\\n' | sfdisk -q " + disk},
		{"mkfs.ext4", "-q", "-E", fmt.Sprintf("offset=%d", offset), "-d", root, disk, "46M"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	var sawMounts bool
	var log bytes.Buffer
	o := Options{Stage: stageOptions(t), Runner: &runnertest.Recorder{}, Log: &log}
	o.Install = install.Options{SkipInitramfs: true, UpdateGrub: func(_ context.Context, root string, _ io.Writer) error {
		_, err := os.Stat(filepath.Join(root, "proc/self/mountinfo"))
		sawMounts = err == nil
		b := bytes.NewBufferString("set default=\"0\"\n")
		if err := install.GrubEntries(b, root, install.GrubEnv{DeviceUUID: "u"}); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(root, install.GrubConfig), b.Bytes(), 0o644)
	}}
	res, err := Image(context.Background(), disk, ImageOptions{}, o)
	if err != nil {
		t.Fatalf("Image: %v\n%s", err, log.String())
	}
	if !sawMounts {
		t.Error("update-grub ran without /proc in the root")
	}
	if res.Install.Default != testKernel {
		t.Errorf("default kernel %q, want %s", res.Install.Default, testKernel)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), "kpreload-adopt-root-") {
		t.Errorf("still mounted:\n%s", mi)
	}
	for _, p := range []string{install.Kpreload, install.BootOKUnit, install.GrubConfig} {
		out, err := exec.Command("debugfs", "-R", "stat /"+p, fmt.Sprintf("%s?offset=%d", disk, offset)).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Type: regular") {
			t.Errorf("/%s in the image: %v\n%s", p, err, out)
		}
	}
}

// TestFindRoot reads real partition tables with sfdisk: an MBR disk as
// vmdb2 leaves one (its Linux partition, or the one --partition names), a
// filesystem image without a table (the whole file), and a partition
// number the disk lacks (an error naming what it has).
func TestFindRoot(t *testing.T) {
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.raw")
	fs := filepath.Join(dir, "fs.raw")
	for _, c := range [][]string{
		{"truncate", "-s", "16M", disk, fs},
		{"sh", "-c", "printf 'label: dos\\nstart=2048, size=4096, type=c\\nstart=6144, type=83\\n' | sfdisk -q " + disk},
		{"mkfs.ext4", "-q", "-F", fs},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	ctx := context.Background()
	r := runner.Default
	const size = 16 << 20
	p, err := findRoot(ctx, disk, size, 0, r)
	if err != nil || p != (Partition{Number: 2, Offset: 6144 * 512, Size: size - 6144*512, Type: "83"}) {
		t.Errorf("the Linux partition: %+v, %v", p, err)
	}
	if p, err := findRoot(ctx, disk, size, 1, r); err != nil || p.Number != 1 || p.Offset != 1<<20 || p.Type != "C" {
		t.Errorf("partition 1: %+v, %v", p, err)
	}
	if p, err := findRoot(ctx, fs, size, 0, r); err != nil || p != (Partition{Size: size}) {
		t.Errorf("a filesystem image: %+v, %v, want the whole file", p, err)
	}
	if _, err := findRoot(ctx, disk, size, 3, r); err == nil || !strings.Contains(err.Error(), "no partition 3: it has 1 (type C, 2 MiB), 2 (type 83, 13 MiB)") {
		t.Errorf("partition 3: %v", err)
	}
}
