package pid1

import (
	"fmt"

	"github.com/kpreload/kpreload/gpu/pci"
)

// PCI ids of virtio functions (Red Hat / Qumranet's vendor id; the range
// virtio_pci's probe accepts: 0x1000-0x103f transitional, 0x1040-0x107f modern).
const (
	virtioVendor    = 0x1af4
	virtioFirst     = 0x1000
	virtioModern    = 0x1040
	virtioLast      = 0x107f
	virtioAliasForm = "virtio:d%08Xv%08X"
)

// childAliases returns the modaliases of the devices a bus driver will create
// below the device with PCI modalias alias once it binds, where alias alone
// says what they will be. A virtio PCI function becomes one virtio device
// whose type the kernel takes from the subsystem device id (transitional
// ids) or from the device id less 0x1040 (modern ids), and whose vendor is
// the subsystem vendor (drivers/virtio/virtio_pci_{legacy,modern}_dev.c).
// Knowing it, coldplug loads the virtio device's driver (virtio_blk,
// virtio_scsi, virtio_net) beside virtio_pci instead of in a round after it:
// the root disk appears as soon as virtio_pci binds. Any other device gives none.
func childAliases(alias string) []string {
	d, err := pci.ParseModalias(alias)
	if err != nil || d.Vendor != virtioVendor || d.Device < virtioFirst || d.Device > virtioLast {
		return nil
	}
	typ := uint32(d.SubDevice)
	if d.Device >= virtioModern {
		typ = uint32(d.Device - virtioModern)
	}
	if typ == 0 {
		return nil // virtio device id 0 is reserved: virtio_pci refuses the function
	}
	return []string{fmt.Sprintf(virtioAliasForm, typ, uint32(d.SubVendor))}
}
