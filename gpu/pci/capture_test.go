package pci_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/gpu/pci/pcitest"
)

// TestReadCaptureAsTree: each committed capture read as it is gives the
// devices a sysfs tree built from it gives Scan, driver bindings included;
// a capture directory names its pci-sysfs.txt.
func TestReadCaptureAsTree(t *testing.T) {
	for _, dir := range []string{"../../testdata/h200-gpu-vm", "../../testdata/h100-gpu-vm"} {
		file := filepath.Join(dir, pci.CaptureFile)
		want, err := pci.Scan(pcitest.FromFixture(t, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, arg := range []string{file, dir} {
			got, capture, err := pci.ScanAny(arg)
			if err != nil || !capture {
				t.Fatalf("ScanAny(%s): capture %v, %v", arg, capture, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ScanAny(%s):\n%+v\nwant (the tree built from it)\n%+v", arg, got, want)
			}
		}
	}
	devs, err := pci.ReadCapture(h200Fixture)
	if err != nil {
		t.Fatal(err)
	}
	var gpu *pci.Device
	for i := range devs {
		if devs[i].IsNVIDIAGPU() {
			gpu = &devs[i]
		}
	}
	if gpu == nil || gpu.String() != "0000:00:06.0 10de:2335 (subsystem 10de:18bf)" || gpu.Driver != "nvidia" || gpu.Class != 0x030200 {
		t.Errorf("H200 capture's GPU: %+v", gpu)
	}
}

// TestScanAnyTree: a sysfs tree, or a directory holding a capture and a sys/
// tree, is scanned as a tree.
func TestScanAnyTree(t *testing.T) {
	root := pcitest.FromFixture(t, h200Fixture)
	b, err := os.ReadFile(h200Fixture)
	if err != nil {
		t.Fatal(err)
	}
	// A capture beside the tree that says otherwise: the tree wins.
	if err := os.WriteFile(filepath.Join(root, pci.CaptureFile), b[:strings.Index(string(b), "\n")+1], 0o644); err != nil {
		t.Fatal(err)
	}
	devs, capture, err := pci.ScanAny(root)
	if err != nil || capture || len(devs) != 7 {
		t.Errorf("ScanAny(tree): %d devices, capture %v, %v; want 7 from the tree", len(devs), capture, err)
	}
}

// TestParseCaptureErrors: a malformed capture is an error naming the file and
// line and saying what is wrong.
func TestParseCaptureErrors(t *testing.T) {
	const ok = "0000:00:06.0 modalias pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02i00\n"
	for _, tt := range []struct{ name, in, want string }{
		{"two fields", ok + "0000:00:06.0 vendor\n", "c.txt:2: fewer than three fields"},
		{"bad address", "00:06.0 vendor 0x10de\n", `c.txt:1: address "00:06.0" is not DOMAIN:BUS:DEVICE.FUNCTION`},
		{"path in address", "0000:00:0/.0 vendor 0x10de\n", "c.txt:1: address"},
		{"unknown file", ok + "\n0000:00:06.0 ../../etc/passwd x\n", `c.txt:3: unknown file "../../etc/passwd"`},
		{"twice", ok + ok, "c.txt:2: 0000:00:06.0 modalias given twice"},
		{"bad modalias", "0000:00:06.0 modalias usb:v1234\n", `c.txt:1: device 0000:00:06.0: pci: modalias "usb:v1234": not a PCI modalias`},
		{"no ids", "0000:00:06.0 vendor 0x10de\n0000:00:06.0 device 0x2335\n", "c.txt:1: device 0000:00:06.0: no modalias and no subsystem_vendor"},
		{"bad hex", "0000:00:06.0 vendor 0x10de\n0000:00:06.0 device 0x2335\n0000:00:06.0 subsystem_vendor 0x10de\n0000:00:06.0 subsystem_device zz\n0000:00:06.0 class 0x030200\n", `subsystem_device: "zz" is not a 16-bit hex number`},
		{"bad driver", ok + "0000:00:06.0 driver a/b\n", `driver "a/b" is not a driver name`},
		{"empty", "\n\n", "c.txt: no devices"},
		{"long line", "0000:00:06.0 modalias " + strings.Repeat("x", pci.MaxCaptureLine), "c.txt:1: a line over 4096 bytes"},
		{"too big", ok + strings.Repeat("\n", pci.MaxCaptureBytes), "over 4194304 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := pci.ParseCapture(strings.NewReader(tt.in), "c.txt")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseCapture: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	// The ids alone, without a modalias, are enough.
	devs, err := pci.ParseCapture(strings.NewReader("0000:00:06.0 vendor 0x10de\n0000:00:06.0 device 0x2335\n0000:00:06.0 subsystem_vendor 0x10de\n0000:00:06.0 subsystem_device 0x18bf\n0000:00:06.0 class 0x030200\n0000:00:06.0 numa_node -1\n"), "c.txt")
	if err != nil || len(devs) != 1 || devs[0].String() != "0000:00:06.0 10de:2335 (subsystem 10de:18bf)" || !devs[0].IsNVIDIAGPU() {
		t.Errorf("ParseCapture(ids): %+v, %v", devs, err)
	}
	if _, err := pci.ReadCapture("../../testdata/nonexistent.txt"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("ReadCapture(missing): %v", err)
	}
}
