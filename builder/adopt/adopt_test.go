package adopt

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/builder/internal/runner/runnertest"
	"github.com/kpreload/kpreload/builder/internal/sandbox"
	"github.com/kpreload/kpreload/initramfs/rootcheck"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
	"github.com/kpreload/kpreload/testsupport/treetest"
)

const testKernel = "6.1.0-56-amd64"

// distroRoot is a root as another image builder leaves it: a kernel with its
// modules and the distribution's initramfs, GRUB's tools, ldconfig, no kpreload.
func distroRoot(t *testing.T) string {
	root := filepath.Join(t.TempDir(), "root")
	treetest.Write(t, root, map[string]string{
		"boot/vmlinuz-" + testKernel: "kernel", "boot/initrd.img-" + testKernel: "distribution initramfs",
		"lib/modules/" + testKernel + "/modules.dep": "", "usr/sbin/update-grub": "#!/bin/sh\n",
		"usr/sbin/ldconfig": "#!/bin/sh\n", "etc/default/grub": "GRUB_DEFAULT=0\n", "boot/grub/": "",
	})
	return root
}

// stageOptions stages no driver (no recipes) from an empty cache: kpreload's
// own files only, and a command line (/etc/kpreload/cmdline).
func stageOptions(t *testing.T) stage.Options {
	bins := t.TempDir()
	treetest.Write(t, bins, map[string]string{"kpreload": "kpreload binary", "kpreload-init": "init binary"})
	return stage.Options{CacheDir: t.TempDir(), DownloadDir: t.TempDir(), Cmdline: "console=ttyS0",
		KpreloadBinary: filepath.Join(bins, "kpreload"), InitBinary: filepath.Join(bins, "kpreload-init")}
}

// TestRoot puts kpreload into a root made by another tool: kpreload's files
// are in it, ldconfig ran in its sandbox, the staged units (the boot-ok
// unit among them) were enabled with systemctl --root, and install made
// GRUB boot kpreload (its initramfs, the hooks, grub.cfg's first entry).
// The initramfs build is the fake part (install's own tests and the
// diskimage-builder boot test build real ones).
func TestRoot(t *testing.T) {
	root := distroRoot(t)
	rec := &runnertest.Recorder{}
	var log bytes.Buffer
	o := Options{Stage: stageOptions(t), Runner: rec, Log: &log}
	ext4 := rootcheck.Root{FSType: "ext4"}
	o.Install = install.Options{
		RootFS: &ext4, SkipInitramfs: true,
		UpdateGrub: func(_ context.Context, root string, _ io.Writer) error {
			// What update-grub leaves: kpreload's entries first.
			b := bytes.NewBufferString("set default=\"0\"\n")
			if err := install.GrubEntries(b, root, install.GrubEnv{DeviceUUID: "u"}); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(root, install.GrubConfig), b.Bytes(), 0o644)
		},
	}
	// SkipInitramfs keeps the initramfs already there: the stand-in.
	treetest.Write(t, root, map[string]string{install.InitramfsPath(testKernel): "kpreload initramfs"})
	res, err := Root(context.Background(), root, o)
	if err != nil {
		t.Fatalf("Root: %v\n%s", err, log.String())
	}
	if got, want := res.Kernels, []string{testKernel}; !slices.Equal(got, want) {
		t.Errorf("kernels = %v, want %v (the root's)", got, want)
	}
	for _, p := range []string{install.Kpreload, install.Init, install.BootOKUnit, install.PostinstHook, install.GrubScript, install.Cmdline} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s not in the root: %v", p, err)
		}
	}
	if !slices.Contains(res.Units, "kpreload-boot-ok.service") {
		t.Errorf("units = %v, want kpreload-boot-ok.service among them", res.Units)
	}
	ldconfig := sandbox.Cmd(sandbox.Spec{Root: root, Argv: []string{"/usr/sbin/ldconfig"}}).String()
	if got, want := rec.Ran(sandbox.Bwrap), []string{ldconfig}; !slices.Equal(got, want) {
		t.Errorf("ran %q, want %q", got, want)
	}
	if got, want := rec.Ran("systemctl"), []string{"systemctl --root=" + root + " enable " + strings.Join(res.Units, " ")}; !slices.Equal(got, want) {
		t.Errorf("ran %q, want %q", got, want)
	}
	if res.Install.Default != testKernel || res.Install.Bootloader != install.GRUB {
		t.Errorf("install: %+v, want GRUB booting %s", res.Install, testKernel)
	}
	// The distribution's initramfs stays, as the way back.
	if b, err := os.ReadFile(filepath.Join(root, "boot/initrd.img-"+testKernel)); err != nil || string(b) != "distribution initramfs" {
		t.Errorf("the distribution's initramfs: %q, %v", b, err)
	}
}

// TestRootRefuses: a root with no kernel, a kernel name that is no release,
// and a path that is no directory are refused before anything is written.
func TestRootRefuses(t *testing.T) {
	empty := t.TempDir()
	file := filepath.Join(t.TempDir(), "file")
	treetest.Write(t, filepath.Dir(file), map[string]string{"file": "x"})
	for _, c := range []struct {
		name, root string
		kernels    []string
		want       string
	}{
		{"no kernel", empty, nil, "holds no kernel"},
		{"bad kernel", empty, []string{"../../etc"}, "../../etc"},
		{"not a directory", file, nil, "is not a directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Options{Stage: stageOptions(t), Runner: &runnertest.Recorder{}}
			o.Stage.Kernels = c.kernels
			_, err := Root(context.Background(), c.root, o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Root: %v, want an error holding %q", err, c.want)
			}
			if ents, _ := os.ReadDir(empty); len(ents) != 0 {
				t.Errorf("the root got %d entries", len(ents))
			}
		})
	}
}

// TestRootLinksOut: a root whose /usr/bin, /etc/kpreload, /etc/kernel,
// /usr/lib/systemd/system or /var/lib/kpreload is a link out of it
// (absolute, or relative with ".."), next to a victim tree: nothing outside
// the root is created, changed or removed, nothing is run in it, and the
// error names the path. A link inside the root is followed there.
func TestRootLinksOut(t *testing.T) {
	for _, link := range []string{"usr/bin", "etc/kpreload", "etc/kernel", "usr/lib/systemd/system", "var/lib/kpreload"} {
		for _, form := range []string{"absolute", "relative", "inside"} {
			t.Run(link+"/"+form, func(t *testing.T) {
				root := distroRoot(t)
				victim := filepath.Join(filepath.Dir(root), "victim")
				inroottest.Victim(t, victim)
				target := map[string]string{"absolute": victim, "relative": strings.Repeat("../", strings.Count(link, "/")+1) + "victim", "inside": "/moved"}[form]
				treetest.Write(t, root, map[string]string{filepath.Dir(link) + "/": "", "moved/": ""})
				if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
					t.Fatal(err)
				}
				before := inroottest.Snapshot(t, victim)
				rec := &runnertest.Recorder{}
				ext4 := rootcheck.Root{FSType: "ext4"}
				o := Options{Stage: stageOptions(t), Runner: rec, Install: install.Options{RootFS: &ext4, SkipInitramfs: true,
					UpdateGrub: func(context.Context, string, io.Writer) error { return nil }}}
				_, err := Root(context.Background(), root, o)
				if got := inroottest.Snapshot(t, victim); got != before {
					t.Fatalf("Root (%v) changed the victim tree beside the root:\nbefore\n%s\nafter\n%s", err, before, got)
				}
				if form == "inside" {
					if ents, _ := os.ReadDir(filepath.Join(root, "moved")); len(ents) == 0 {
						t.Errorf("nothing copied through the link inside the root (%v)", err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), filepath.Join(root, link)) {
					t.Fatalf("Root with %s a link out: %v, want a failure naming %s", link, err, filepath.Join(root, link))
				}
				if ran := rec.Ran(""); len(ran) != 0 {
					t.Errorf("ran %q in a root it could not fill", ran)
				}
			})
		}
	}
}

// TestParsePartitions reads sfdisk --json of an MBR and a GPT disk and picks the root.
func TestParsePartitions(t *testing.T) {
	mbr := `{"partitiontable":{"label":"dos","id":"0x1","device":"d.raw","unit":"sectors","sectorsize":512,
	  "partitions":[{"node":"d.raw1","start":2048,"size":4194304,"type":"83","bootable":true}]}}`
	gpt := `{"partitiontable":{"label":"gpt","device":"/tmp/x/disk.img","unit":"sectors","sectorsize":512,
	  "partitions":[{"node":"/tmp/x/disk.img1","start":2048,"size":2048,"type":"21686148-6449-6E6F-744E-656564454649"},
	  {"node":"/tmp/x/disk.img2","start":4096,"size":131072,"type":"C12A7328-F81F-11D2-BA4B-00A0C93EC93B"},
	  {"node":"/tmp/x/disk.img3","start":135168,"size":1000000,"type":"0fc63daf-8483-4772-8e79-3d69d8477de4"}]}}`
	for _, c := range []struct {
		name   string
		json   string
		number int
		want   Partition
		err    string
	}{
		{"mbr", mbr, 0, Partition{1, 2048 * 512, 4194304 * 512, "83"}, ""},
		{"gpt: the linux one", gpt, 0, Partition{3, 135168 * 512, 1000000 * 512, "0FC63DAF-8483-4772-8E79-3D69D8477DE4"}, ""},
		{"gpt: named", gpt, 2, Partition{2, 4096 * 512, 131072 * 512, "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"}, ""},
		{"gpt: no such", gpt, 7, Partition{}, "no partition 7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			parts, err := ParsePartitions([]byte(c.json))
			if err != nil {
				t.Fatal(err)
			}
			got, err := RootPartition(parts, c.number, 0)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("RootPartition: %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("RootPartition = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
	two := []Partition{{1, 0, 1 << 20, "83"}, {2, 1 << 20, 1 << 20, "83"}}
	if _, err := RootPartition(two, 0, 0); err == nil || !strings.Contains(err.Error(), "--partition") {
		t.Errorf("two Linux partitions: %v, want a request for --partition", err)
	}
	if got, err := RootPartition(nil, 0, 4096); err != nil || got != (Partition{0, 0, 4096, ""}) {
		t.Errorf("no table: %+v, %v; want the whole file", got, err)
	}
}

// TestCheckRaw: only a raw disk is loop-mounted; qcow2, VMDK and VHDX are
// refused naming the conversion.
func TestCheckRaw(t *testing.T) {
	for _, c := range []struct {
		name, head, want string
	}{
		{"raw", "\x00\x00\x00\x00\x00\x00\x00\x00", ""},
		{"qcow2", "QFI\xfb\x00\x00\x00\x03", "qcow2 image"},
		{"vmdk", "KDMV\x01\x00\x00\x00", "vmdk image"},
		{"vhdx", "vhdxfile", "vhdx image"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "disk")
			if err := os.WriteFile(f, []byte(c.head+strings.Repeat("\x00", 504)), 0o644); err != nil {
				t.Fatal(err)
			}
			err := checkRaw(f)
			if (c.want == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "qemu-img convert -O raw"))) {
				t.Errorf("checkRaw = %v, want %q", err, c.want)
			}
		})
	}
}
