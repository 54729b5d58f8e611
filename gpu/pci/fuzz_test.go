package pci_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/pci"
)

// FuzzParseModalias feeds ParseModalias anything: it must not panic, and what it
// accepts must be a modalias as the kernel writes it (compared ignoring case,
// since the kernel writes upper-case hex and the parser takes either).
func FuzzParseModalias(f *testing.F) {
	for _, s := range []string{
		"pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02i00",
		"pci:v00008086d000029C0sv00001AF4sd00001100bc06sc00i00",
		"pci:v00001234d000011E8sv00001AF4sd00001100bc00scFFi00",
		"pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02",
		"pci:v0000ffffd0000ffffsv0000ffffsd0000ffffbcffscffiff",
		"acpi:QEMU0002:",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, alias string) {
		d, err := pci.ParseModalias(alias)
		if err != nil {
			return
		}
		back := fmt.Sprintf("pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X",
			d.Vendor, d.Device, d.SubVendor, d.SubDevice, d.Class>>16, d.Class>>8&0xff, d.Class&0xff)
		if !strings.EqualFold(back, alias) {
			t.Errorf("ParseModalias(%q) = %+v, which the kernel writes as %q", alias, d, back)
		}
	})
}
