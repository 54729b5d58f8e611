package switcher

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHostileSysAndProc: the switch's reads of SysDir and ProcDir stay in
// them, never block on a FIFO and are bounded; a module that cannot be
// checked is refused as in use, and nothing is changed.
func TestHostileSysAndProc(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, e *env, outside string)
		want  string // in the InUseError's reason
	}{
		{"refcnt is a FIFO", func(t *testing.T, e *env, outside string) {
			p := filepath.Join(e.k.mod("nvidia_drm"), "refcnt")
			os.Remove(p)
			if err := unix.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"refcnt of 1.5 GB", func(t *testing.T, e *env, outside string) {
			if err := os.Truncate(filepath.Join(e.k.mod("nvidia_drm"), "refcnt"), 1500<<20); err != nil {
				t.Fatal(err)
			}
		}, "file too large"},
		{"a user's comm is a FIFO", func(t *testing.T, e *env, outside string) {
			e.k.setRefcnt("nvidia_drm", 1)
			fd := filepath.Join(e.o.ProcDir, "123/fd")
			if err := os.MkdirAll(fd, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(e.o.DevDir, "nvidia0"), filepath.Join(fd, "4")); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(filepath.Join(e.o.ProcDir, "123/comm"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "processes with NVIDIA device files open: 123 ()"},
		{"a process directory linked outside", func(t *testing.T, e *env, outside string) {
			e.k.setRefcnt("nvidia_drm", 1)
			fd := filepath.Join(outside, "456/fd")
			if err := os.MkdirAll(fd, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(e.o.DevDir, "nvidia0"), filepath.Join(fd, "4")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(outside, "456"), filepath.Join(e.o.ProcDir, "456")); err != nil {
				t.Fatal(err)
			}
		}, "1 user(s) besides the driver's own modules; stop them"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, true)
			tt.setup(t, e, t.TempDir())
			var err error
			done := make(chan struct{})
			go func() { defer close(done); _, err = e.run() }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Switch hung")
			}
			var inUse *InUseError
			if !errors.As(err, &inUse) || !strings.Contains(inUse.Reason, tt.want) {
				t.Fatalf("Switch = %v, want an InUseError saying %q", err, tt.want)
			}
			if len(e.k.calls) != 0 {
				t.Errorf("kernel calls %q, want none", e.k.calls)
			}
		})
	}
}
