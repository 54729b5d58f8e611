package activate

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
)

func TestPoint(t *testing.T) {
	root := t.TempDir() // stands for /newroot
	run := t.TempDir()
	for _, v := range []string{"535.261.03", "470.256.02"} {
		if err := os.MkdirAll(filepath.Join(root, DriversDir, v, "usr/lib"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := Target(run); got != "" || err != nil {
		t.Errorf("Target(no link) = %q, %v, want \"\", nil", got, err)
	}
	for _, v := range []string{"535.261.03", "470.256.02", "470.256.02"} {
		if err := Point(run, root, DriversDir, v); err != nil {
			t.Fatalf("Point(%s): %v", v, err)
		}
		want := DriversDir + "/" + v
		if got, err := Target(run); got != want || err != nil {
			t.Errorf("after Point(%s): Target = %q, %v, want %q, nil", v, got, err, want)
		}
		// Through the root, the link reaches the version's files.
		if _, err := os.Stat(filepath.Join(root, want, "usr/lib")); err != nil {
			t.Error(err)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(run, "kpreload"))
	if len(entries) != 1 {
		t.Errorf("run/kpreload holds %d entries, want only the link (no temporary left)", len(entries))
	}
	err := Point(run, root, DriversDir, "999.1")
	if !errors.Is(err, ErrNoUserspace) || !strings.Contains(err.Error(), "999.1") {
		t.Errorf("Point(absent version) = %v, want ErrNoUserspace naming 999.1", err)
	}
	if got, _ := Target(run); got != "" {
		t.Errorf("after Point(absent version): link still points at %q, want it removed", got)
	}
	for _, bad := range []string{"", "..", "../etc", "a/b"} {
		if err := Point(run, root, DriversDir, bad); err == nil {
			t.Errorf("Point(%q) = nil error, want one", bad)
		}
	}
}

func TestReady(t *testing.T) {
	run := t.TempDir()
	if _, err := ReadReady(run); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadReady(none) error = %v, want fs.ErrNotExist", err)
	}
	want := Ready{Driver: "nvidia", Version: "535.261.03", Flavor: "open", Set: "abc", Time: 2.5,
		Modules: []string{"nvidia", "nvidia_uvm"}, Userspace: "/opt/kpreload/drivers/535.261.03", By: "init"}
	if err := MarkReady(run, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReady(run)
	want.Format = ReadyFormat
	if err != nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("ReadReady = %+v, %v, want %+v", got, err, want)
	}
	fi, err := os.Stat(ReadyPath(run))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("ready file: %v, %v, want mode 0644", fi, err)
	}
	if err := ClearReady(run); err != nil {
		t.Fatal(err)
	}
	if err := ClearReady(run); err != nil {
		t.Errorf("ClearReady twice: %v", err)
	}
	if err := os.WriteFile(ReadyPath(run), []byte(`{"format":9}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadReady(run); err == nil || !strings.Contains(err.Error(), "format 9") {
		t.Errorf("ReadReady(format 9) = %v, want a format error", err)
	}
}

// TestReadInRoot: the ready record and the driver link of a system at root
// are read inside it (a link out of it leads nowhere), the record only from a
// regular file of bounded size; errors name the file.
func TestReadInRoot(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, root, outside string)
		wantErr error // of ReadReadyIn; nil: the root's own record
		target  string
	}{
		{"the root's own", func(t *testing.T, root, outside string) {}, nil, DriversDir + "/1.0.0"},
		{"run linked to the host's /run", func(t *testing.T, root, outside string) {
			mustSymlink(t, "/run", filepath.Join(root, "run"))
		}, syscall.ELOOP, ""},
		{"run linked outside", func(t *testing.T, root, outside string) {
			mustSymlink(t, outside, filepath.Join(root, "run"))
		}, fs.ErrNotExist, ""},
		{"ready linked up and out", func(t *testing.T, root, outside string) {
			mustSymlink(t, "../../../../../../../../.."+ReadyPath(outside), ReadyPath(filepath.Join(root, RunDir)))
		}, fs.ErrNotExist, DriversDir + "/1.0.0"},
		{"ready is a FIFO", func(t *testing.T, root, outside string) {
			p := ReadyPath(filepath.Join(root, RunDir))
			os.Remove(p)
			if err := unix.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, inroot.ErrNotRegular, DriversDir + "/1.0.0"},
		{"ready of 1.5 GB", func(t *testing.T, root, outside string) {
			if err := os.Truncate(ReadyPath(filepath.Join(root, RunDir)), 1500<<20); err != nil {
				t.Fatal(err)
			}
		}, inroot.ErrTooLarge, DriversDir + "/1.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			for _, dir := range []string{root, outside} {
				if err := os.MkdirAll(filepath.Join(dir, DriversDir, "1.0.0"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := Point(filepath.Join(root, RunDir), root, DriversDir, "1.0.0"); err != nil {
				t.Fatal(err)
			}
			if err := MarkReady(filepath.Join(root, RunDir), Ready{Driver: "nvidia", Version: "1.0.0"}); err != nil {
				t.Fatal(err)
			}
			if err := Point(outside, outside, DriversDir, "1.0.0"); err != nil {
				t.Fatal(err)
			}
			if err := MarkReady(outside, Ready{Driver: "nvidia", Version: "9.9.9"}); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, root, outside)
			r, err := ReadReadyIn(root, RunDir)
			switch {
			case tt.wantErr == nil && (err != nil || r.Version != "1.0.0"):
				t.Errorf("ReadReadyIn = %+v, %v; want the root's record (1.0.0)", r, err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("ReadReadyIn = %+v, %v; want an error wrapping %v", r, err, tt.wantErr)
			case tt.wantErr != nil && !strings.Contains(err.Error(), filepath.Join(root, RunDir, "kpreload")):
				t.Errorf("error %q does not name the file under %s", err, root)
			}
			got, err := TargetIn(root, RunDir)
			if got != tt.target || (tt.target != "" && err != nil) {
				t.Errorf("TargetIn = %q, %v; want %q", got, err, tt.target)
			}
		})
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.RemoveAll(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
