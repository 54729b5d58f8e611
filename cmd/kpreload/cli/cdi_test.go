package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// cdiTree builds a host root from the H200 VM's /proc captures, with the MIG
// capabilities registered and the driver's library under /usr/lib64.
func cdiTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"proc/driver/nvidia/capabilities/mig/config":  "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n",
		"proc/driver/nvidia/capabilities/mig/monitor": "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
		"usr/lib64/libcuda.so.580.159.04":             "elf",
	}
	for p, c := range testenv.H200Proc(t) {
		files[p] = c
	}
	for p, c := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestCDIGenerateRoot runs cdi generate on trees: the MIG capabilities come
// only with their own devices; a root that breaks the reading rules (a link
// to the host's /proc, a version file that is a FIFO or linked out of the
// root) is an error naming the file, never the host's data or a hang.
func TestCDIGenerateRoot(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, root, outside string)
		wantErr string // in stderr after the root; "" for success
	}{
		{"MIG capabilities on request", func(t *testing.T, root, outside string) {}, ""},
		{"proc linked to the host's proc", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, "", filepath.Join(root, "proc"), func(p string) error { return os.Symlink("/proc", p) })
		}, "/proc/devices: too many levels of symbolic links"},
		{"version is a FIFO", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, "", filepath.Join(root, "proc/driver/nvidia/version"), func(p string) error { return unix.Mkfifo(p, 0o644) })
		}, "/proc/driver/nvidia/version: not a regular file"},
		{"version linked outside", func(t *testing.T, root, outside string) {
			host := filepath.Join(outside, "version")
			if err := os.WriteFile(host, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  999.99.99  (host)\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			inroottest.Remake(t, "", filepath.Join(root, "proc/driver/nvidia/version"), func(p string) error { return os.Symlink(host, p) })
		}, "/proc/driver/nvidia/version: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := cdiTree(t)
			tt.setup(t, root, t.TempDir())
			var out, errOut bytes.Buffer
			done := make(chan int)
			go func() {
				done <- Execute([]string{"cdi", "generate", "--root", root, "--hook-path", "/usr/bin/kpreload"}, &out, &errOut)
			}()
			var code int
			select {
			case code = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("cdi generate hung")
			}
			if strings.Contains(out.String()+errOut.String(), "999.99.99") {
				t.Errorf("the host's version reached the output:\n%s%s", out.String(), errOut.String())
			}
			if tt.wantErr != "" {
				if want := root + tt.wantErr; code != 1 || !strings.Contains(errOut.String(), want) {
					t.Errorf("cdi generate: exit %d, stderr %q; want 1 and %q", code, errOut.String(), want)
				}
				return
			}
			if code != 0 {
				t.Fatalf("cdi generate: exit %d: %s", code, errOut.String())
			}
			spec, err := cdispec.Validate(out.Bytes(), false)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range spec.ContainerEdits.DeviceNodes {
				if strings.HasPrefix(n.Path, "/dev/nvidia-caps/") {
					t.Errorf("shared edits give every container %s", n.Path)
				}
			}
			got := map[string]string{}
			for _, d := range spec.Devices {
				for _, n := range d.ContainerEdits.DeviceNodes {
					got[d.Name] += n.Path
				}
			}
			if got[cdispec.DeviceMIGConfig] != "/dev/nvidia-caps/nvidia-cap1" || got[cdispec.DeviceMIGMonitor] != "/dev/nvidia-caps/nvidia-cap2" || got["all"] != "/dev/nvidia0" {
				t.Errorf("device nodes %v; want mig-config cap1, mig-monitor cap2, all nvidia0", got)
			}
			if want := "(only with nvidia.com/gpu=mig-config)"; !strings.Contains(errOut.String(), want) {
				t.Errorf("stderr %q does not say %q", errOut.String(), want)
			}
		})
	}
}
