package supported_test

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/supported"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

func realList(t *testing.T, pkgDir string) *supported.List {
	t.Helper()
	path := testenv.SupportedGPUs(t, pkgDir)
	l, err := supported.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRealLists(t *testing.T) {
	l535 := realList(t, "nvidia-driver_535.261.03-1")
	l470 := realList(t, "nvidia-tesla-470-driver_470.256.02-1~deb12u1")
	if len(l535.Chips) != 2192 || len(l470.Chips) != 1943 {
		t.Errorf("chips: 535 %d, 470 %d; want 2192 and 1943 (DESIGN.md, recipes)", len(l535.Chips), len(l470.Chips))
	}
	gpu := func(dev, sv, sd uint16) pci.Device {
		return pci.Device{Vendor: 0x10de, Device: dev, SubVendor: sv, SubDevice: sd, Class: 0x030200}
	}
	tests := []struct {
		name   string
		list   *supported.List
		dev    pci.Device
		ok     bool
		chip   string
		open   bool
		legacy string
	}{
		// The H200 of the fixture VM is in neither list.
		{"H200 on 535", l535, gpu(0x2335, 0x10de, 0x18bf), false, "", false, ""},
		{"H200 on 470", l470, gpu(0x2335, 0x10de, 0x18bf), false, "", false, ""},
		// H100 SXM is listed in 535 for two boards only: another subsystem is not supported.
		{"H100 board 16c1 on 535", l535, gpu(0x2330, 0x10de, 0x16c1), true, "NVIDIA H100 80GB HBM3", true, ""},
		{"H100 other board on 535", l535, gpu(0x2330, 0x10de, 0x1234), false, "", false, ""},
		// V100: generic entry and an LS board; no open support.
		{"V100 generic on 535", l535, gpu(0x1db4, 0x10de, 0x1214), true, "Tesla V100-PCIE-16GB", false, ""},
		{"V100 LS on 535", l535, gpu(0x1db4, 0x10de, 0x1306), true, "Tesla V100-PCIE-16GB-LS", false, ""},
		{"A100 on 470", l470, gpu(0x20b0, 0x10de, 0x134f), true, "NVIDIA A100-SXM4-40GB", false, ""},
		{"A100 on 535", l535, gpu(0x20b0, 0x10de, 0x134f), true, "NVIDIA A100-SXM4-40GB", true, ""},
		// Kepler K80 left the 535 branch: its entry there names the 470 legacy branch.
		{"K80 on 535", l535, gpu(0x102d, 0x10de, 0x106c), true, "Tesla K80", false, "470"},
		{"K80 on 470", l470, gpu(0x102d, 0x10de, 0x106c), true, "Tesla K80", false, ""},
		{"not NVIDIA", l535, pci.Device{Vendor: 0x1234, Device: 0x2335}, false, "", false, ""},
	}
	for _, tt := range tests {
		c, ok := tt.list.Lookup(tt.dev)
		if ok != tt.ok || c.Name != tt.chip || c.KernelOpen() != tt.open || c.Branch() != tt.legacy {
			t.Errorf("%s: Lookup = %q (open %v, legacy %q), %v; want %q (open %v, legacy %q), %v",
				tt.name, c.Name, c.KernelOpen(), c.Branch(), ok, tt.chip, tt.open, tt.legacy, tt.ok)
		}
	}
	if names := l535.Names(0x2330); len(names) == 0 || names[0] != "NVIDIA H100 80GB HBM3" {
		t.Errorf("Names(0x2330) = %q", names)
	}
}

func TestParse(t *testing.T) {
	doc := `{"chips":[{"devid":"0x1DB4","name":"V100","features":[]},{"devid":"0x2330","subdevid":"0x16C1","subvendorid":"0x10DE","name":"H100","features":["kernelopen"]}]}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(doc))
	zw.Close()
	for name, b := range map[string][]byte{"plain": []byte(doc), "gzip": gz.Bytes()} {
		l, err := supported.Parse(b)
		if err != nil || len(l.Chips) != 2 {
			t.Errorf("%s: Parse = %v, %v; want 2 chips", name, l, err)
		}
	}
	for _, tt := range []struct{ doc, want string }{
		{`{"chips":[]}`, "no chips"},
		{`{"chips":[{"devid":"zz","name":"X"}]}`, `chip 0 (X): devid`},
		{`{"chips":[{"devid":"0x1","subdevid":"0x2","name":"Y"}]}`, `chip 0 (Y): subsystem ids`},
		{`[`, "unexpected end"},
	} {
		if _, err := supported.Parse([]byte(tt.doc)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", tt.doc, err, tt.want)
		}
	}
}
