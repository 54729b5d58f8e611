package deb

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/install"
	"github.com/kpreload/kpreload/cmd/kpreload/cli"
	"github.com/kpreload/kpreload/internal/layout"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveStaticBinaries()
	os.Exit(code)
}

// fakeBin is a --bin directory whose four programs are kpreload-rootinit,
// built as make build builds it (a Go program with its modules' build
// information, as the real ones are).
func fakeBin(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(testenv.StaticBinary(t, layout.RootInit, "./cmd/kpreload-rootinit"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, n := range []string{"kpreload", layout.Init, layout.RootInit, layout.Plugin} {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func options(t *testing.T) Options {
	return Options{BinDir: fakeBin(t), RecipesDir: "../../recipes", OutDir: t.TempDir(), Root: cli.NewRoot(),
		Version: "0.2.0", Maintainer: DefaultMaintainer, Date: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}
}

func gunzip(t *testing.T, b []byte) string {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Header.ModTime.IsZero() || r.Header.Name != "" {
		t.Errorf("gzip header carries a time %v or name %q; want neither (gzip -n)", r.Header.ModTime, r.Header.Name)
	}
	return string(out)
}

// TestTree: the package's layout, as docs/package.md lists it.
func TestTree(t *testing.T) {
	o := options(t)
	tr, err := Tree(o)
	if err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{
		"usr/bin/kpreload": 0o755, "usr/lib/kpreload/kpreload-init": 0o755, "usr/lib/kpreload/kpreload-rootinit": 0o755,
		"usr/lib/kpreload/packer-plugin-kpreload": 0o755, BashCompletion: 0o644, ZshCompletion: 0o644, FishCompletion: 0o644,
		"usr/share/man/man1/kpreload.1.gz": 0o644, "usr/share/man/man1/kpreload-build.1.gz": 0o644, "usr/share/man/man1/kpreload-image-build.1.gz": 0o644,
		"usr/share/kpreload/recipes/testdriver.yaml": 0o644, "usr/share/kpreload/recipes/testdriver/kpreload_edu.c": 0o644,
		"usr/share/doc/kpreload/copyright": 0o644, "usr/share/doc/kpreload/changelog.Debian.gz": 0o644, LintianOverrides: 0o644,
		install.PostinstHook: 0o755, install.PostrmHook: 0o755, install.GrubScript: 0o755, install.PackagedKernelInstallPlugin: 0o755,
	} {
		f, ok := tr[p]
		if !ok {
			t.Errorf("the package lacks %s", p)
			continue
		}
		if f.mode != mode {
			t.Errorf("%s: mode %v, want %v", p, f.mode, mode)
		}
	}
	for p, want := range map[string]string{"usr/lib/kpreload/kpreload": "../../bin/kpreload", "usr/share/kpreload/recipes/testdriver-2/Makefile": "../testdriver/Makefile"} {
		if f := tr[p]; f.mode&os.ModeSymlink == 0 || string(f.data) != want {
			t.Errorf("%s: %v -> %q, want a link to %s", p, f.mode, f.data, want)
		}
	}
	for p, text := range install.PackagedHooks() {
		if string(tr[p].data) != text {
			t.Errorf("%s differs from what kpreload install writes", p)
		}
	}
	if man := gunzip(t, tr["usr/share/man/man1/kpreload-build.1.gz"].data); !strings.Contains(man, `.TH "KPRELOAD-BUILD" "1" "Dec 2026" "kpreload 0.2.0" "kpreload manual"`) || !strings.Contains(man, "--recipes") {
		t.Errorf("kpreload-build.1 lacks its header or --recipes:\n%.600s", man)
	}
	if cl := gunzip(t, tr["usr/share/doc/kpreload/changelog.Debian.gz"].data); !strings.HasPrefix(cl, "kpreload (0.2.0-1) unstable; urgency=medium\n") || !strings.Contains(cl, " -- "+DefaultMaintainer+"  Mon, 07 Dec 2026 00:00:00 +0000\n") {
		t.Errorf("changelog.Debian:\n%s", cl)
	}
	cr := string(tr["usr/share/doc/kpreload/copyright"].data)
	for _, want := range []string{"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/", " golang.org/x/sys v", "usr/share/kpreload/recipes/testdriver/*", "License: GPL-2", "Copyright: 2026 the kpreload authors\nLicense: not-stated\n"} {
		if !strings.Contains(cr, want) {
			t.Errorf("copyright lacks %q:\n%s", want, cr)
		}
	}
	if b := string(tr[BashCompletion].data); !strings.Contains(b, "__start_kpreload") {
		t.Errorf("bash completion lacks __start_kpreload")
	}
	if o.FileName() != "kpreload_0.2.0-1_amd64.deb" {
		t.Errorf("FileName = %s", o.FileName())
	}
}

// TestOptionsRefused: bad options are refused, saying what is wanted.
func TestOptionsRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"version with a dash", func(o *Options) { o.Version = "0.2.0-1" }, "want a version such as 0.2.0"},
		{"maintainer without address", func(o *Options) { o.Maintainer = "someone" }, `want "Name <address>"`},
		{"maintainer without name", func(o *Options) { o.Maintainer = "<a@b.invalid>" }, `want "Name <address>"`},
		{"maintainer with a stray >", func(o *Options) { o.Maintainer = "A <a@b>>" }, `want "Name <address>"`},
		{"no date", func(o *Options) { o.Date = time.Time{} }, "no build date"},
		{"no recipes", func(o *Options) { o.RecipesDir = t.TempDir() }, "no recipes (*.yaml)"},
		{"no programs", func(o *Options) { o.BinDir = t.TempDir() }, "make build and make plugin make it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := options(t)
			tt.edit(&o)
			if _, err := Tree(o); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Tree: %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

// TestGPLRecipes: the recipes' directories the copyright file calls GPL-2
// are, by their SPDX lines; the other recipe files carry none.
func TestGPLRecipes(t *testing.T) {
	err := filepath.WalkDir("../../recipes", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&os.ModeSymlink != 0 {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../../recipes", p)
		gpl := false
		for _, g := range GPLRecipes {
			gpl = gpl || strings.HasPrefix(rel, g+"/")
		}
		_, spdx, has := strings.Cut(string(b), "SPDX-License-Identifier: ")
		switch {
		case has && !gpl:
			t.Errorf("%s names a license (%.20s) the copyright file does not list", rel, spdx)
		case has && !strings.HasPrefix(spdx, "GPL-2.0"):
			t.Errorf("%s: SPDX %.20s, the copyright file says GPL-2", rel, spdx)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBuildReproducible: dpkg-deb packs the tree into FileName; the same
// options give the same bytes; the control file says what the package is,
// and every file under /etc is a conffile.
func TestBuildReproducible(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Fatalf("dpkg-deb (dpkg, on every Debian host) is missing: %v", err)
	}
	o := options(t)
	var sums []string
	for i := range 2 {
		o.OutDir = t.TempDir()
		deb, err := Build(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(deb) != o.FileName() {
			t.Errorf("Build made %s, want %s", deb, o.FileName())
		}
		b, err := os.ReadFile(deb)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, fmt.Sprintf("%x", sha256.Sum256(b)))
		if i > 0 {
			continue
		}
		for field, want := range map[string]string{"Package": "kpreload", "Version": "0.2.0-1", "Architecture": "amd64", "Maintainer": DefaultMaintainer} {
			out, err := exec.Command("dpkg-deb", "-f", deb, field).Output()
			if got := strings.TrimSpace(string(out)); err != nil || got != want {
				t.Errorf("dpkg-deb -f %s: %q, %v; want %q", field, got, err, want)
			}
		}
		out, err := exec.Command("dpkg-deb", "-I", deb, "conffiles").Output()
		want := "/etc/grub.d/09_kpreload\n/etc/kernel/postinst.d/zz-kpreload\n/etc/kernel/postrm.d/zz-kpreload\n"
		if err != nil || string(out) != want {
			t.Errorf("conffiles: %q, %v; want %q", out, err, want)
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("two builds of the same tree differ: %s and %s", sums[0], sums[1])
	}
}
