package dkms

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildReproducible builds the test driver twice for each test kernel,
// in work directories at different depths and names, and wants the same
// module bytes: the sandbox gives every build the same paths, so nothing of
// the work directory (debug information, hence the build id) differs.
func TestBuildReproducible(t *testing.T) {
	requireTools(t)
	for _, kver := range testKernels {
		t.Run(kver, func(t *testing.T) {
			var mods [2][]byte
			for i, work := range []string{
				filepath.Join(t.TempDir(), "work"),
				filepath.Join(t.TempDir(), "a", "much", "deeper", "work-directory"),
			} {
				// The build in <temp>/work is TestBuildTestDriver's, when it ran.
				if b, ok := plainBuilds.Load(kver); ok && i == 0 {
					mods[i] = b.([]byte)
					t.Logf("the build in <temp>/work is TestBuildTestDriver's")
					continue
				}
				res, err := build(t, testDriverDir(t), kver, func(r *BuildRequest) { r.WorkDir = work })
				if err != nil {
					t.Fatalf("Build(testdriver, %s) in %s: %v", kver, work, err)
				}
				if len(res.Modules) != 1 || !strings.HasSuffix(res.Modules[0], "/kpreload_edu.ko") {
					t.Fatalf("Build(testdriver, %s).Modules = %v, want one plain kpreload_edu.ko", kver, res.Modules)
				}
				if mods[i], err = os.ReadFile(res.Modules[0]); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(mods[0], mods[1]) {
				t.Errorf("two builds of the test driver for %s in different work directories differ (%d and %d bytes; build ids %s and %s)",
					kver, len(mods[0]), len(mods[1]), buildID(t, mods[0]), buildID(t, mods[1]))
			}
		})
	}
	// The sandbox's mounts live in its own namespace only.
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), "kpreload-kernel") {
		t.Errorf("the dkms sandbox's mounts leaked into the host's mount namespace:\n%s", b)
	}
}

// buildID returns readelf's account of a module's .note.gnu.build-id.
func buildID(t *testing.T, ko []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "m.ko")
	if err := os.WriteFile(f, ko, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("readelf", "-n", f).Output()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "Build ID") {
			return strings.TrimSpace(line)
		}
	}
	return "(none)"
}

func TestSandboxMounts(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/src", "var/lib/dkms", "etc/dkms"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := sandboxMounts(&fakeRunner{}, root, "/w", "/k")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.kind+" "+m.src+" "+strings.TrimPrefix(m.dst, root))
	}
	want := []string{
		"proc proc /proc", "bind /dev /dev", "tmpfs tmpfs /tmp",
		"ro /k /w/src/kpreload-kernel", // before /w/src covers /usr/src
		"bind /w/src /usr/src",
		"bind /w/dkms /var/lib/dkms",
		"bind /w/etc /etc/dkms", // present in this root
		// no lib/modules in this root: nothing to hide, no mount
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sandboxMounts = \n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	if err := os.RemoveAll(filepath.Join(root, "var/lib/dkms")); err != nil {
		t.Fatal(err)
	}
	if _, err := sandboxMounts(&fakeRunner{}, root, "/w", "/k"); err == nil || !strings.Contains(err.Error(), "/var/lib/dkms") {
		t.Errorf("sandboxMounts without /var/lib/dkms: err = %v, want one naming /var/lib/dkms", err)
	}
}

// TestInKernel: a path inside the unpacked kernel maps into the sandbox, one
// outside it is refused, whether each side is spelled relative to the working
// directory (a relative $KPRELOAD_CACHE) or absolute.
func TestInKernel(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		root, p, want string
		ok            bool
	}{
		{"/c/k", "/c/k/usr/src/linux-headers-6.1", SandboxKernel + "/usr/src/linux-headers-6.1", true},
		{"/c/k", "/c/k", SandboxKernel, true},
		{"/c/k", "/c/kx/usr", "", false},
		{"/c/k", "/elsewhere", "", false},
		{"/c/k", "/c/k/../x", "", false},
		// Relative and absolute: the same answers.
		{filepath.Join(wd, "cache/kernels/6.1"), "cache/kernels/6.1/usr/src/linux-headers-6.1-common", SandboxKernel + "/usr/src/linux-headers-6.1-common", true},
		{"cache/kernels/6.1", filepath.Join(wd, "cache/kernels/6.1/usr/src/linux-headers-6.1"), SandboxKernel + "/usr/src/linux-headers-6.1", true},
		{"cache/kernels/6.1", "cache/kernels/6.1/usr/src", SandboxKernel + "/usr/src", true},
		{"cache/kernels/6.1", "./cache/kernels/6.1", SandboxKernel, true},
		{"cache/kernels/6.1", filepath.Join(wd, "cache/kernels/6.12/usr"), "", false},
		{filepath.Join(wd, "cache/kernels/6.1"), "cache/kernels/6.12/usr", "", false},
		{"cache/kernels/6.1", "/usr/src", "", false},
	}
	for _, tt := range tests {
		got, err := inKernel(tt.root, tt.p)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("inKernel(%q, %q) = %q, %v; want %q, ok %t", tt.root, tt.p, got, err, tt.want, tt.ok)
		}
	}
}
