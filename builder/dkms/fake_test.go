package dkms

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/buildroot"
	"github.com/kpreload/kpreload/builder/internal/runner"
)

// exitStatus is a fake program's exit, as an *exec.ExitError reports it.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitStatus) ExitCode() int { return int(e) }

// fakeRunner stands in for the programs Build runs: "dkms --version",
// "gcc --version" and the sandbox (unshare), whose run calls sandbox.
type fakeRunner struct {
	missing []string
	sandbox func(ctx context.Context, c runner.Cmd) error
	cmds    []runner.Cmd
}

func (f *fakeRunner) LookPath(name string) (string, error) {
	if slices.Contains(f.missing, name) {
		return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
	}
	return "/fake/bin/" + name, nil
}

func (f *fakeRunner) Run(ctx context.Context, c runner.Cmd) ([]byte, error) {
	f.cmds = append(f.cmds, c)
	switch {
	case c.String() == DefaultPath+" --version":
		return []byte("dkms-3.0.10\n"), nil
	case c.Name == "unshare" && f.sandbox != nil:
		return nil, f.sandbox(ctx, c)
	}
	return nil, &runner.Error{Cmd: c, Err: exitStatus(1), Tail: []string{"fake: unexpected command"}}
}

// fakeKernel lays out an unpacked kernel's headers for kver under a new
// directory, enough for InspectHeaders, and returns the kernel root and the
// headers directory.
func fakeKernel(t *testing.T, kver string) (string, string) {
	t.Helper()
	root := t.TempDir()
	h := filepath.Join(root, "usr/src/linux-headers-"+kver)
	files := map[string]string{
		"include/generated/utsrelease.h": `#define UTS_RELEASE "` + kver + `"` + "\n",
		".config":                        "CONFIG_CC_VERSION_TEXT=\"gcc-12 (Debian 12.2.0-14) 12.2.0\"\n",
		"scripts/basic/fixdep":           "",
		"scripts/mod/modpost":            "",
		"Module.symvers":                 "",
		"Makefile":                       "# headers\n",
	}
	for name, text := range files {
		writeFile(t, filepath.Join(h, name), text)
	}
	return root, h
}

// fakeBuildRoot returns a build root holding dkms and make and the
// directories the sandbox mounts over.
func fakeBuildRoot(t *testing.T) *buildroot.Root {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"usr/sbin/dkms", "usr/bin/make", "usr/src/.keep", "var/lib/dkms/.keep"} {
		writeFile(t, filepath.Join(dir, f), "")
	}
	return &buildroot.Root{Suite: "bookworm", Dir: dir}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBuildRunsSandbox checks, with a fake runner, the command line,
// directory and environment of the sandboxed dkms run, and what Build makes
// of its success, failure and cancellation.
func TestBuildRunsSandbox(t *testing.T) {
	const kver = "6.1.0-99-amd64"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "dkms.conf"), "PACKAGE_NAME=kpreload-fake\nPACKAGE_VERSION=1.2\nBUILT_MODULE_NAME[0]=fake\nDEST_MODULE_LOCATION[0]=/updates/dkms\n")
	moduleDir := func(work string) string {
		return filepath.Join(work, "dkms", "kpreload-fake", "1.2", kver, "x86_64", "module")
	}
	tests := []struct {
		name    string
		sandbox func(ctx context.Context, c runner.Cmd) error
		missing []string
		wantErr string // "" for success
		check   func(t *testing.T, err error)
	}{
		{name: "success", sandbox: func(_ context.Context, c runner.Cmd) error {
			fmt.Fprintln(c.Log, "dkms says hello")
			writeFile(t, filepath.Join(moduleDir(c.Dir), "fake.ko"), "ko")
			return nil
		}},
		{name: "failure", sandbox: func(_ context.Context, c runner.Cmd) error {
			writeFile(t, filepath.Join(c.Dir, "dkms/kpreload-fake/1.2/build/make.log"), "cc ...\nfake.c:3:1: error: expected ';'\n")
			return &runner.Error{Cmd: c, Err: exitStatus(10), Tail: []string{"Error! Bad return status"}}
		}, wantErr: "dkms build of kpreload-fake/1.2 for kernel " + kver + " failed: exit status 10: fake.c:3:1: error: expected ';' (log: ",
			check: func(t *testing.T, err error) {
				var be *BuildError
				if !errors.As(err, &be) || be.ExitCode != 10 || errors.Is(err, ErrBuildExclusive) {
					t.Errorf("error = %#v, want a *BuildError with exit code 10", err)
				}
			}},
		{name: "excluded", sandbox: func(_ context.Context, c runner.Cmd) error {
			return &runner.Error{Cmd: c, Err: exitStatus(77)}
		}, wantErr: "failed: " + ErrBuildExclusive.Error(),
			check: func(t *testing.T, err error) {
				if !errors.Is(err, ErrBuildExclusive) {
					t.Errorf("error = %v, want ErrBuildExclusive", err)
				}
			}},
		{name: "did not start", sandbox: func(_ context.Context, c runner.Cmd) error {
			return &runner.Error{Cmd: c, Err: errors.New("fork/exec /usr/bin/unshare: permission denied")}
		}, wantErr: "dkms build of kpreload-fake/1.2 for kernel " + kver + ": unshare --mount"},
		{name: "cancelled", sandbox: func(ctx context.Context, c runner.Cmd) error {
			<-ctx.Done()
			return fmt.Errorf("unshare: %w", ctx.Err())
		}, wantErr: "dkms build of kpreload-fake/1.2 for kernel " + kver + ": context canceled",
			check: func(t *testing.T, err error) {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("error = %v, want context.Canceled", err)
				}
			}},
		{name: "no unshare", missing: []string{"unshare"}, wantErr: "unshare (util-linux) is not installed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kroot, headers := fakeKernel(t, kver)
			root := fakeBuildRoot(t)
			work := filepath.Join(t.TempDir(), "work")
			f := &fakeRunner{missing: tt.missing, sandbox: tt.sandbox}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.name == "cancelled" {
				cancel()
			}
			req := BuildRequest{SourceDir: src, Kernel: kver, KernelSourceDir: headers, WorkDir: work,
				Arch: "x86_64", Jobs: 3, Root: root, CC: "", Env: []string{"EXTRA=1"}}
			res, err := (&DKMS{Runner: f}).Build(ctx, req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Build = %v, %v; want an error containing %q", res, err, tt.wantErr)
				}
				if tt.check != nil {
					tt.check(t, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if got, want := res.Modules, []string{filepath.Join(moduleDir(work), "fake.ko")}; !slices.Equal(got, want) {
				t.Errorf("Modules = %v, want %v", got, want)
			}
			if log, err := os.ReadFile(res.DKMSLogPath); err != nil || string(log) != "dkms says hello\n" {
				t.Errorf("dkms log %s = %q, %v; want what dkms wrote", res.DKMSLogPath, log, err)
			}
			if len(f.cmds) != 1 {
				t.Fatalf("ran %d commands, want only the sandbox: %v", len(f.cmds), f.cmds)
			}
			c := f.cmds[0]
			r := root.Dir
			kdir := SandboxKernel + "/usr/src/linux-headers-" + kver
			want := []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", sandboxScript, "kpreload-dkms", r,
				"proc", "proc", r + "/proc", "bind", "/dev", r + "/dev", "tmpfs", "tmpfs", r + "/tmp",
				"ro", kroot, work + "/src/kpreload-kernel",
				"bind", work + "/src", r + "/usr/src",
				"bind", work + "/dkms", r + "/var/lib/dkms",
				"--", DefaultPath, "build", "-m", "kpreload-fake", "-v", "1.2", "-k", kver, "--arch", "x86_64",
				"--dkmstree", "/var/lib/dkms", "--sourcetree", "/usr/src", "--installtree", "/lib/modules",
				"--kernelsourcedir", kdir, "-j", "3"}
			if c.Name != "unshare" || !slices.Equal(c.Args, want) {
				t.Errorf("command:\ngot  %s %q\nwant unshare %q", c.Name, c.Args, want)
			}
			if !c.OnlyEnv || c.Dir != work || !c.Combined {
				t.Errorf("command OnlyEnv %v Dir %q Combined %v, want true %q true", c.OnlyEnv, c.Dir, c.Combined, work)
			}
			if got, want := c.Env, sandboxEnv("", []string{"SYSSRC=" + kdir, "SYSOUT=" + kdir, "EXTRA=1"}); !slices.Equal(got, want) {
				t.Errorf("environment:\ngot  %q\nwant %q", got, want)
			}
		})
	}
}

// TestHostChecksThroughRunner checks that on the host Build asks the runner
// for dkms's version and the tools, and that a failing compiler's error
// names the command and quotes its output.
func TestHostChecksThroughRunner(t *testing.T) {
	f := &fakeRunner{}
	v, err := (&DKMS{Runner: f}).Version(context.Background(), nil)
	if err != nil || v != "dkms-3.0.10" {
		t.Errorf("Version = %q, %v; want dkms-3.0.10", v, err)
	}
	if err := checkDKMSVersion(f, DefaultPath); err != nil {
		t.Errorf("checkDKMSVersion: %v", err)
	}
	_, err = compilerVersion(f, "gcc-12", "gcc-12 (Debian 12.2.0-14) 12.2.0")
	if err == nil || !strings.Contains(err.Error(), "gcc-12 --version: gcc-12 --version: exit status 1: fake: unexpected command") {
		t.Errorf("compilerVersion of a failing compiler: %v, want its command line and output", err)
	}
	f.missing = []string{"gcc-99"}
	if _, err := compilerVersion(f, "gcc-99", "gcc-99 (x)"); err == nil || !strings.Contains(err.Error(), "install Debian package gcc-99") {
		t.Errorf("compilerVersion of a missing compiler: %v", err)
	}
	var got []string
	for _, c := range f.cmds {
		got = append(got, c.String())
	}
	if want := []string{DefaultPath + " --version", DefaultPath + " --version", "gcc-12 --version"}; !slices.Equal(got, want) {
		t.Errorf("ran %q, want %q", got, want)
	}
}
