package pid1

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/pci/pcitest"
	"github.com/kpreload/kpreload/live/coldplug"
)

// TestPCIDevices checks that the decision's devices made from the coldplug
// scan of the PCI bus are the ones pci.Scan reads: on the H200 VM fixture and
// on this machine, and with a modalias that does not parse (read again).
func TestPCIDevices(t *testing.T) {
	fixture := pcitest.FromFixture(t, filepath.Join(pcitest.H200(t), "pci-sysfs.txt"))
	for _, root := range []string{filepath.Join(fixture, "sys"), "/sys"} {
		want, err := pci.Scan(root)
		if err != nil {
			t.Fatalf("pci.Scan(%s): %v", root, err)
		}
		if len(want) == 0 {
			t.Fatalf("pci.Scan(%s) found no devices", root)
		}
		bus, scanErr := coldplug.ScanBus(root, "pci")
		got, err := pciDevices(root, bus, scanErr)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("pciDevices(%s) = %+v, %v; want %+v", root, got, err, want)
		}
		bad := append([]coldplug.Device{{Path: bus[0].Path, Modalias: "pci:garbage"}}, bus[1:]...)
		if got, err := pciDevices(root, bad, nil); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("pciDevices(%s) with a bad modalias = %+v, %v; want pci.Scan's %+v", root, got, err, want)
		}
	}
}
