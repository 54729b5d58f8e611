package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// nobody is the uid and gid the privilege test runs kpreload as.
const nobody = 65534

// TestNeedsRootAsNobody runs a built kpreload as uid 65534 (the tests run as
// root): each command that changes the system says in one line that it needs
// root, before any work, and leaves the system as it was; the same commands
// on a directory nobody owns, or a dry run, are not stopped by the check.
func TestNeedsRootAsNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run kpreload as another user")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // nobody runs the binary there
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := testenv.GoBuildStatic(t, dir, "kpreload", "./cmd/kpreload")
	rootCache := filepath.Join(dir, "root-cache") // root's, 0755: nobody may not write it
	ownCache := filepath.Join(dir, "own-cache")   // nobody's
	for _, d := range []string{rootCache, ownCache} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(ownCache, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(dir, "etc", "cdi") // stands for /etc/cdi: root's
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		c := exec.Command(bin, args...)
		c.Dir = dir
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := c.CombinedOutput()
		if c.ProcessState == nil {
			t.Fatalf("kpreload %s: %v", strings.Join(args, " "), err)
		}
		return c.ProcessState.ExitCode(), string(out)
	}
	refused := []struct {
		args []string
		want string
	}{
		{[]string{"install"}, "kpreload: install needs root (it writes /boot and the module cache): run it with sudo\n"},
		{[]string{"install", "--stage", "--image", "debian.raw", "--recipe", "testdriver"}, "kpreload: install needs root (it attaches and mounts the image): run it with sudo\n"},
		{[]string{"kernel-hook", "refresh"}, "kpreload: kernel-hook needs root (it writes /boot and the module cache): run it with sudo\n"},
		{[]string{"switch", "550"}, "kpreload: switch needs root (it unloads and loads kernel modules; --dry-run only takes the decision): run it with sudo\n"},
		{[]string{"cache", "add", "--cache", rootCache, "--driver", "x", "--version", "1", "x.ko"}, "kpreload: cache add needs root (it writes the module cache " + rootCache + "): run it with sudo\n"},
		{[]string{"cache", "rm", "--cache", rootCache, "x-1"}, "kpreload: cache rm needs root (it writes the module cache " + rootCache + "): run it with sudo\n"},
		{[]string{"keys", "rotate", "--cache", rootCache}, "kpreload: keys rotate needs root (it writes the module cache " + rootCache + "): run it with sudo\n"},
		{[]string{"cache", "verify", "--cache", rootCache, "--repair"}, "kpreload: cache verify needs root (it writes the module cache " + rootCache + "): run it with sudo\n"},
		{[]string{"user-data", "apply"}, "kpreload: user-data apply needs root (it switches the driver and writes the module cache; --dry-run only takes the decision): run it with sudo\n"},
		{[]string{"k8s", "refresh", "--root", dir}, "kpreload: k8s refresh needs root (it writes " + filepath.Join(dir, "etc", "kpreload", "k8s") + "): run it with sudo\n"},
		{[]string{"copy-in", "--root", rootCache, dir}, "kpreload: copy-in needs root (it writes into " + rootCache + "): run it with sudo\n"},
		{[]string{"cdi", "generate", "-o", filepath.Join(etc, "kpreload-nvidia.yaml")}, "kpreload: cdi generate needs root (it writes " + filepath.Join(etc, "kpreload-nvidia.yaml") + "): run it with sudo\n"},
		{[]string{"cdi", "refresh", "--root", dir}, "kpreload: cdi refresh needs root (it writes " + filepath.Join(dir, "/var/run/cdi/kpreload-nvidia.yaml") + "): run it with sudo\n"},
		{[]string{"xorg", "-o", filepath.Join(dir, "etc", "X11", "xorg.conf")}, "kpreload: xorg needs root (it writes " + filepath.Join(dir, "etc", "X11", "xorg.conf") + "): run it with sudo\n"},
	}
	for _, tt := range refused {
		code, out := run(tt.args...)
		if code == 0 || out != tt.want {
			t.Errorf("as uid %d, kpreload %s: exit %d:\n%s\nwant a non-zero exit and only\n%s", nobody, strings.Join(tt.args, " "), code, out, tt.want)
		}
	}
	if entries, _ := os.ReadDir(rootCache); len(entries) != 0 {
		t.Errorf("refused commands wrote %s: %v", rootCache, entries)
	}
	// Not stopped by the check: they fail, or not, for their own reasons.
	for _, args := range [][]string{
		{"cache", "add", "--cache", ownCache, "--driver", "x", "--version", "1", "x.ko"},
		{"keys", "show", "--cache", rootCache},
		{"cache", "verify", "--cache", rootCache},
		{"switch", "550", "--dry-run", "--cache", rootCache},
		{"cdi", "generate"},
	} {
		if _, out := run(args...); strings.Contains(out, "needs root") {
			t.Errorf("as uid %d, kpreload %s: %s\nwant no root check (it writes nothing of root's)", nobody, strings.Join(args, " "), out)
		}
	}
}
