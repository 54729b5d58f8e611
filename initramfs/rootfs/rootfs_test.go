package rootfs

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		in      string
		want    Spec
		wantErr string // substring of the error; "" means no error
		str     string // String() of the result
	}{
		{"UUID=3f1c9a2e-7b1d-4c55-9e0e-0a1b2c3d4e5f", Spec{"uuid", "3f1c9a2e-7b1d-4c55-9e0e-0a1b2c3d4e5f"}, "", "UUID=3f1c9a2e-7b1d-4c55-9e0e-0a1b2c3d4e5f"},
		{"LABEL=rootfs", Spec{"label", "rootfs"}, "", "LABEL=rootfs"},
		{"  LABEL=root fs  ", Spec{"label", "root fs"}, "", "LABEL=root fs"},
		{"LABEL=a=b", Spec{"label", "a=b"}, "", "LABEL=a=b"},
		{"PARTUUID=8b1f5c4e-01", Spec{"partuuid", "8b1f5c4e-01"}, "", "PARTUUID=8b1f5c4e-01"},
		{"PARTUUID=6A5B4C3D-2E1F-4A0B-9C8D-7E6F5A4B3C2D", Spec{"partuuid", "6A5B4C3D-2E1F-4A0B-9C8D-7E6F5A4B3C2D"}, "", "PARTUUID=6A5B4C3D-2E1F-4A0B-9C8D-7E6F5A4B3C2D"},
		{"/dev/vda", Spec{"path", "/dev/vda"}, "", "/dev/vda"},
		{"/dev/nvme0n1p1", Spec{"path", "/dev/nvme0n1p1"}, "", "/dev/nvme0n1p1"},
		{"", Spec{}, "no root= on the kernel command line", ""},
		{"   ", Spec{}, "no root= on the kernel command line", ""},
		{"UUID=", Spec{}, "empty UUID", ""},
		{"LABEL=", Spec{}, "empty LABEL", ""},
		{"PARTUUID=", Spec{}, "empty PARTUUID", ""},
		{"garbage", Spec{}, "want UUID=, LABEL=, PARTUUID= or a /dev/ path", ""},
		{"vda", Spec{}, "want UUID=", ""},
		{"uuid=3f1c9a2e", Spec{}, "want UUID=", ""},
		{"PARTLABEL=root", Spec{}, "want UUID=", ""},
		{"dev/vda", Spec{}, "want UUID=", ""},
	}
	for _, tt := range tests {
		got, err := ParseSpec(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseSpec(%q) = %+v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		if s := got.String(); s != tt.str {
			t.Errorf("ParseSpec(%q).String() = %q, want %q", tt.in, s, tt.str)
		}
		if again, err := ParseSpec(got.String()); err != nil || again != got {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v (round trip)", got.String(), again, err, got)
		}
	}
}

// requireTool returns the path of a real program, failing loudly when it is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	t.Fatalf("%s is required by this test but not installed: run scripts/deps.sh", name)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// run runs a real program, failing the test with its output on error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(requireTool(t, name), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// blkid returns what the real blkid finds on an image: TYPE and LABEL.
func blkid(t *testing.T, img string) (fstype, label string) {
	t.Helper()
	cmd := exec.Command(requireTool(t, "blkid"), "-p", "-o", "export", img)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return "", "" // nothing recognised
	}
	if err != nil {
		t.Fatalf("blkid -p %s: %v", img, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "TYPE="); ok {
			fstype = v
		}
		if v, ok := strings.CutPrefix(line, "LABEL="); ok {
			label = v
		}
	}
	return fstype, label
}

// randomUUID returns a random version 4 UUID in lower case.
func randomUUID(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// image is a filesystem image made by a real mkfs.
type image struct {
	name   string
	path   string
	fstype string // what FSType must say
	label  string // what Label must say
	err    string // substring of Label's error when it has no label to read
}

func TestFSTypeAndLabel(t *testing.T) {
	dir := t.TempDir()
	var imgs []image
	sparse := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		return p
	}

	p := sparse("ext4-lbl", 8<<20)
	run(t, "mkfs.ext4", "-q", "-F", "-L", "lbl", p)
	imgs = append(imgs, image{"ext4 labelled lbl", p, "ext4", "lbl", ""})

	p = sparse("ext4-long", 8<<20)
	run(t, "mkfs.ext4", "-q", "-F", "-L", "sixteen-chars-ok", p)
	imgs = append(imgs, image{"ext4 with a 16-byte label", p, "ext4", "sixteen-chars-ok", ""})

	p = sparse("ext4-nolabel", 8<<20)
	run(t, "mkfs.ext4", "-q", "-F", p)
	imgs = append(imgs, image{"ext4 without label", p, "ext4", "", ""})

	// ext2 shares ext4's superblock magic; the ext4 driver mounts it.
	p = sparse("ext2", 8<<20)
	run(t, "mkfs.ext2", "-q", "-F", "-L", "old", p)
	imgs = append(imgs, image{"ext2 (mounted by ext4)", p, "ext4", "old", ""})

	p = sparse("xfs", 300<<20)
	run(t, "mkfs.xfs", "-q", "-f", "-L", "xfslbl", p)
	imgs = append(imgs, image{"xfs", p, "xfs", "xfslbl", ""})

	p = sparse("btrfs", 128<<20)
	run(t, "mkfs.btrfs", "-q", "-f", "-L", "a-btrfs-label-longer-than-sixteen", p)
	imgs = append(imgs, image{"btrfs", p, "btrfs", "a-btrfs-label-longer-than-sixteen", ""})
	p = sparse("btrfs-nolabel", 128<<20)
	run(t, "mkfs.btrfs", "-q", "-f", p)
	imgs = append(imgs, image{"btrfs without label", p, "btrfs", "", ""})
	if _, err := exec.LookPath("mkfs.vfat"); err == nil {
		p = sparse("vfat", 8<<20)
		run(t, "mkfs.vfat", "-n", "VFATLBL", p)
		imgs = append(imgs, image{"vfat (FAT16)", p, "vfat", "VFATLBL", ""})
		p = sparse("vfat-seed", 2<<20)
		run(t, "mkfs.vfat", "-n", "CIDATA", p)
		imgs = append(imgs, image{"a NoCloud seed (FAT12)", p, "vfat", "CIDATA", ""})
		p = sparse("vfat32", 64<<20)
		run(t, "mkfs.vfat", "-F", "32", "-n", "CONFIG-2", p)
		imgs = append(imgs, image{"vfat (FAT32)", p, "vfat", "CONFIG-2", ""})
	} else {
		t.Logf("mkfs.vfat not installed: vfat not covered (optional)")
	}
	for _, img := range imgs {
		got, err := FSType(img.path)
		if err != nil || got != img.fstype {
			t.Errorf("%s: FSType(%s) = %q, %v; want %q", img.name, img.path, got, err, img.fstype)
		}
		lbl, err := Label(img.path)
		switch {
		case img.err != "":
			if err == nil || !strings.Contains(err.Error(), img.err) {
				t.Errorf("%s: Label(%s) = %q, %v; want error containing %q", img.name, img.path, lbl, err, img.err)
			}
		case err != nil || lbl != img.label:
			t.Errorf("%s: Label(%s) = %q, %v; want %q", img.name, img.path, lbl, err, img.label)
		}
		// The real blkid agrees (ext2/ext3 report their own name, which FSType folds into ext4).
		bt, bl := blkid(t, img.path)
		if bt == "ext2" || bt == "ext3" {
			bt = "ext4"
		}
		if bt != img.fstype || (img.err == "" && bl != img.label) {
			t.Errorf("%s: blkid says TYPE=%q LABEL=%q, the test expects %q %q", img.name, bt, bl, img.fstype, img.label)
		}
		// UUID reads what blkid reads.
		want := run(t, "blkid", "-p", "-o", "value", "-s", "UUID", img.path)
		if got, err := UUID(img.path); err != nil || got != want || want == "" {
			t.Errorf("%s: UUID(%s) = %q, %v; blkid says %q", img.name, img.path, got, err, want)
		}
	}

	unknown := []struct{ name, path string }{
		{"zero-filled 8 MiB file", sparse("zero", 8<<20)},
		{"100-byte file", sparse("tiny", 100)},
		{"empty file", sparse("empty", 0)},
	}
	for _, u := range unknown {
		if got, err := FSType(u.path); err == nil || !strings.Contains(err.Error(), "unknown filesystem") {
			t.Errorf("%s: FSType = %q, %v; want an unknown filesystem error", u.name, got, err)
		}
		if got, err := Label(u.path); err == nil {
			t.Errorf("%s: Label = %q, nil; want an error", u.name, got)
		}
		if got, err := UUID(u.path); err == nil {
			t.Errorf("%s: UUID = %q, nil; want an error", u.name, got)
		}
		if bt, _ := blkid(t, u.path); bt != "" {
			t.Errorf("%s: blkid says TYPE=%q, the test expects nothing recognised", u.name, bt)
		}
	}
	missing := filepath.Join(dir, "no-such-image")
	if got, err := FSType(missing); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("FSType(missing) = %q, %v; want a not-exist error", got, err)
	}
	if got, err := Label(missing); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Label(missing) = %q, %v; want a not-exist error", got, err)
	}
}

// loopImage makes an ext4 image holding sbin/init with a fresh label and UUID and
// attaches it to a loop device, detached when the test ends.
func loopImage(t *testing.T) (dev, label, uuid string) {
	t.Helper()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "sbin", "init"), []byte("#!/bin/sh\necho real init\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatal(err)
	}
	label, uuid = "kpt-"+hex.EncodeToString(r[:]), randomUUID(t)
	img := filepath.Join(dir, "root.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	run(t, "mkfs.ext4", "-q", "-F", "-L", label, "-U", uuid, "-d", tree, img)
	cmd := exec.Command(requireTool(t, "losetup"), "-f", "--show", img)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -f --show %s: %v: %s\nthis test needs root and loop devices (modprobe loop)", img, err, out)
	}
	dev = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command(requireTool(t, "losetup"), "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev, label, uuid
}

// TestFindAndMount finds a real ext4 filesystem on a loop device by path, UUID
// and label, the way /init finds the root, and mounts it read-only and read-write.
func TestFindAndMount(t *testing.T) {
	dev, label, uuid := loopImage(t)
	tests := []struct {
		spec    Spec
		want    string
		wantErr string
	}{
		{Spec{"path", dev}, dev, ""},
		{Spec{"uuid", uuid}, dev, ""},
		{Spec{"uuid", strings.ToUpper(uuid)}, dev, ""},
		{Spec{"label", label}, dev, ""},
		{Spec{"path", "/dev/no-such-disk"}, "", "/dev/no-such-disk not present yet (have: "},
		{Spec{"uuid", randomUUID(t)}, "", "no block device with UUID="},
		{Spec{"label", label + "x"}, "", "no filesystem labelled"},
		{Spec{"partuuid", randomUUID(t)}, "", "no block device with PARTUUID="},
		{Spec{"nfs", "server:/root"}, "", `unknown root kind "nfs"`},
	}
	for _, tt := range tests {
		got, err := Find(tt.spec)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Find(%s) = %q, %v; want error containing %q", tt.spec, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Find(%s) = %q, %v; want %q", tt.spec, got, err, tt.want)
		}
	}
	if err, ok := findErr(Spec{"label", label + "x"}); ok && !strings.Contains(err, filepath.Base(dev)) {
		t.Errorf("Find error %q does not list the block devices present (%s)", err, filepath.Base(dev))
	}

	fstype, err := FSType(dev)
	if err != nil || fstype != "ext4" {
		t.Fatalf("FSType(%s) = %q, %v; want ext4", dev, fstype, err)
	}
	for _, o := range []Options{{}, {RW: true, Flags: "errors=remount-ro"}} {
		target := filepath.Join(t.TempDir(), "newroot")
		if err := Mount(dev, target, fstype, o); err != nil {
			t.Fatalf("Mount(%s, %+v): %v", dev, o, err)
		}
		b, rerr := os.ReadFile(filepath.Join(target, "sbin", "init"))
		werr := os.WriteFile(filepath.Join(target, "written"), []byte("x"), 0o644)
		if err := unix.Unmount(target, 0); err != nil {
			t.Fatalf("unmount %s: %v", target, err)
		}
		if rerr != nil || !strings.Contains(string(b), "real init") {
			t.Errorf("Mount(%+v): sbin/init = %q, %v; want the file put in the image", o, b, rerr)
		}
		if o.RW && werr != nil {
			t.Errorf("Mount(RW): write failed: %v", werr)
		}
		if !o.RW && !errors.Is(werr, unix.EROFS) {
			t.Errorf("Mount(read-only): write = %v, want EROFS", werr)
		}
	}
	if err := Mount(dev, filepath.Join(t.TempDir(), "x"), "xfs", Options{}); err == nil || !strings.Contains(err.Error(), dev) {
		t.Errorf("Mount(%s as xfs) = %v, want an error naming the device", dev, err)
	}
}

func findErr(s Spec) (string, bool) {
	_, err := Find(s)
	if err == nil {
		return "", false
	}
	return err.Error(), true
}

// TestISO9660Label reads the volume id of a primary volume descriptor (an
// OpenStack config drive is labelled config-2), built by hand: no ISO tool
// is a dependency.
func TestISO9660Label(t *testing.T) {
	img := make([]byte, 0x8800)
	pvd := img[0x8000:]
	pvd[0] = 1
	copy(pvd[1:], "CD001")
	pvd[6] = 1
	copy(pvd[40:72], fmt.Sprintf("%-32s", "config-2"))
	r := bytes.NewReader(img)
	if got, err := fsType(r); err != nil || got != "iso9660" {
		t.Fatalf("fsType = %q, %v; want iso9660", got, err)
	}
	if got, err := label(r); err != nil || got != "config-2" {
		t.Errorf("label = %q, %v; want config-2", got, err)
	}
}

// TestFindBtrfsByUUIDAndLabel finds a real btrfs filesystem on a loop device by
// root=UUID= and root=LABEL=, which u-root's block package could not.
func TestFindBtrfsByUUIDAndLabel(t *testing.T) {
	img := filepath.Join(t.TempDir(), "btrfs.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 128<<20); err != nil {
		t.Fatal(err)
	}
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatal(err)
	}
	label, uuid := "kpt-"+hex.EncodeToString(r[:]), randomUUID(t)
	run(t, "mkfs.btrfs", "-q", "-f", "-L", label, "-U", uuid, img)
	out, err := exec.Command(requireTool(t, "losetup"), "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -f --show %s: %v: %s\nthis test needs root and loop devices (modprobe loop)", img, err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command(requireTool(t, "losetup"), "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	for _, s := range []Spec{{"uuid", uuid}, {"uuid", strings.ToUpper(uuid)}, {"label", label}} {
		if got, err := Find(s); err != nil || got != dev {
			t.Errorf("Find(%s) = %q, %v; want %s", s, got, err, dev)
		}
	}
}
