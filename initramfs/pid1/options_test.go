package pid1

import (
	"slices"
	"testing"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/report"
)

// TestRealOptions checks /init's real roots and the paths made from them are
// the running system's, as they were when they were written out in full.
func TestRealOptions(t *testing.T) {
	b := &Boot{o: RealOptions(nil), release: "6.1.0-56-cloud-amd64"}
	for _, tt := range []struct{ name, got, want string }{
		{"sysfs", b.o.SysDir, "/sys"},
		{"procfs", b.o.ProcDir, "/proc"},
		{"devtmpfs", b.o.DevDir, "/dev"},
		{"run", b.o.RunDir, "/run"},
		{"new root", b.o.NewRoot, "/newroot"},
		{"firmware parameter", b.o.FirmwareParam, "/sys/module/firmware_class/parameters/path"},
		{"report", b.o.ReportPath, report.Path},
		{"seed mount", b.o.SeedMount, "/run/kpreload/seed"},
		{"fw_cfg in sysfs", b.fwCfgSysfs().Path, instance.FwCfgPath},
		{"initramfs instance copy", b.initramfsPath(instance.InitramfsPath), "/etc/kpreload/instance.yaml"},
		{"shell", b.initramfsPath("/bin/sh"), "/bin/sh"},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	want := []string{"/x", "/lib/firmware/updates/6.1.0-56-cloud-amd64", "/lib/firmware/updates", "/lib/firmware/6.1.0-56-cloud-amd64", "/lib/firmware"}
	if got := b.firmwareDirs("/x"); !slices.Equal(got, want) {
		t.Errorf("firmwareDirs = %q, want %q", got, want)
	}
	if !b.o.IsolateDrivers || b.o.System == nil || b.o.Kernel == nil || b.o.Now == nil || b.o.Console == nil {
		t.Errorf("RealOptions %+v: want driver sets isolated and every seam set", b.o)
	}
}
