package stage

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestStageRootLinksOut stages kpreload's files (binaries, rootfiles, the
// kernel hooks, the command line, the early-drivers marker, the module
// cache, a firmware package) into roots whose directories are links out of
// the root, absolute or relative, next to a victim tree: nothing outside
// the root is created, changed or removed, and a failure names the path.
func TestStageRootLinksOut(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	deb := firmwareDeb(t)
	for _, link := range []string{"usr/bin", "usr/lib/kpreload", "etc/kpreload", "etc/kernel", "etc/ld.so.conf.d", "var/lib/kpreload", "lib", "usr/lib/systemd"} {
		for _, form := range []string{"absolute", "relative"} {
			t.Run(link+"/"+form, func(t *testing.T) {
				base := t.TempDir()
				root, victim := filepath.Join(base, "root"), filepath.Join(base, "victim")
				inroottest.Victim(t, victim)
				full := filepath.Join(root, link)
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				target := victim
				if form == "relative" {
					target = strings.Repeat("../", strings.Count(link, "/")+1) + "victim"
				}
				if err := os.Symlink(target, full); err != nil {
					t.Fatal(err)
				}
				before := inroottest.Snapshot(t, victim)
				_, err := Stage(context.Background(), Options{
					Kernels: []string{"6.1.0-56-cloud-amd64"}, CacheDir: t.TempDir(), DownloadDir: t.TempDir(),
					KpreloadBinary: bin, InitBinary: bin, Cmdline: "root=UUID=x rw", EarlyDrivers: true, NoInitramfs: true,
				}, root)
				if err == nil {
					err = extractFirmware(context.Background(), Host{}, deb, root)
				}
				if got := inroottest.Snapshot(t, victim); got != before {
					t.Fatalf("staging (err %v) changed the victim tree beside the root:\nbefore\n%s\nafter\n%s", err, before, got)
				}
				if err != nil && !strings.Contains(err.Error(), root) {
					t.Errorf("stage: %v: want an error naming a path in the root", err)
				}
			})
		}
	}
}

// firmwareDeb builds a firmware package holding lib/firmware/test/fw.bin.
func firmwareDeb(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	pkg := filepath.Join(dir, "pkg")
	for p, s := range map[string]string{
		"DEBIAN/control":           "Package: firmware-test\nVersion: 1\nArchitecture: all\nMaintainer: t <t@t>\nDescription: test\n",
		"lib/firmware/test/fw.bin": "firmware",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(pkg, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(dir, "firmware-test.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", pkg, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, out)
	}
	return deb
}

func TestOptionsProblems(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &recipe.Recipe{Name: "testdriver"}
	good := Options{KpreloadBinary: bin, InitBinary: bin, Recipes: []*recipe.Recipe{r}}
	for _, tt := range []struct {
		name string
		edit func(*Options)
		want string // in the one problem; "" for none
	}{
		{"good", func(*Options) {}, ""},
		{"nil recipe", func(o *Options) { o.Recipes = []*recipe.Recipe{nil} }, "nil recipe"},
		{"recipe twice", func(o *Options) { o.Recipes = []*recipe.Recipe{r, r} }, "recipe testdriver given twice"},
		{"no kpreload", func(o *Options) { o.KpreloadBinary = "" }, "no kpreload binary"},
		{"init missing", func(o *Options) { o.InitBinary = filepath.Join(dir, "nope") }, "/init binary"},
		{"init a directory", func(o *Options) { o.InitBinary = dir }, "is a directory"},
		{"instance missing", func(o *Options) { o.Instance = filepath.Join(dir, "nope.yaml") }, "instance file"},
		{"remote config missing", func(o *Options) { o.RemoteConfig = filepath.Join(dir, "nope.yaml") }, "remote configuration"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := good
			tt.edit(&o)
			got := o.Problems()
			switch {
			case tt.want == "" && len(got) != 0:
				t.Errorf("Problems() = %v, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0].Error(), tt.want)):
				t.Errorf("Problems() = %v, want one saying %q", got, tt.want)
			}
		})
	}
}
