package selection_test

import (
	"os"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/kmodcache/secureboot"
)

// TestGatherCapture: Gather takes a committed capture as it is (the file or
// its directory) with the committed plan bundle (testdata/plan-bundle: the
// boot index and supported-gpus.json of real 535 and 550 cells), knowing
// nothing of the captured machine's Secure Boot; a malformed capture is an
// error naming its line.
func TestGatherCapture(t *testing.T) {
	for _, tt := range []struct{ sys, gpu string }{
		{"../../testdata/h100-gpu-vm/pci-sysfs.txt", "NVIDIA H100 80GB HBM3"},
		{"../../testdata/h200-gpu-vm", "NVIDIA H200"},
	} {
		m, err := selection.Gather(selection.Where{SysDir: tt.sys, CacheDir: "../../testdata/plan-bundle", Kernel: "6.1.0-56-cloud-amd64"})
		if err != nil {
			t.Fatalf("Gather(%s): %v", tt.sys, err)
		}
		if len(m.Devices) != 7 || m.Signatures.SecureBoot != secureboot.Unknown || m.Signatures.Enforced {
			t.Errorf("Gather(%s): %d devices, signatures %+v; want 7 and nothing known", tt.sys, len(m.Devices), m.Signatures)
		}
		d := m.Decide(instance.Request{Source: instance.SourceDefault})
		if len(d.GPUs) != 1 || d.GPUs[0].Name != tt.gpu || len(d.Drivers) != 1 || d.Drivers[0].Chosen == nil ||
			d.Drivers[0].Chosen.Version != "550.163.01" || d.Drivers[0].Chosen.Flavor != "open" {
			t.Errorf("Gather(%s): decision %+v, want %s and 550.163.01 open", tt.sys, d.Selection, tt.gpu)
		}
	}
	bad := t.TempDir() + "/pci-sysfs.txt"
	if err := os.WriteFile(bad, []byte("0000:00:06.0 vendor 0x10de\nnot a line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := selection.Gather(selection.Where{SysDir: bad, CacheDir: "../../testdata/plan-bundle", Kernel: "6.1.0-56-cloud-amd64"}); err == nil || !strings.Contains(err.Error(), "pci-sysfs.txt:2:") {
		t.Errorf("Gather(malformed capture): %v, want an error naming line 2", err)
	}
}
