package matrix

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	toolrun "github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/recipe"
)

// TestToolErrors: a tool the matrix runs (patch, dpkg-deb, the compiler)
// that fails gives an error naming the command line and quoting the end of
// the tool's output, through the builder's runner.
func TestToolErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("src/a.txt", "hello\n", 0o644)
	write("bad.patch", "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-goodbye\n+hello again\n", 0o644)
	r := &recipe.Recipe{Name: "t", File: write("t.yaml", "name: t\n", 0o644), Patches: []string{"bad.patch"}}
	debs := filepath.Join(dir, "debs")
	write("debs/linux-headers-6.1.0-99-amd64_6.1.99-1_amd64.deb", "not an archive\n", 0o644)
	cc := write("bin/cc-broken", "#!/bin/sh\necho 'cc-broken: internal error: no spec file' >&2\nexit 3\n", 0o755)

	for _, tt := range []struct {
		name  string
		run   func() error
		wants []string // the command line, how it ended, the output's tail
	}{
		{"patch", func() error {
			_, _, err := applyPatches(ctx, nil, r, filepath.Join(dir, "src"), filepath.Join(dir, "sources"))
			return err
		}, []string{"patch " + filepath.Join(dir, "bad.patch") + " does not apply", "patch -p1 --forward --batch", "exit status 1", "Hunk #1 FAILED"}},
		{"dpkg-deb", func() error {
			_, err := headersPackageVersion(ctx, nil, debs, "6.1.0-99-amd64")
			return err
		}, []string{"kernel 6.1.0-99-amd64", "dpkg-deb -f " + filepath.Join(debs, "linux-headers-6.1.0-99-amd64_6.1.99-1_amd64.deb") + " Version", "exit status 2", "not a Debian format archive"}},
		{"compiler", func() error {
			_, err := compilerVersion(ctx, nil, cc)
			return err
		}, []string{cc + " --version", "exit status 3", "internal error: no spec file"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if err == nil {
				t.Fatal("no error, want the tool's failure")
			}
			for _, want := range tt.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\nwant it to name %q", err, want)
				}
			}
		})
	}
}

// fakeTools answers every program with out, recording the command lines.
type fakeTools struct {
	out   string
	lines []string
}

func (f *fakeTools) Run(ctx context.Context, c toolrun.Cmd) ([]byte, error) {
	f.lines = append(f.lines, c.String())
	return []byte(f.out), nil
}

func (f *fakeTools) LookPath(name string) (string, error) { return "/fake/" + name, nil }

// TestToolsThroughRunner: the matrix's tools run through the Runner it is
// given, so a fake stands in for them.
func TestToolsThroughRunner(t *testing.T) {
	ctx := context.Background()
	debs := t.TempDir()
	deb := filepath.Join(debs, "linux-headers-6.1.0-99-amd64_6.1.99-1_amd64.deb")
	if err := os.WriteFile(deb, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fakeTools{out: "6.1.99-1\n"}
	if got, err := headersPackageVersion(ctx, f, debs, "6.1.0-99-amd64"); err != nil || got != "6.1.99-1" {
		t.Errorf("headersPackageVersion = %q, %v; want 6.1.99-1 from the fake", got, err)
	}
	f.out = "gcc-12 (Debian 12.2.0-14) 12.2.0\nCopyright\n"
	if got, err := compilerVersion(ctx, f, "gcc-12"); err != nil || got != "gcc-12 (Debian 12.2.0-14) 12.2.0" {
		t.Errorf("compilerVersion = %q, %v; want the fake's first line", got, err)
	}
	if got, want := strings.Join(f.lines, "\n"), "dpkg-deb -f "+deb+" Version\ngcc-12 --version"; got != want {
		t.Errorf("ran\n%s\nwant\n%s", got, want)
	}
}
