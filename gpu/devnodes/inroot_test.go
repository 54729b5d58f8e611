package devnodes

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestPlanIn: PlanIn plans what Plan plans on a system's own /proc, and
// nothing it reads leaves the root, blocks or runs unbounded.
func TestPlanIn(t *testing.T) {
	fixture := fixtureProc(t) // <tmp>/proc
	root := filepath.Dir(fixture)
	got, err := PlanIn(root, "/proc", "/dev")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Plan(fixture, "/dev")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("PlanIn = %v, want Plan's %v (%v)", got, want, err)
	}
	if minor, err := CapabilityIn(root, "/proc", CapMIGMonitor); err != nil || minor != 2 {
		t.Errorf("CapabilityIn(mig/monitor) = %d, %v; want 2", minor, err)
	}

	caps := "proc/driver/nvidia/capabilities/"
	tests := []struct {
		name     string
		setup    func(t *testing.T, root, outside string)
		wantErr  error  // nil: PlanIn succeeds
		wantFile string // the file the error names, in the root
		wantCaps int    // /dev/nvidia-caps nodes planned when it succeeds
	}{
		{"proc linked to the host's /proc", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, "proc", func(p string) error { return os.Symlink("/proc", p) })
		}, syscall.ELOOP, "proc/devices", 0},
		{"devices linked outside", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, "proc/devices", func(p string) error { return os.Symlink(filepath.Join(outside, "devices"), p) })
		}, fs.ErrNotExist, "proc/devices", 0},
		{"devices is a FIFO", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, "proc/devices", func(p string) error { return unix.Mkfifo(p, 0o644) })
		}, inroot.ErrNotRegular, "proc/devices", 0},
		{"devices of 1.5 GB", func(t *testing.T, root, outside string) {
			if err := os.Truncate(filepath.Join(root, "proc/devices"), 1500<<20); err != nil {
				t.Fatal(err)
			}
		}, inroot.ErrTooLarge, "proc/devices", 0},
		// A capability that is not there is skipped by design; one linked
		// out of the root is not there.
		{"capability linked outside", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, caps+"mig/config", func(p string) error { return os.Symlink(filepath.Join(outside, "config"), p) })
		}, nil, "", 1},
		{"capability is a FIFO", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, caps+"mig/monitor", func(p string) error { return unix.Mkfifo(p, 0o644) })
		}, inroot.ErrNotRegular, caps + "mig/monitor", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := fixtureProc(t)
			root := filepath.Dir(proc)
			outside := t.TempDir()
			writeFile(t, filepath.Join(outside, "devices"), "Character devices:\n195 nvidia\n241 nvidia-caps\n")
			writeFile(t, filepath.Join(outside, "config"), "DeviceFileMinor: 9\nDeviceFileMode: 438\n")
			tt.setup(t, root, outside)
			nodes, err := PlanIn(root, "/proc", "/dev")
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), filepath.Join(root, tt.wantFile)) {
					t.Fatalf("PlanIn = %v, want an error wrapping %v naming %s", err, tt.wantErr, tt.wantFile)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, x := range nodes {
				if strings.HasPrefix(x.Path, "/dev/nvidia-caps/") {
					n++
					if x.Minor == 9 {
						t.Errorf("node %v comes from outside the root", x)
					}
				}
			}
			if n != tt.wantCaps {
				t.Errorf("%d capability nodes, want %d: %v", n, tt.wantCaps, nodes)
			}
		})
	}
}
