package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/install"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := Options{Name: "ci", OutDir: dir, Kernels: []string{"6.1.0-56-cloud-amd64"}, KpreloadBinary: bin, InitBinary: bin}
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
		{"small", func(o *Options) { o.SizeMB = 300 }, "disk size 300 MiB"},
		{"no init", func(o *Options) { o.InitBinary = filepath.Join(dir, "nope") }, "/init binary"},
		{"no kpreload", func(o *Options) { o.KpreloadBinary = "" }, "no kpreload binary"},
		{"instance", func(o *Options) { o.Instance = filepath.Join(dir, "nope.yaml") }, "instance file"},
		{"cmdline", func(o *Options) { o.Cmdline = "a\nb" }, "one line"},
		{"cmdline with root=", func(o *Options) { o.Cmdline = "console=ttyS0 root=/dev/sda1" }, `cmdline "root=/dev/sda1": the image names its root itself`},
		{"package", func(o *Options) { o.Packages = []string{"a b"} }, `package "a b"`},
		{"initramfs-tools", func(o *Options) { o.Packages = []string{"htop", "initramfs-tools"} }, "package initramfs-tools: kpreload's images make their own initramfs"},
		{"dracut, pinned", func(o *Options) { o.Packages = []string{"dracut=059-4"} }, "package dracut: kpreload's images make their own initramfs"},
		{"tiny-initramfs", func(o *Options) { o.Packages = []string{"tiny-initramfs"} }, "--plain --bootloader grub"},
		{"dracut in a plain image", func(o *Options) {
			o.Plain, o.Bootloader, o.Recipes, o.Packages = true, install.GRUB, nil, []string{"dracut"}
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

func TestOutputPath(t *testing.T) {
	for _, c := range []struct{ format, file string }{
		{formats.Raw, "ci.raw"}, {formats.GCE, "ci.tar.gz"}, {"manifest.json", "ci.manifest.json"},
	} {
		if got, want := OutputPath("/out", "ci", c.format), "/out/"+c.file; got != want {
			t.Errorf("OutputPath(/out, ci, %s) = %q, want %q", c.format, got, want)
		}
	}
}
