package pid1

import (
	"slices"
	"testing"
)

func TestChildAliases(t *testing.T) {
	for _, tc := range []struct {
		name, alias string
		want        []string
	}{
		// QEMU's transitional virtio-blk-pci, as the benchmark's guest has it.
		{"transitional block", "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00", []string{"virtio:d00000002v00001AF4"}},
		{"transitional net", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", []string{"virtio:d00000001v00001AF4"}},
		// Modern ids: the type is the device id less 0x1040 (0x1048 = SCSI, 8).
		{"modern scsi", "pci:v00001AF4d00001048sv00001AF4sd00001100bc01sc00i00", []string{"virtio:d00000008v00001AF4"}},
		{"modern block, other subsystem vendor", "pci:v00001AF4d00001042sv00001D0Fsd00000000bc01sc80i00", []string{"virtio:d00000002v00001D0F"}},
		{"reserved type 0", "pci:v00001AF4d00001000sv00001AF4sd00000000bc02sc00i00", nil},
		{"outside virtio_pci's range", "pci:v00001AF4d00001100sv00001AF4sd00001100bc00scFFi00", nil},
		{"below virtio_pci's range", "pci:v00001AF4d00000FFFsv00001AF4sd00000002bc01sc00i00", nil},
		{"NVIDIA H200", "pci:v000010DEd00002335sv000010DEsd000018BEbc03sc02i00", nil},
		{"not PCI", "virtio:d00000002v00001AF4", nil},
		{"malformed", "pci:v00001AF4d1001", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := childAliases(tc.alias); !slices.Equal(got, tc.want) {
				t.Errorf("childAliases(%q) = %q, want %q", tc.alias, got, tc.want)
			}
		})
	}
}
