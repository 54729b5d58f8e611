package image

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image/bootloader"
	"github.com/kpreload/kpreload/builder/image/disk"
	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/install"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := Options{Name: "ci", OutDir: dir, Kernels: []string{"6.1.0-56-cloud-amd64"}, Stage: stage.Options{KpreloadBinary: bin, InitBinary: bin}}
	if err := good.Validate(); err != nil {
		t.Fatalf("good options: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"bad name", func(o *Options) { o.Name = "a/b" }, `name "a/b"`},
		{"no out", func(o *Options) { o.OutDir = "" }, "no output directory"},
		{"no kernels", func(o *Options) { o.Kernels = nil }, "no kernels"},
		{"bad kernel", func(o *Options) { o.Kernels = []string{"linux; rm"} }, "not a kernel release"},
		{"twice", func(o *Options) { o.Kernels = []string{"6.1", "6.1"} }, "given twice"},
		{"format", func(o *Options) { o.Formats = []string{"vpc"} }, `format "vpc": want one of raw, qcow2, vhd, vmdk, gce`},
		{"format twice", func(o *Options) { o.Formats = []string{"vmdk", "vmdk"} }, "format vmdk given twice"},
		{"small", func(o *Options) { o.Disk.SizeMB = 300 }, "disk size 300 MiB"},
		{"no init", func(o *Options) { o.Stage.InitBinary = filepath.Join(dir, "nope") }, "/init binary"},
		{"no kpreload", func(o *Options) { o.Stage.KpreloadBinary = "" }, "no kpreload binary"},
		{"instance", func(o *Options) { o.Stage.Instance = filepath.Join(dir, "nope.yaml") }, "instance file"},
		{"cmdline", func(o *Options) { o.Boot.Cmdline = "a\nb" }, "one line"},
		{"cmdline with root=", func(o *Options) { o.Boot.Cmdline = "console=ttyS0 root=/dev/sda1" }, `cmdline "root=/dev/sda1": the image names its root itself`},
		{"package", func(o *Options) { o.Rootfs.Packages = []string{"a b"} }, `package "a b"`},
		{"initramfs-tools", func(o *Options) { o.Rootfs.Packages = []string{"htop", "initramfs-tools"} }, "package initramfs-tools: kpreload's images make their own initramfs"},
		{"dracut, pinned", func(o *Options) { o.Rootfs.Packages = []string{"dracut=059-4"} }, "package dracut: kpreload's images make their own initramfs"},
		{"tiny-initramfs", func(o *Options) { o.Rootfs.Packages = []string{"tiny-initramfs"} }, "--plain --bootloader grub"},
		{"stage kernels", func(o *Options) { o.Stage.Kernels = []string{"6.1.0-99-cloud-amd64"} }, "stage kernels"},
		{"stage cmdline", func(o *Options) { o.Stage.Cmdline = "console=ttyS0" }, "leave Cmdline, ModulesDir and NoInitramfs out"},
		{"secure boot with systemd-boot", func(o *Options) { o.Boot.SecureBoot = true }, "secure boot needs the grub bootloader"},
		{"bootloader", func(o *Options) { o.Boot.Loader = "lilo" }, `bootloader "lilo"`},
		{"small ESP", func(o *Options) { o.Disk.ESPSizeMB = 32 }, "ESP size 32 MiB"},
		{"plain with recipes", func(o *Options) {
			o.Plain, o.Boot.Loader, o.Stage.EarlyDrivers = true, install.GRUB, true
		}, "a plain image carries no kpreload"},
		{"dracut in a plain image", func(o *Options) {
			o.Plain, o.Boot.Loader, o.Stage.Recipes, o.Rootfs.Packages = true, install.GRUB, nil, []string{"dracut"}
		}, "package dracut: a plain image uses Debian's initramfs-tools"},
	} {
		o := good
		c.edit(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", c.name, err, c.want)
		}
	}
	// Every problem at once.
	err := Options{}.Validate()
	for _, want := range []string{"name", "no output directory", "no kernels", "no kpreload binary", "no /init binary"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Options{}.Validate() = %v, want it to mention %q", err, want)
		}
	}
}

// TestResolve checks that Resolve fills every default into the stages'
// options, hands Stage the image's kernels and progress, keeps what is set
// and gives the same result twice.
func TestResolve(t *testing.T) {
	said := ""
	o := Options{Kernels: []string{"6.1.0-56-cloud-amd64"}, Progress: func(msg string) { said = msg }}
	r := o.Resolve()
	for _, c := range []struct{ name, got, want string }{
		{"suite", r.Rootfs.Suite, DefaultSuite},
		{"mirror", r.Rootfs.Mirror, DefaultMirror},
		{"security mirror", r.Rootfs.SecurityMirror, DefaultSecurityMirror},
		{"rootfs cache", r.Rootfs.CacheDir, DefaultRootfsCacheDir},
		{"module cache", r.Stage.CacheDir, DefaultCacheDir()},
		{"downloads", r.Stage.DownloadDir, DefaultDownloadDir()},
		{"bootloader", string(r.Boot.Loader), string(install.SystemdBoot)},
		{"formats", strings.Join(r.Formats, ","), formats.Raw + "," + formats.QCOW2},
		{"built with", r.BuiltWith, Version()},
		{"stage kernels", strings.Join(r.Stage.Kernels, ","), "6.1.0-56-cloud-amd64"},
	} {
		if c.got != c.want {
			t.Errorf("resolved %s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if r.Disk.SizeMB != DefaultSizeMB || r.Disk.ESPSizeMB != DefaultESPSizeMB {
		t.Errorf("resolved disk = %+v, want %d and %d MiB", r.Disk, DefaultSizeMB, DefaultESPSizeMB)
	}
	if r.Stage.Lister == nil || r.Stage.Progress == nil {
		t.Errorf("resolved stage has no kernel lister or no progress")
	} else if r.Stage.Progress("x"); said != "x" {
		t.Errorf("the stage's progress is not the image's")
	}
	if again := r.Resolve(); !reflect.DeepEqual(again.Rootfs, r.Rootfs) || again.Disk != r.Disk || again.Boot != r.Boot {
		t.Errorf("Resolve twice = %+v, want %+v", again, r)
	}
	set := Options{Rootfs: rootfs.Options{Suite: "trixie", CacheDir: "off"}, Disk: disk.Options{SizeMB: 600}, Boot: bootloader.Options{Loader: install.GRUB}}.Resolve()
	if set.Rootfs.Suite != "trixie" || set.Rootfs.CacheDir != "off" || set.Disk.SizeMB != 600 || set.Disk.ESPSizeMB != DefaultESPSizeMB || set.Boot.Loader != install.GRUB {
		t.Errorf("Resolve changed what was set: %+v %+v %+v", set.Rootfs, set.Disk, set.Boot)
	}
}

func TestOutputPath(t *testing.T) {
	for _, c := range []struct{ format, file string }{
		{formats.Raw, "ci.raw"}, {formats.GCE, "ci.tar.gz"}, {"manifest.json", "ci.manifest.json"},
	} {
		if got, want := OutputPath("/out", "ci", c.format), "/out/"+c.file; got != want {
			t.Errorf("OutputPath(/out, ci, %s) = %q, want %q", c.format, got, want)
		}
	}
}
