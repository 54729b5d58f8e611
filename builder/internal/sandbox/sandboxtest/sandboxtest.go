// Package sandboxtest is the hostile program of an image root for the tests
// of every caller of builder/internal/sandbox: planted as a program of the
// root kpreload runs (update-grub, grub-mkconfig, ldconfig ...), it tries to
// write on the host (testdata/escape), and Check says whether it ran and
// whether anything outside the root was written.
package sandboxtest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/internal/sandbox"
)

// escapePkg is the program's package, from the module's root.
const escapePkg = "builder/internal/sandbox/sandboxtest/testdata/escape"

var build struct {
	once sync.Once
	bin  string
	err  string
}

// binary builds testdata/escape, static, once per test process.
func binary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		// A test runs in its package's directory, inside the module.
		mod, err := os.Getwd()
		for err == nil {
			if _, serr := os.Stat(filepath.Join(mod, "go.mod")); serr == nil {
				break
			}
			if filepath.Dir(mod) == mod {
				err = errors.New("no go.mod above the test's directory")
			}
			mod = filepath.Dir(mod)
		}
		if err != nil {
			build.err = err.Error()
			return
		}
		dir, err := os.MkdirTemp("", "kpreload-escape-")
		if err != nil {
			build.err = err.Error()
			return
		}
		out := filepath.Join(dir, "escape")
		// Static (no cgo), so it runs in any root; env(1) adds that to
		// the environment the test was given.
		cmd := exec.Command("env", "CGO_ENABLED=0", "go", "build", "-trimpath", "-o", out, "./"+escapePkg)
		cmd.Dir = mod
		if b, err := cmd.CombinedOutput(); err != nil {
			build.err = "go build testdata/escape: " + err.Error() + "\n" + string(b)
			return
		}
		build.bin = out
	})
	if build.err != "" {
		t.Fatal(build.err)
	}
	return build.bin
}

// Escape is the program planted in one root, and the host directory it
// aims at.
type Escape struct {
	root string
	// Target is the host directory beside the root the program writes into
	// once it escapes; nothing may appear there.
	Target string
}

// Plant builds the program and installs it in root at each of paths
// (relative to the root, such as "usr/sbin/update-grub"), aimed at a new
// host directory outside the root.
func Plant(t testing.TB, root string, paths ...string) *Escape {
	t.Helper()
	bin := binary(t)
	prog, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	target, err := os.MkdirTemp(filepath.Dir(filepath.Clean(root)), "escape-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(target)
		os.Remove(hostProof(target))
	})
	for _, p := range paths {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Remove(full)
		if err := os.WriteFile(full, prog, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "escape-target"), []byte(target+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Escape{root: root, Target: target}
}

// hostProof is the file at the host's root the program writes after the
// chroot escape.
func hostProof(target string) string { return "/escaped-PROOF-" + filepath.Base(target) }

// Check fails t when the program wrote anything outside the root (the
// target directory, the host's /escaped-PROOF-…), or did not run at all
// during step; it then makes ready for the next step.
func (e *Escape) Check(t testing.TB, step string) {
	t.Helper()
	ran, err := os.ReadFile(filepath.Join(e.root, "escape-ran"))
	if err != nil {
		t.Errorf("%s: the planted program did not run (no /escape-ran in the root): %v", step, err)
	}
	var out []string
	ents, _ := os.ReadDir(e.Target)
	for _, d := range ents {
		out = append(out, filepath.Join(e.Target, d.Name()))
	}
	if _, err := os.Stat(hostProof(e.Target)); err == nil {
		out = append(out, hostProof(e.Target))
	}
	if len(out) > 0 {
		t.Errorf("%s: the root's program wrote on the host: %s\nits log:\n%s", step, strings.Join(out, ", "), ran)
	}
	for _, p := range out {
		os.Remove(p)
	}
	os.Remove(filepath.Join(e.root, "escape-ran"))
}

// Parse reads the root and the program back from a command sandbox.Cmd
// made, for fakes of runner.Runner; ok is false for any other command.
func Parse(c runner.Cmd) (root string, argv []string, ok bool) {
	if c.Name != sandbox.Bwrap {
		return "", nil, false
	}
	i := slices.Index(c.Args, "--bind")
	j := slices.Index(c.Args, "--")
	if i < 0 || i+2 >= len(c.Args) || c.Args[i+2] != "/" || j < 0 {
		return "", nil, false
	}
	return c.Args[i+1], c.Args[j+1:], true
}

// Line is the command's program line, "ROOT: ARGV...", as tests compare
// it; any other command is its own line.
func Line(c runner.Cmd) string {
	root, argv, ok := Parse(c)
	if !ok {
		return c.String()
	}
	return root + ": " + strings.Join(argv, " ")
}
