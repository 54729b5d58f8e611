package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/internal/runner/runnertest"
	"github.com/kpreload/kpreload/builder/internal/sandbox"
	"github.com/kpreload/kpreload/builder/internal/sandbox/sandboxtest"
)

// TestArgs: bwrap's command line binds the root as /, gives it its own
// namespaces, /proc, /dev, /run and /sys, drops every capability but those
// named, and passes only PATH and the Spec's environment.
func TestArgs(t *testing.T) {
	base := []string{"--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"}
	mounts := []string{"--bind", "/r", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run"}
	env := []string{"--chdir", "/", "--clearenv", "--setenv", "PATH", sandbox.Path}
	cat := func(parts ...[]string) []string { return slices.Concat(parts...) }
	for _, c := range []struct {
		name string
		spec sandbox.Spec
		want []string
	}{
		{"plain", sandbox.Spec{Root: "/r", Argv: []string{"ldconfig"}},
			cat(base, mounts, []string{"--tmpfs", "/sys", "--remount-ro", "/sys"}, env, []string{"--", "ldconfig"})},
		{"grub-probe's devices", sandbox.Spec{Root: "/r", Argv: []string{"update-grub"}, Devices: []string{"/dev/loop3"}, HostSys: true},
			cat(base, mounts, []string{"--dev-bind", "/dev/loop3", "/dev/loop3", "--ro-bind", "/sys", "/sys"}, env, []string{"--", "update-grub"})},
		{"caps, links, env", sandbox.Spec{Root: "/r", Argv: []string{"grub-mkconfig", "-o", "/boot/grub/grub.cfg"}, Caps: []string{"CAP_CHOWN"},
			Links: []sandbox.Link{{Path: "/dev/disk/by-uuid/u", Target: "../../x"}}, Env: []string{"A=b=c"}},
			cat(base, []string{"--cap-add", "CAP_CHOWN"}, mounts, []string{"--tmpfs", "/sys", "--remount-ro", "/sys", "--symlink", "../../x", "/dev/disk/by-uuid/u"},
				env, []string{"--setenv", "A", "b=c", "--", "grub-mkconfig", "-o", "/boot/grub/grub.cfg"})},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sandbox.Args(c.spec); !slices.Equal(got, c.want) {
				t.Errorf("Args =\n%q\nwant\n%q", got, c.want)
			}
			root, argv, ok := sandboxtest.Parse(sandbox.Cmd(c.spec))
			if !ok || root != c.spec.Root || !slices.Equal(argv, c.spec.Argv) {
				t.Errorf("Parse = %q %q %v, want the root and the program back", root, argv, ok)
			}
		})
	}
}

// TestRunNoBwrap: without bubblewrap nothing runs, and the error says what
// to install.
func TestRunNoBwrap(t *testing.T) {
	rec := &runnertest.Recorder{Missing: []string{sandbox.Bwrap}}
	_, err := sandbox.Run(context.Background(), rec, sandbox.Spec{Root: "/r", Argv: []string{"update-grub"}})
	if !errors.Is(err, sandbox.ErrNoBwrap) || !strings.Contains(err.Error(), "apt-get install bubblewrap") || !strings.Contains(err.Error(), "update-grub in /r") {
		t.Errorf("Run without bwrap: %v, want ErrNoBwrap naming the program and the package", err)
	}
	if got := rec.Ran(""); len(got) != 0 {
		t.Errorf("ran %q without bwrap", got)
	}
}

// TestRunEscape runs the hostile program (the chroot escape, absolute host
// paths, /proc/1/root) in a real sandbox: it runs and writes nothing on the
// host, even when it keeps CAP_SYS_CHROOT (the root is pivoted in, so
// chroot's escape leads back to the root), and it sees its own pid
// namespace and no network but loopback.
func TestRunEscape(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs bwrap as kpreload does, as root: it needs root")
	}
	for _, caps := range [][]string{nil, {"CAP_SYS_CHROOT"}} {
		t.Run(strings.Join(append([]string{"caps"}, caps...), "-"), func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			esc := sandboxtest.Plant(t, root, "usr/sbin/update-grub")
			out, err := sandbox.Run(context.Background(), runner.Default, sandbox.Spec{Root: root, Argv: []string{"update-grub"}, Caps: caps})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("the program's log:\n%s", out)
			esc.Check(t, "update-grub")
			for _, want := range []string{"\npid 2\n", "\ninterfaces lo\n", "\nblock devices \n"} {
				if !strings.Contains("\n"+string(out), want) {
					t.Errorf("the program's log lacks %q: want its own pid namespace, no network but loopback, no block device", strings.TrimSpace(want))
				}
			}
			if caps != nil && !strings.Contains(string(out), "chroot escape: <nil>") {
				t.Errorf("with CAP_SYS_CHROOT kept the chroot itself should succeed (and stay in the root): %s", out)
			}
		})
	}
}
