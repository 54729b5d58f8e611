package activate

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kpreload/kpreload/gpu/devnodes"
)

// TestPublish checks the one activation /init and switch share: device nodes
// for NVIDIA drivers only, the userspace link when the image has the
// version's userspace, the readiness record in every case.
func TestPublish(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestPublish makes a device node (mknod): run the tests as root")
	}
	tests := []struct {
		name, driver, version string
		wantNodes             bool
		wantUserspace         bool
	}{
		{"NVIDIA with userspace", "nvidia", "1.0", true, true},
		{"NVIDIA without userspace", "nvidia", "9.9", true, false},
		{"another driver: no nodes", "kpreload-edu", "1.0", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			run, root, dev := filepath.Join(dir, "run"), filepath.Join(dir, "root"), filepath.Join(dir, "dev")
			if err := os.MkdirAll(filepath.Join(root, DriversDir, "1.0"), 0o755); err != nil {
				t.Fatal(err)
			}
			planned := false
			plan := func() ([]devnodes.Node, error) {
				planned = true
				return []devnodes.Node{{Path: filepath.Join(dev, "nvidiactl"), Major: 195, Minor: 255, Mode: 0o666}}, nil
			}
			ldconfig := 0
			r, marked, problems := Publish(Publication{
				Ready:  Ready{Driver: tt.driver, Version: tt.version, Set: "s", By: "test"},
				RunDir: run, Root: root, DriversDir: DriversDir, PlanNodes: plan,
				Ldconfig: func() error { ldconfig++; return nil },
			})
			if !marked {
				t.Fatalf("Publish: not marked ready: %v", problems)
			}
			if got := len(r.DeviceNodes) == 1 && planned; got != tt.wantNodes {
				t.Errorf("device nodes %v (planned %t), want nodes %t", r.DeviceNodes, planned, tt.wantNodes)
			}
			if got := r.Userspace != ""; got != tt.wantUserspace || (ldconfig == 1) != tt.wantUserspace {
				t.Errorf("userspace %q, ldconfig runs %d; want userspace %t", r.Userspace, ldconfig, tt.wantUserspace)
			}
			noUserspace := slices.ContainsFunc(problems, func(err error) bool { return errors.Is(err, ErrNoUserspace) })
			if noUserspace == tt.wantUserspace {
				t.Errorf("problems %v: ErrNoUserspace among them %t, want %t", problems, noUserspace, !tt.wantUserspace)
			}
			got, err := ReadReady(run)
			if err != nil || got.Version != tt.version || got.Userspace != r.Userspace || !slices.Equal(got.DeviceNodes, r.DeviceNodes) {
				t.Errorf("ready record %+v, %v; want what Publish returned, %+v", got, err, r)
			}
		})
	}
}
