package dkms

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// testKernels are the kernels of scripts/lib.sh's default matrix.
var testKernels = []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"}

// repoRoot returns the repository root (two levels above this package).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func testDriverDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(repoRoot(t), "recipes", "testdriver")
}

// kernelCache is where scripts/kernels.sh unpacks kernels.
func kernelCache() string {
	if c := os.Getenv("KPRELOAD_CACHE"); c != "" {
		return c
	}
	return "/var/cache/kpreload"
}

// headersDir returns the unpacked headers of kver, fetching the kernel with
// scripts/kernels.sh (idempotent) when it is not there yet.
func headersDir(t *testing.T, kver string) string {
	t.Helper()
	root := filepath.Join(kernelCache(), "kernels", kver)
	if _, err := os.Stat(filepath.Join(root, ".complete")); err != nil {
		script := filepath.Join(repoRoot(t), "scripts", "kernels.sh")
		t.Logf("kernel %s missing, running %s %s", kver, script, kver)
		out, err := exec.Command(script, kver).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", script, kver, err, out)
		}
	}
	return filepath.Join(root, "usr", "src", "linux-headers-"+kver)
}

// requireTools fails the test, with how to install them, when the programs
// the real builds need are missing.
func requireTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{DefaultPath, "/usr/sbin/modinfo", "make", "gcc-12", "pahole", "readelf"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (%v): install the build dependencies with scripts/deps.sh (dkms, kmod, make, gcc-12, dwarves, binutils)", tool, err)
		}
	}
}

// copyTree copies the regular files of src into dst (flat enough for a
// driver source tree).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

// editFile replaces old with new in path, failing if old is not there.
func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s does not contain %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
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
