package xorg

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestFindHostileRoot: what Find reads stays in the root, is a regular file
// and is bounded; errors name the file.
func TestFindHostileRoot(t *testing.T) {
	const dev = "sys/bus/pci/devices/0000:41:00.0/"
	tests := []struct {
		name     string
		setup    func(t *testing.T, root, outside string)
		wantErr  error
		wantFile string
	}{
		{"sys linked to the host's sys", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, "sys", func(p string) error { return os.Symlink("/sys", p) })
		}, syscall.ELOOP, "sys/bus/pci/devices"},
		{"devices linked outside", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, "sys/bus/pci/devices", func(p string) error { return os.Symlink(filepath.Join(outside, "sys/bus/pci/devices"), p) })
		}, fs.ErrNotExist, "sys/bus/pci/devices"},
		{"vendor linked outside", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, dev+"vendor", func(p string) error { return os.Symlink(filepath.Join(outside, dev, "vendor"), p) })
		}, fs.ErrNotExist, dev + "vendor"},
		{"class is a FIFO", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, dev+"class", func(p string) error { return unix.Mkfifo(p, 0o644) })
		}, inroot.ErrNotRegular, dev + "class"},
		{"device of 1.5 GB", func(t *testing.T, root, outside string) {
			if err := os.Truncate(filepath.Join(root, dev, "device"), 1500<<20); err != nil {
				t.Fatal(err)
			}
		}, inroot.ErrTooLarge, dev + "device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			for _, r := range []string{root, outside} {
				for f, v := range map[string]string{"vendor": "0x10de", "device": "0x20b0", "class": "0x030200"} {
					writeFile(t, filepath.Join(r, dev, f), v+"\n")
				}
			}
			tt.setup(t, root, outside)
			gpus, err := Find(root)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), filepath.Join(root, tt.wantFile)) {
				t.Fatalf("Find = %+v, %v; want an error wrapping %v naming %s", gpus, err, tt.wantErr, tt.wantFile)
			}
		})
	}
}
