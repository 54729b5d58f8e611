package pid1

import (
	"testing"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/live/coldplug"
)

func TestScanBus(t *testing.T) {
	index := func(aliases ...string) *coldplug.Index {
		ix := coldplug.NewIndex()
		ix.Add("/lib/modules/k", &bootindex.Index{Sets: []bootindex.Set{{ID: "s", Modules: []bootindex.Module{
			{Name: "m", Aliases: aliases},
			{Name: "dep"}, // a dependency without aliases does not widen the scan
		}}}}, nil)
		return ix
	}
	tests := []struct {
		name  string
		match *coldplug.Index
		want  string
	}{
		{"NVIDIA's display and 3D controllers", index("pci:v000010DEd*sv*sd*bc03sc00i00*", "pci:v000010DEd*sv*sd*bc03sc02i00*"), "pci"},
		{"a PCI and an ACPI alias", index("pci:v00001234d000011E8sv*sd*bc*sc*i*", "acpi*:QEMU0002:*"), "*"},
		{"virtio", index("virtio:d00000002v*"), "*"},
		{"no aliases", index(), ""},
	}
	for _, tt := range tests {
		if got := scanBus(tt.match); got != tt.want {
			t.Errorf("%s: scanBus = %q, want %q", tt.name, got, tt.want)
		}
	}
}
