package xorg

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzParseAddress checks the PCI address parser, fed the names of
// <root>/sys/bus/pci/devices (a root given with --root, or the running
// machine's sysfs): no panic; an accepted address keeps the text it was given,
// holds only hex digits, ':' and '.', and fields within PCI's bounds (domain
// 16 bits, bus 8, device 5, function 3); its BusID is Xorg's decimal form;
// the canonical address ("%04x:%02x:%02x.%x") parses to the same GPU; and the
// xorg.conf written for it is the one written for the canonical address,
// but for the address in its comment (nothing from the name reaches the
// configuration but that comment).
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"0000:41:00.0", "0001:c1:00.1", "ffff:ff:1f.7", "0000:00:20.0", "0000:00:00.8", "0:0:0.0",
		"0000:41:00", "0000:41.00.0", "00000000000000000001:00:00.0", "0000:41:00.0\n", "+0:0:0.0", "0x0:0:0.0", "0000:4G:00.0",
		"0000:41:00.0:1", "", ":::", "0000:0_1:00.0", "ABCD:EF:1F.7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		g, err := ParseAddress(addr)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", addr)) {
				t.Fatalf("ParseAddress(%q) error %q does not name the address", addr, err)
			}
			return
		}
		if g.Address != addr || strings.Trim(addr, "0123456789abcdefABCDEF:.") != "" {
			t.Fatalf("ParseAddress(%q) accepted %+v", addr, g)
		}
		if g.Domain > 0xffff || g.Bus > 0xff || g.Device > 0x1f || g.Function > 7 {
			t.Fatalf("ParseAddress(%q) = %+v: a field out of bounds", addr, g)
		}
		want := fmt.Sprintf("PCI:%d@%d:%d:%d", g.Bus, g.Domain, g.Device, g.Function)
		if g.Domain == 0 {
			want = fmt.Sprintf("PCI:%d:%d:%d", g.Bus, g.Device, g.Function)
		}
		if g.BusID != want {
			t.Fatalf("ParseAddress(%q).BusID = %q, want %q", addr, g.BusID, want)
		}
		canonical := fmt.Sprintf("%04x:%02x:%02x.%x", g.Domain, g.Bus, g.Device, g.Function)
		c, err := ParseAddress(canonical)
		if err != nil {
			t.Fatalf("ParseAddress(%q) (canonical of %q): %v", canonical, addr, err)
		}
		if c.Address = addr; c != g {
			t.Fatalf("ParseAddress(%q) = %+v, but the canonical %q gives %+v", addr, g, canonical, c)
		}
		c.Address = canonical
		if got, want := Config([]GPU{g}), strings.Replace(Config([]GPU{c}), "# "+canonical+":", "# "+addr+":", 1); got != want {
			t.Fatalf("Config for %q:\n%s\nwant\n%s", addr, got, want)
		}
	})
}
