package stage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// recorder stands in for cp, make and dpkg: it records each command line,
// makes the files make install and dpkg -x would, and fails the command
// that begins or ends with fail.
type recorder struct {
	t    *testing.T
	fail string
	cmds []string
}

func (r *recorder) LookPath(name string) (string, error) { return "/fake/" + name, nil }

func (r *recorder) Run(ctx context.Context, c runner.Cmd) ([]byte, error) {
	line := c.String()
	r.cmds = append(r.cmds, line)
	if r.fail != "" && (strings.HasPrefix(line, r.fail) || strings.HasSuffix(line, r.fail)) {
		return nil, &runner.Error{Cmd: c, Err: errors.New("exit status 1"), Tail: []string{"fake failure"}}
	}
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
		r.t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("fake"), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return nil, nil
}

// ran returns the recorded command lines that start with prefix.
func (r *recorder) ran(prefix string) []string {
	var out []string
	for _, c := range r.cmds {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

// TestUserspaceAndDebs builds a recipe's userspace and unpacks a package
// into a root through the faked make, cp and dpkg, and reports their failures.
func TestUserspaceAndDebs(t *testing.T) {
	ctx := context.Background()
	f := &recorder{t: t}
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
	if len(f.ran("cp -rL "+src+"/.")) != 1 || len(f.ran("make -C ")) != 1 {
		t.Errorf("ran %q, want cp -rL and make install", f.cmds)
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
		f := &recorder{t: t, fail: tt.fail}
		if err := buildUserspace(ctx, Host{Runner: f}, src, "1.0", root, "opt/y"); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("buildUserspace with %s failing = %v, want %q", tt.fail, err, tt.wantErr)
		}
	}
	if err := buildUserspace(ctx, tools.Userspace, t.TempDir(), "1.0", root, "opt/y"); err == nil || !strings.Contains(err.Error(), "no Makefile") {
		t.Errorf("buildUserspace without a Makefile = %v", err)
	}
	if err := extractInto(ctx, Host{Runner: &recorder{t: t, fail: "dpkg -x"}}, "x.deb", root, "opt/z"); err == nil || !strings.Contains(err.Error(), "dpkg -x x.deb") {
		t.Errorf("extractInto with dpkg failing = %v", err)
	}
}
