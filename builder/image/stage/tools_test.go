package stage

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/internal/runner/runnertest"
)

// recorder stands in for cp, make and dpkg: it records each command line,
// makes the files make install and dpkg -x would, and fails the command
// that begins or ends with fail.
func recorder(t *testing.T, fail string) *runnertest.Recorder {
	return &runnertest.Recorder{Fail: fail, Make: func(c runner.Cmd) ([]byte, error) {
		var file string
		switch c.Name {
		case "dpkg":
			file = filepath.Join(c.Args[len(c.Args)-1], "usr/share/doc/fake/copyright")
		case "make":
			file = filepath.Join(strings.TrimPrefix(c.Args[3], "DESTDIR="), "usr/bin/fake-smi")
		default:
			return nil, nil
		}
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		return nil, os.WriteFile(file, []byte("fake"), 0o644)
	}}
}

// TestUserspaceAndDebs builds a recipe's userspace and unpacks a package
// into a root through the faked make, cp and dpkg, and reports their failures.
func TestUserspaceAndDebs(t *testing.T) {
	ctx := context.Background()
	f := recorder(t, "")
	tools := Tools{Dpkg: Host{Runner: f}, Userspace: Host{Runner: f}}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "Makefile"), []byte("install:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := buildUserspace(ctx, tools.Userspace, src, "1.0", root, "opt/kpreload/drivers/1.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "opt/kpreload/drivers/1.0/usr/bin/fake-smi")); err != nil {
		t.Errorf("make install's file not in the root: %v", err)
	}
	if len(f.Ran("cp -rL "+src+"/.")) != 1 || len(f.Ran("make -C ")) != 1 {
		t.Errorf("ran %q, want cp -rL and make install", f.Ran(""))
	}
	if err := extractInto(ctx, tools.Dpkg, "x.deb", root, "opt/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "opt/x/usr/share/doc/fake/copyright")); err != nil {
		t.Errorf("dpkg -x's file not in the root: %v", err)
	}
	for _, tt := range []struct{ fail, wantErr string }{
		{"cp -rL", "copy " + src},
		{"make -C", "make install in " + src},
	} {
		f := recorder(t, tt.fail)
		if err := buildUserspace(ctx, Host{Runner: f}, src, "1.0", root, "opt/y"); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("buildUserspace with %s failing = %v, want %q", tt.fail, err, tt.wantErr)
		}
	}
	if err := buildUserspace(ctx, tools.Userspace, t.TempDir(), "1.0", root, "opt/y"); err == nil || !strings.Contains(err.Error(), "no Makefile") {
		t.Errorf("buildUserspace without a Makefile = %v", err)
	}
	if err := extractInto(ctx, Host{Runner: recorder(t, "dpkg -x")}, "x.deb", root, "opt/z"); err == nil || !strings.Contains(err.Error(), "dpkg -x x.deb") {
		t.Errorf("extractInto with dpkg failing = %v", err)
	}
}
