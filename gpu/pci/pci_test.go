package pci_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/pci/pcitest"
)

const h200Fixture = "../../../shared/fixtures/h200-gpu-vm/pci-sysfs.txt"

func TestScanH200Fixture(t *testing.T) {
	root := pcitest.FromFixture(t, h200Fixture)
	for _, r := range []string{root, filepath.Join(root, "sys")} {
		devs, err := pci.Scan(r)
		if err != nil {
			t.Fatalf("Scan(%s): %v", r, err)
		}
		if len(devs) != 7 {
			t.Errorf("Scan(%s): %d devices, want 7", r, len(devs))
		}
		var gpus []pci.Device
		for _, d := range devs {
			if d.IsNVIDIAGPU() {
				gpus = append(gpus, d)
			}
		}
		want := pci.Device{Address: "0000:00:06.0", Vendor: 0x10de, Device: 0x2335, SubVendor: 0x10de, SubDevice: 0x18bf, Class: 0x030200, Driver: "nvidia"}
		if len(gpus) != 1 || gpus[0] != want {
			t.Errorf("NVIDIA GPUs = %+v, want [%+v]", gpus, want)
		}
		if got := gpus[0].String(); got != "0000:00:06.0 10de:2335 (subsystem 10de:18bf)" {
			t.Errorf("String() = %q", got)
		}
	}
}

func TestScanRoundTrip(t *testing.T) {
	devs := []pci.Device{
		{Address: "0000:00:03.0", Vendor: 0x1234, Device: 0x11e8, SubVendor: 0x1af4, SubDevice: 0x1100, Class: 0x00ff00},
		{Address: "0000:17:00.0", Vendor: 0x10de, Device: 0x1db4, SubVendor: 0x10de, SubDevice: 0x1306, Class: 0x030000, Driver: "nvidia"},
	}
	got, err := pci.Scan(pcitest.FromDevices(t, devs...))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != devs[0] || got[1] != devs[1] {
		t.Errorf("Scan = %+v, want %+v", got, devs)
	}
	if got[0].IsNVIDIAGPU() || !got[1].IsNVIDIAGPU() {
		t.Errorf("IsNVIDIAGPU: edu %v, V100 %v; want false, true", got[0].IsNVIDIAGPU(), got[1].IsNVIDIAGPU())
	}
}

func TestScanErrors(t *testing.T) {
	// No PCI at all: no devices, no error.
	if devs, err := pci.Scan(t.TempDir()); err != nil || len(devs) != 0 {
		t.Errorf("Scan(empty) = %v, %v; want none, nil", devs, err)
	}
	root := pcitest.FromDevices(t, pci.Device{Address: "0000:00:01.0", Vendor: 1, Device: 2, Class: 0x030000})
	bad := filepath.Join(root, "sys", "bus", "pci", "devices", "0000:00:01.0", "device")
	if err := os.WriteFile(bad, []byte("0xzz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := pci.Scan(root); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Scan with a bad device file = %v, want an error naming %s", err, bad)
	}
}

func TestParseHex(t *testing.T) {
	for _, tt := range []struct {
		in   string
		bits int
		want uint64
		ok   bool
	}{
		{"0x10de", 16, 0x10de, true}, {"10DE", 16, 0x10de, true}, {"0x030200", 24, 0x030200, true},
		{"0x10000", 16, 0, false}, {"0x", 16, 0, false}, {"", 16, 0, false}, {"nvidia", 16, 0, false},
	} {
		got, err := pci.ParseHex(tt.in, tt.bits)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseHex(%q, %d) = %#x, %v; want %#x, ok %v", tt.in, tt.bits, got, err, tt.want, tt.ok)
		}
	}
}
