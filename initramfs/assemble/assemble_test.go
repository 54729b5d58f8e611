package assemble

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/initramfs/archive"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

func kernelRoot(t *testing.T, kver string) string {
	t.Helper()
	return testenv.KernelTree(t, kver)
}

// fakeInit stands in for the /init binary: the archive only copies it.
func fakeInit(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "init")
	if err := os.WriteFile(p, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBuildIsDeterministicAndComplete(t *testing.T) {
	for _, c := range []struct {
		kver string
		want []string // modules there (not built in) that a QEMU or cloud root disk needs
	}{
		{"6.1.0-56-cloud-amd64", []string{"virtio_blk", "virtio_pci", "virtio_scsi", "qemu_fw_cfg"}},
		{"6.12.117+deb12-cloud-amd64", []string{"virtio_blk", "virtio_scsi", "qemu_fw_cfg", "xfs", "hv_storvsc"}},
	} {
		kver := c.kver
		t.Run(kver, func(t *testing.T) {
			o := Options{Kernel: kver, ModulesDir: filepath.Join(kernelRoot(t, kver), "lib/modules", kver), Init: fakeInit(t)}
			var a, b bytes.Buffer
			ra, err := Build(o, &a)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := Build(o, &b)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a.Bytes(), b.Bytes()) || ra.SHA256 != rb.SHA256 {
				t.Fatalf("two builds differ: sha256 %s vs %s", ra.SHA256, rb.SHA256)
			}
			for _, want := range c.want {
				if !slices.Contains(ra.Modules, want) {
					t.Errorf("modules %v lack %s", ra.Modules, want)
				}
			}
			// Unpack with the real tools and read the boot index back.
			dir := t.TempDir()
			cmd := exec.Command("sh", "-c", "zstd -dc | cpio -idm --quiet --no-absolute-filenames")
			cmd.Dir = dir
			cmd.Stdin = &a
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("zstd | cpio: %v\n%s", err, out)
			}
			ix, err := bootindex.Read(filepath.Join(dir, "lib/modules", kver, "kpreload.index.json"))
			if err != nil {
				t.Fatal(err)
			}
			if ix.Kernel != kver || len(ix.Sets) != 1 || ix.Sets[0].ID != "kernel" {
				t.Fatalf("index kernel %q sets %d, want %s and one kernel set", ix.Kernel, len(ix.Sets), kver)
			}
			for _, m := range ix.Sets[0].Modules {
				p := filepath.Join(dir, "lib/modules", kver, ix.Sets[0].Dir, m.Path)
				if _, err := os.Stat(p); err != nil {
					t.Errorf("index names %s at %s, not in the archive", m.Name, p)
				}
				if !strings.HasPrefix(m.Vermagic, kver+" ") || m.SHA256 == "" {
					t.Errorf("%s: vermagic %q sha256 %q", m.Name, m.Vermagic, m.SHA256)
				}
			}
			// Dependencies come before the modules that need them.
			pos := map[string]int{}
			for i, m := range ix.Sets[0].Modules {
				pos[m.Name] = i
			}
			for _, m := range ix.Sets[0].Modules {
				for _, d := range m.Depends {
					if p, ok := pos[d]; ok && p > pos[m.Name] {
						t.Errorf("%s depends on %s, which comes later", m.Name, d)
					}
				}
			}
			if fi, err := os.Stat(filepath.Join(dir, "init")); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("init: %v %v", fi, err)
			}
		})
	}
}

func TestBuildGzipAndErrors(t *testing.T) {
	kver := "6.1.0-56-cloud-amd64"
	root := kernelRoot(t, kver)
	var buf bytes.Buffer
	res, err := Build(Options{Kernel: kver, ModulesDir: filepath.Join(root, "lib/modules", kver), Init: fakeInit(t), Compression: archive.Gzip}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := buf.Bytes(); len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b || res.Compression != "gzip" {
		t.Errorf("gzip requested: got compression %q and magic % x", res.Compression, buf.Bytes()[:2])
	}
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"missing kernel", Options{Kernel: "6.1.0-99-cloud-amd64", ModulesDir: filepath.Join(root, "lib/modules/6.1.0-99-cloud-amd64"), Init: fakeInit(t)}, "kernels there: " + kver},
		{"no init", Options{Kernel: kver, ModulesDir: filepath.Join(root, "lib/modules", kver)}, "no /init binary"},
		{"no kernel", Options{}, "no kernel release"},
		{"unknown module", Options{Kernel: kver, ModulesDir: filepath.Join(root, "lib/modules", kver), Init: fakeInit(t), Modules: []string{"no_such_mod"}}, "no_such_mod"},
		{"unknown filesystem", Options{Kernel: kver, ModulesDir: filepath.Join(root, "lib/modules", kver), Init: fakeInit(t), Filesystems: []string{"zfs"}}, `filesystem "zfs": kpreload knows btrfs, ext4, iso9660, vfat, xfs`},
	}
	for _, tt := range tests {
		_, err := Build(tt.o, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Build error = %v, want it to mention %q", tt.name, err, tt.want)
		}
	}
}

func TestWriteFileLeavesNothingOnFailure(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "initrd.img")
	if _, err := WriteFile(Options{Kernel: "x"}, out); err == nil {
		t.Fatal("WriteFile with a bad kernel succeeded")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Errorf("failed WriteFile left %d files behind", len(ents))
	}
}

// TestBuildFilesystems checks that Filesystems limits the root filesystem
// modules to those named, and that the default carries them all.
func TestBuildFilesystems(t *testing.T) {
	kver := "6.12.117+deb12-cloud-amd64"
	mods := filepath.Join(kernelRoot(t, kver), "lib/modules", kver)
	for _, c := range []struct {
		fs        []string
		have, not []string
	}{
		{nil, []string{"xfs", "btrfs", "virtio_blk"}, nil},
		{[]string{"ext4"}, []string{"virtio_blk", "ahci", "qemu_fw_cfg"}, []string{"xfs", "btrfs", "vfat", "isofs"}},
		{[]string{"xfs"}, []string{"xfs", "virtio_blk"}, []string{"btrfs", "vfat"}},
	} {
		res, err := Build(Options{Kernel: kver, ModulesDir: mods, Init: fakeInit(t), Filesystems: c.fs}, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("filesystems %v: %v", c.fs, err)
		}
		for _, m := range c.have {
			if got := slices.Contains(res.Modules, m); !got {
				t.Errorf("filesystems %v: modules %v lack %s", c.fs, res.Modules, m)
			}
		}
		for _, m := range c.not {
			if got := slices.Contains(res.Modules, m); got {
				t.Errorf("filesystems %v: modules include %s", c.fs, m)
			}
		}
	}
}
