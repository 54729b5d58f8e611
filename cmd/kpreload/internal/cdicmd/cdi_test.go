package cdicmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
	"github.com/kpreload/kpreload/kmodcache/names"
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
				done <- cli.Execute([]string{"cdi", "generate", "--root", root, "--hook-path", "/usr/bin/kpreload"}, &out, &errOut)
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

// TestCDIRefusesReadyVersion runs cdi generate and cdi refresh on a kpreload
// image whose ready record names a version that is a path: generate fails
// naming the record, the field and the value and writes no spec; refresh
// removes the spec it had written. A version of "../../../../etc" mounted the
// host's /etc into every container, ".." its /lib/firmware.
func TestCDIRefusesReadyVersion(t *testing.T) {
	const version = "580.159.04"
	for _, bad := range []string{"../../../../etc", ".."} {
		t.Run(bad, func(t *testing.T) {
			root := cdiTree(t)
			for _, d := range []string{"opt/kpreload/drivers/" + version + "/usr/lib/x86_64-linux-gnu", "lib/firmware/nvidia/" + version, "etc"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			run := filepath.Join(root, activate.RunDir)
			if err := activate.Point(run, root, activate.DriversDir, version); err != nil {
				t.Fatal(err)
			}
			if err := activate.MarkReady(run, activate.Ready{Driver: "nvidia", Version: version, By: "init"}); err != nil {
				t.Fatal(err)
			}
			spec := filepath.Join(root, cdispec.DefaultSpecFile)
			if code, _, errOut := runCLI("cdi", "refresh", "--root", root); code != 0 {
				t.Fatalf("cdi refresh of a good record: exit %d: %s", code, errOut)
			}
			if _, err := os.Stat(spec); err != nil {
				t.Fatalf("cdi refresh of a good record wrote no spec: %v", err)
			}

			ready := activate.ReadyPath(run)
			if err := os.WriteFile(ready, []byte(`{"format":1,"driver":"nvidia","version":"`+bad+`","modules":[],"by":"init"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "nvidia.yaml")
			code, stdout, errOut := runCLI("cdi", "generate", "--root", root, "-o", out)
			if code == 0 {
				t.Fatalf("cdi generate accepted version %q: %s", bad, errOut)
			}
			for _, want := range []string{ready, `version "` + bad + `" starts with '.'`, names.Allowed} {
				if !strings.Contains(errOut, want) {
					t.Errorf("cdi generate: stderr %q does not say %s", errOut, want)
				}
			}
			if _, err := os.Stat(out); err == nil || stdout != "" {
				t.Errorf("cdi generate wrote a spec (%s, stdout %q)", out, stdout)
			}
			code, _, errOut = runCLI("cdi", "refresh", "--root", root)
			if code == 0 || !strings.Contains(errOut, `version "`+bad+`"`) {
				t.Errorf("cdi refresh: exit %d, stderr %q; want 1 naming the version", code, errOut)
			}
			if _, err := os.Stat(spec); err == nil {
				t.Errorf("cdi refresh left %s in place", spec)
			}
		})
	}
}

// TestCDIGenerateHelpExamples runs the examples of `kpreload cdi generate
// --help` exactly as written, in a directory holding ./h200-root (cdiTree: the
// real H200 VM's /proc captures and a driver library): the spec names the
// H200 by index, by its real UUID and as all.
func TestCDIGenerateHelpExamples(t *testing.T) {
	root := cdiTree(t)
	t.Chdir(t.TempDir())
	if err := os.Symlink(root, "h200-root"); err != nil {
		t.Fatal(err)
	}
	lines := cli.ExamplesOf(t, "kpreload cdi generate")
	if len(lines) != 2 {
		t.Fatalf("cdi generate examples: %q, want two", lines)
	}
	out := cli.RunLine(t, lines[0])
	for _, want := range []string{"kind: nvidia.com/gpu", "name: \"0\"", "name: all", "/dev/nvidia0", "580.159.04"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s printed\n%s\nwant %q in it", lines[0], out, want)
		}
	}
	cli.RunLine(t, lines[1])
	b, err := os.ReadFile("h200-spec.json")
	var spec struct {
		Kind    string `json:"kind"`
		Devices []struct {
			Name string `json:"name"`
		} `json:"devices"`
	}
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	var names []string
	for _, d := range spec.Devices {
		names = append(names, d.Name)
	}
	if err != nil || spec.Kind != "nvidia.com/gpu" || !strings.HasPrefix(strings.Join(names, " "), "0 GPU-7843b487-7c5d-bf32-e87d-73ef066a19c5 all") {
		t.Errorf("%s wrote %v: kind %q, devices %q", lines[1], err, spec.Kind, names)
	}
}
