package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestScratchInMemory runs scripts/scratch-in-memory.sh as `make unit` does:
// the command sees $TMPDIR on a tmpfs of its own (as root, where a mount
// namespace can be made) or, where $TMPDIR is a tmpfs already, unchanged;
// the command's exit status is the script's; and nothing is left where
// $TMPDIR was: neither a mount nor its mount point.
func TestScratchInMemory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the unit tier runs as root (podman's CDI test needs it): run the tests as root")
	}
	script := filepath.Join(testenv.RepoRoot(t), "scripts", "scratch-in-memory.sh")
	for _, tc := range []struct {
		name     string
		cmd      string
		wantCode int
	}{
		{"success", `stat -f -c %T "$TMPDIR"; echo "$TMPDIR"; touch "$TMPDIR/made"`, 0},
		{"failure", `stat -f -c %T "$TMPDIR"; echo "$TMPDIR"; exit 7`, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outer := t.TempDir()
			mountsBefore := scratchMounts(t)
			cmd := exec.Command(script, "sh", "-c", tc.cmd)
			cmd.Env = append(os.Environ(), "TMPDIR="+outer)
			out, err := cmd.Output()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode {
				t.Errorf("exit status %d, want %d", code, tc.wantCode)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 2 {
				t.Fatalf("the command said %q, want its filesystem type and $TMPDIR", out)
			}
			if got, want := lines[0], "tmpfs"; got != want {
				t.Errorf("the command's $TMPDIR is on %s, want %s", got, want)
			}
			if outerFS, _ := exec.Command("stat", "-f", "-c", "%T", outer).Output(); strings.TrimSpace(string(outerFS)) != "tmpfs" {
				// A disk filesystem: the script made a directory in it for the tmpfs.
				if !strings.HasPrefix(lines[1], outer+"/kpreload-scratch.") {
					t.Errorf("the command's $TMPDIR is %s, want a directory under %s", lines[1], outer)
				}
			}
			left, err := os.ReadDir(outer)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range left {
				if strings.HasPrefix(e.Name(), "kpreload-scratch.") {
					t.Errorf("left in the outer $TMPDIR: %s", e.Name())
				}
			}
			if got, want := scratchMounts(t), mountsBefore; got != want {
				t.Errorf("%d scratch tmpfs mounted here after, want %d as before", got, want)
			}
		})
	}
}

// scratchMounts counts the tmpfs mounts scratch-in-memory.sh made that this
// process sees (one where the test itself runs under `make unit`).
func scratchMounts(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "kpreload-scratch ")
}
