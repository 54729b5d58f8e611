package dkms

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/testsupport/buildtest"
)

// testKernels are the kernels of scripts/lib.sh's default matrix.
var testKernels = []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"}

func testDriverDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver")
}

// headersDir returns the unpacked headers of kver, fetching the kernel with
// scripts/kernels.sh (idempotent) when it is not there yet.
func headersDir(t *testing.T, kver string) string {
	t.Helper()
	return filepath.Join(testenv.KernelTree(t, kver), "usr", "src", "linux-headers-"+kver)
}

// systemTrees are the host paths an isolated build must never write.
var systemTrees = []string{"/var/lib/dkms", "/lib/modules", "/usr/lib/modules", "/usr/src"}

// snapshotSystem lists every entry of systemTrees with size and mtime.
func snapshotSystem(t *testing.T) []string {
	t.Helper()
	var snap []string
	for _, root := range systemTrees {
		if _, err := os.Lstat(root); err != nil {
			snap = append(snap, root+" <absent>")
			continue
		}
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			snap = append(snap, fmt.Sprintf("%s %d %d", path, info.Size(), info.ModTime().UnixNano()))
			return nil
		})
		if err != nil {
			t.Fatalf("snapshot %s: %v", root, err)
		}
	}
	return snap
}

// checkUntouched fails the test when the system trees changed since before.
func checkUntouched(t *testing.T, before []string) {
	t.Helper()
	after := snapshotSystem(t)
	for _, s := range after {
		if !slices.Contains(before, s) {
			t.Errorf("system tree changed by the build: new or modified %s", s)
		}
	}
	for _, s := range before {
		if !slices.Contains(after, s) {
			t.Errorf("system tree changed by the build: removed or modified %s", s)
		}
	}
}

// modinfo returns "modinfo -F field path".
func modinfo(t *testing.T, path, field string) string {
	t.Helper()
	out, err := exec.Command("/usr/sbin/modinfo", "-F", field, path).Output()
	if err != nil {
		t.Fatalf("modinfo -F %s %s: %v", field, path, err)
	}
	return strings.TrimSpace(string(out))
}

func requireTools(t *testing.T)                    { buildtest.RequireTools(t, DefaultPath) }
func copyTree(t *testing.T, src, dst string)       { buildtest.CopyTree(t, src, dst) }
func editFile(t *testing.T, path, old, new string) { buildtest.EditFile(t, path, old, new) }
