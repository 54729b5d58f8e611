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
