package pci_test

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

	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/pci/pcitest"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestScanInAgreesWithScan: on ordinary trees, the fixture's and this
// machine's own sysfs (its devices are links into /sys/devices, which stay
// inside both "/" and "/sys"), ScanIn finds what Scan finds.
func TestScanInAgreesWithScan(t *testing.T) {
	fixture := pcitest.FromFixture(t, h200Fixture)
	for _, root := range []string{fixture, filepath.Join(fixture, "sys"), "/", "/sys"} {
		want, werr := pci.Scan(root)
		got, err := pci.ScanIn(root)
		if err != nil || werr != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ScanIn(%s) = %+v, %v; Scan = %+v, %v", root, got, err, want, werr)
		}
	}
}

// TestScanInHostileRoot: what ScanIn reads stays in the root, is a regular
// file and is bounded.
func TestScanInHostileRoot(t *testing.T) {
	const dev = "sys/bus/pci/devices/0000:00:01.0/"
	tests := []struct {
		name     string
		setup    func(t *testing.T, root, outside string)
		wantErr  error  // nil: ScanIn succeeds with wantDevs devices
		wantFile string // named by the error, in the root
		wantDevs int
	}{
		{"devices directory linked outside", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, "sys/bus/pci/devices", func(p string) error { return os.Symlink(filepath.Join(outside, "sys/bus/pci/devices"), p) })
		}, nil, "", 0},
		{"sys linked to the host's sys", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, "sys", func(p string) error { return os.Symlink("/sys", p) })
		}, syscall.ELOOP, "sys/bus/pci/devices", 0},
		{"device linked outside", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, dev, func(p string) error {
				return os.Symlink(filepath.Join(outside, "sys/bus/pci/devices/0000:00:01.0"), p)
			})
		}, fs.ErrNotExist, dev + "vendor", 0},
		{"modalias is a FIFO: the id files are read", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, dev+"modalias", func(p string) error { return unix.Mkfifo(p, 0o644) })
		}, nil, "", 1},
		{"vendor is a FIFO", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, root, dev+"vendor", func(p string) error { return unix.Mkfifo(p, 0o644) })
		}, inroot.ErrNotRegular, dev + "vendor", 0},
		{"class of 1.5 GB", func(t *testing.T, root, outside string) {
			if err := os.Truncate(filepath.Join(root, dev, "class"), 1500<<20); err != nil {
				t.Fatal(err)
			}
		}, inroot.ErrTooLarge, dev + "class", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := pci.Device{Address: "0000:00:01.0", Vendor: 0x10de, Device: 0x2335, Class: 0x030200}
			root := pcitest.FromDevices(t, d)
			outside := pcitest.FromDevices(t, pci.Device{Address: "0000:00:01.0", Vendor: 0x10de, Device: 0x1eb8, Class: 0x030200},
				pci.Device{Address: "0000:00:02.0", Vendor: 0x10de, Device: 0x20b0, Class: 0x030200})
			tt.setup(t, root, outside)
			devs, err := pci.ScanIn(root)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), filepath.Join(root, tt.wantFile)) {
					t.Fatalf("ScanIn = %+v, %v; want an error wrapping %v naming %s", devs, err, tt.wantErr, tt.wantFile)
				}
				return
			}
			if err != nil || len(devs) != tt.wantDevs {
				t.Fatalf("ScanIn = %+v, %v; want %d devices", devs, err, tt.wantDevs)
			}
			for _, got := range devs {
				if got != d {
					t.Errorf("device %+v, want the root's %+v", got, d)
				}
			}
		})
	}
}
