package cdispec

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/gpu/activate"
)

// eduTree makes a kpreload image tree with the test driver version active:
// its userspace (library and program), two misc devices in sysfs.
func eduTree(t *testing.T, version string) string {
	t.Helper()
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	drv := filepath.Join(activate.DriversDir, version)
	write(filepath.Join(drv, "usr/lib/x86_64-linux-gnu/libkpreload_edu.so."+version), "lib")
	write(filepath.Join(drv, "usr/bin/kpreload-edu-version"), "prog")
	write("sys/class/misc/kpreload-edu1/dev", "10:124\n")
	write("sys/class/misc/kpreload-edu0/dev", "10:125\n")
	write("sys/class/misc/kpreload-edux/dev", "10:1\n") // not a device of ours
	run := filepath.Join(root, activate.RunDir)
	if err := activate.Point(run, root, activate.DriversDir, version); err != nil {
		t.Fatal(err)
	}
	if err := activate.MarkReady(run, activate.Ready{Driver: EduDriver, Version: version}); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestGenerateEdu(t *testing.T) {
	root := eduTree(t, "2.0.0")
	spec, found, err := GenerateEdu(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Kind != EduKind || len(spec.Devices) != 3 || spec.Devices[0].Name != "0" || spec.Devices[2].Name != "all" {
		t.Fatalf("spec kind %s devices %+v", spec.Kind, spec.Devices)
	}
	if n := spec.Devices[0].ContainerEdits.DeviceNodes[0]; n.Path != "/dev/kpreload-edu0" || n.Major != 10 || n.Minor != 125 || n.Type != "c" {
		t.Errorf("device 0 node %+v, want /dev/kpreload-edu0 c 10:125", n)
	}
	if got := len(spec.Devices[2].ContainerEdits.DeviceNodes); got != 2 {
		t.Errorf("all has %d nodes, want 2", got)
	}
	want := map[string]string{
		"/opt/kpreload/drivers/2.0.0/usr/lib/x86_64-linux-gnu/libkpreload_edu.so.2.0.0": "/usr/lib/x86_64-linux-gnu/libkpreload_edu.so.2.0.0",
		"/opt/kpreload/drivers/2.0.0/usr/bin/kpreload-edu-version":                      "/usr/bin/kpreload-edu-version",
	}
	for _, m := range spec.ContainerEdits.Mounts {
		if want[m.HostPath] != m.ContainerPath {
			t.Errorf("mount %s -> %s unexpected", m.HostPath, m.ContainerPath)
		}
		delete(want, m.HostPath)
	}
	if len(want) != 0 || len(spec.ContainerEdits.Hooks) != 1 || found.Version != "2.0.0" {
		t.Errorf("missing mounts %v, hooks %+v, found %+v", want, spec.ContainerEdits.Hooks, found)
	}
	data, err := Marshal(spec, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Validate(data, false); err != nil {
		t.Errorf("the CDI library refuses the spec: %v", err)
	}
}

// TestRefreshActive writes the active kind's spec and removes the other.
func TestRefreshActive(t *testing.T) {
	root := eduTree(t, "1.0.0")
	stale := filepath.Join(root, DefaultSpecFile)
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, Mark([]byte("stale")), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := RefreshActive(root, Options{})
	if err != nil || res.Written != EduSpecFile {
		t.Fatalf("RefreshActive = %+v, %v; want %s", res, err, EduSpecFile)
	}
	if _, err := ValidateFile(filepath.Join(root, EduSpecFile)); err != nil {
		t.Errorf("written spec: %v", err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the NVIDIA spec of no active driver is still there: %v", err)
	}
	if err := activate.ClearReady(filepath.Join(root, activate.RunDir)); err != nil {
		t.Fatal(err)
	}
	if res, err := RefreshActive(root, Options{}); err != nil || res.Written != "" {
		t.Errorf("RefreshActive with no active driver = %+v, %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(root, EduSpecFile)); !os.IsNotExist(err) {
		t.Errorf("the spec outlived the driver: %v", err)
	}
}
