package pci_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/pci/pcitest"
)

// h200Fixture is the PCI sysfs capture of the real H200 VM (testdata/h200-gpu-vm
// at the repository's root).
const h200Fixture = "../../testdata/h200-gpu-vm/pci-sysfs.txt"

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

func TestParseModalias(t *testing.T) {
	tests := []struct {
		in      string
		want    pci.Device
		wantErr bool
	}{
		{"pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02i00", pci.Device{Vendor: 0x10de, Device: 0x2335, SubVendor: 0x10de, SubDevice: 0x18bf, Class: 0x030200}, false},
		{"pci:v00008086d000029C0sv00001AF4sd00001100bc06sc00i00", pci.Device{Vendor: 0x8086, Device: 0x29c0, SubVendor: 0x1af4, SubDevice: 0x1100, Class: 0x060000}, false},
		{"pci:v00001234d000011E8sv00001AF4sd00001100bc00scFFi00", pci.Device{Vendor: 0x1234, Device: 0x11e8, SubVendor: 0x1af4, SubDevice: 0x1100, Class: 0x00ff00}, false},
		{"pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02", pci.Device{}, true},     // no prog-if
		{"pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02i00x", pci.Device{}, true}, // trailing
		{"pci:v000110DEd00002335sv000010DEsd000018BFbc03sc02i00", pci.Device{}, true},  // vendor over 16 bits
		{"pci:v0000ZZZZd00002335sv000010DEsd000018BFbc03sc02i00", pci.Device{}, true},  // not hex
		{"acpi:QEMU0002:", pci.Device{}, true}, // another bus
		{"", pci.Device{}, true},
	}
	for _, tt := range tests {
		got, err := pci.ParseModalias(tt.in)
		if (err != nil) != tt.wantErr || (err == nil && got != tt.want) {
			t.Errorf("ParseModalias(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestReadModaliasMatchesIDFiles checks that the ids Read takes from a modalias
// are the ones the vendor, device, subsystem and class files hold: on the
// fixture captured from an H200 VM (read with and without its modalias files)
// and on this machine's own sysfs.
func TestReadModaliasMatchesIDFiles(t *testing.T) {
	root := pcitest.FromFixture(t, h200Fixture)
	withAlias, err := pci.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	aliases, _ := filepath.Glob(filepath.Join(root, "sys/bus/pci/devices/*/modalias"))
	if len(aliases) != len(withAlias) {
		t.Fatalf("fixture has %d modalias files for %d devices", len(aliases), len(withAlias))
	}
	for _, p := range aliases {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	fromFiles, err := pci.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(fromFiles) != len(withAlias) {
		t.Fatalf("Scan without modalias: %d devices, with: %d", len(fromFiles), len(withAlias))
	}
	for i := range withAlias {
		if got, want := withAlias[i], fromFiles[i]; got != want {
			t.Errorf("fixture %s: from modalias %+v, from id files %+v", want.Address, got, want)
		}
	}

	host, _ := filepath.Glob("/sys/bus/pci/devices/*/modalias")
	for _, p := range host {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pci.ParseModalias(strings.TrimSpace(string(b)))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		dir := filepath.Dir(p)
		for _, f := range []struct {
			name string
			bits int
			got  uint64
		}{
			{"vendor", 16, uint64(got.Vendor)}, {"device", 16, uint64(got.Device)},
			{"subsystem_vendor", 16, uint64(got.SubVendor)}, {"subsystem_device", 16, uint64(got.SubDevice)},
			{"class", 24, uint64(got.Class)},
		} {
			raw, err := os.ReadFile(filepath.Join(dir, f.name))
			if err != nil {
				t.Fatal(err)
			}
			want, err := pci.ParseHex(strings.TrimSpace(string(raw)), f.bits)
			if err != nil || want != f.got {
				t.Errorf("%s: %s from modalias %#x, file says %q", dir, f.name, f.got, raw)
			}
		}
	}
	t.Logf("compared %d fixture devices and %d of this machine's", len(withAlias), len(host))
}
