package xorg

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixtureRoot rebuilds the H200 VM's PCI sysfs from the fixture (see its README).
func fixtureRoot(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../testdata/h200-gpu-vm/pci-sysfs.txt")
	if err != nil {
		t.Fatalf("fixture: %v (the H200 VM fixture lives in the repository: testdata/h200-gpu-vm)", err)
	}
	root := t.TempDir()
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) != 3 {
			t.Fatalf("fixture line %q: want <address> <file> <contents>", line)
		}
		if f[1] == "driver" {
			continue
		}
		writeFile(t, filepath.Join(root, "sys/bus/pci/devices", f[0], f[1]), f[2]+"\n")
	}
	return root
}

func TestFindH200(t *testing.T) {
	gpus, err := Find(fixtureRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []GPU{{Address: "0000:00:06.0", Device: 6, DeviceID: 0x2335, Class: 0x030200, BusID: "PCI:0:6:0"}}
	if !reflect.DeepEqual(gpus, want) {
		t.Errorf("Find(H200 fixture) = %+v, want %+v", gpus, want)
	}
}

// TestFindCapture: the committed captures, read as they are (the file, or
// the directory holding it), give what the tree built from them gives; a
// malformed capture is an error naming its line.
func TestFindCapture(t *testing.T) {
	want := []GPU{{Address: "0000:00:06.0", Device: 6, DeviceID: 0x2335, Class: 0x030200, BusID: "PCI:0:6:0"}}
	for _, arg := range []string{"../../testdata/h200-gpu-vm", "../../testdata/h200-gpu-vm/pci-sysfs.txt"} {
		gpus, err := Find(arg)
		if err != nil || !reflect.DeepEqual(gpus, want) {
			t.Errorf("Find(%s) = %+v, %v; want %+v", arg, gpus, err, want)
		}
	}
	bad := filepath.Join(t.TempDir(), "pci-sysfs.txt")
	writeFile(t, bad, "0000:00:06.0 vendor 0x10de\n0000:00:06.0 device\n")
	if _, err := Find(bad); err == nil || !strings.Contains(err.Error(), "pci-sysfs.txt:2: fewer than three fields") {
		t.Errorf("Find(malformed capture): %v", err)
	}
}

func TestFindSynthetic(t *testing.T) {
	root := t.TempDir()
	for _, d := range []struct{ addr, vendor, device, class string }{
		{"0000:41:00.0", "0x10de", "0x20b0", "0x030200"}, // A100, 3D controller, bus 0x41
		{"0000:41:00.1", "0x10de", "0x10f1", "0x040300"}, // its HD audio function
		{"0000:0a:00.0", "0x10de", "0x2204", "0x030000"}, // RTX 3090, VGA, bus 0x0a
		{"0001:c1:1f.7", "0x10de", "0x1eb8", "0x038000"}, // T4 in domain 1, other display
		{"0000:00:02.0", "0x1234", "0x1111", "0x030000"}, // QEMU's VGA, not NVIDIA
		{"0000:00:03.0", "0x1af4", "0x1041", "0x020000"},
	} {
		dir := filepath.Join(root, "sys/bus/pci/devices", d.addr)
		writeFile(t, filepath.Join(dir, "vendor"), d.vendor+"\n")
		writeFile(t, filepath.Join(dir, "device"), d.device+"\n")
		writeFile(t, filepath.Join(dir, "class"), d.class+"\n")
	}
	gpus, err := Find(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range gpus {
		got = append(got, g.Address+" "+g.BusID)
	}
	want := []string{"0000:0a:00.0 PCI:10:0:0", "0000:41:00.0 PCI:65:0:0", "0001:c1:1f.7 PCI:193@1:31:7"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Find = %q, want %q", got, want)
	}
	conf := Config(gpus)
	for _, s := range []string{
		"Section \"ServerLayout\"\n    Identifier     \"Layout0\"\n    Screen      0  \"Screen0\" 0 0\n    Screen      1  \"Screen1\" RightOf \"Screen0\"\n    Screen      2  \"Screen2\" RightOf \"Screen1\"\nEndSection\n",
		"Identifier     \"Device1\"\n    Driver         \"nvidia\"\n    VendorName     \"NVIDIA Corporation\"\n    BusID          \"PCI:65:0:0\"\n",
		"Identifier     \"Screen2\"\n    Device         \"Device2\"\n",
	} {
		if !strings.Contains(conf, s) {
			t.Errorf("Config lacks %q; got:\n%s", s, conf)
		}
	}
	if n := strings.Count(conf, "Section \"Device\""); n != 3 {
		t.Errorf("Config has %d Device sections, want 3", n)
	}
}

func TestFindErrors(t *testing.T) {
	if _, err := Find(t.TempDir()); err == nil {
		t.Errorf("Find(no sysfs) = nil error, want one")
	}
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "sys/bus/pci/devices/0000:01:00.0/vendor"), "0x10de\n")
	writeFile(t, filepath.Join(root, "sys/bus/pci/devices/0000:01:00.0/class"), "zz\n")
	if _, err := Find(root); err == nil || !strings.Contains(err.Error(), "not hexadecimal") {
		t.Errorf("Find(bad class) = %v, want a not-hexadecimal error", err)
	}
	for _, bad := range []string{"00:01.0", "0000:100:00.0", "0000:01:20.0", "0000:01:00.8", "0000:01:00"} {
		if _, err := ParseAddress(bad); err == nil {
			t.Errorf("ParseAddress(%q) = nil error, want one", bad)
		}
	}
}
