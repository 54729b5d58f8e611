package report

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSelectionRoundTrip checks that the selection section survives the console
// line and that reports without it (older /init) still parse, with the same
// fields as before.
func TestSelectionRoundTrip(t *testing.T) {
	r := Report{Format: 1, Kernel: "6.1.0-56-cloud-amd64", Selection: &Selection{
		Source: "fw_cfg", Origin: "/sys/firmware/qemu_fw_cfg/by_name/opt/kpreload/instance.yaml/raw",
		Request: SelectionRequest{Version: "2.0.0", Flavor: "auto"}, Kernel: "6.1.0-56-cloud-amd64",
		Drivers: []SelectionDriver{{Driver: "kpreload-edu", Requested: true, Rule: "version 2.0.0",
			Candidates: []SelectionCandidate{{ID: "a", Version: "1.0.0", From: "initramfs", Excluded: "version", Reason: "asked version 2.0.0"}, {ID: "b", Version: "2.0.0", From: "initramfs"}},
			Chosen:     &SelectionCandidate{ID: "b", Version: "2.0.0", From: "initramfs"}, Loaded: true, Active: true}},
	}}
	line, err := r.ConsoleLine()
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := Scan(strings.NewReader("noise\n" + line + "\r\n"))
	if err != nil || got == nil || got.Selection == nil {
		t.Fatalf("Scan = %+v, %v; want the report with its selection", got, err)
	}
	if d := got.Selection.Drivers[0]; d.Chosen.Version != "2.0.0" || d.Candidates[0].Excluded != "version" || !d.Active {
		t.Errorf("selection after the round trip = %+v", d)
	}

	old := `{"format":1,"kernel":"6.1.0-56-cloud-amd64","cmdline":"root=/dev/vda","init_start":0.9,"devices":[],"modules":[{"name":"virtio_blk","result":"loaded","start":1,"end":1.1}],"events":[],"root":{"spec":"/dev/vda","device":"/dev/vda","fstype":"ext4","mounted":1.2},"drivers_ready":1.1,"switch_root":1.3}`
	var o Report
	if err := json.Unmarshal([]byte(old), &o); err != nil || o.Selection != nil || o.Modules[0].Name != "virtio_blk" || o.Root.Device != "/dev/vda" {
		t.Errorf("old report = %+v, %v", o, err)
	}
	// A report without a selection does not grow the key.
	b, _ := json.Marshal(&o)
	if strings.Contains(string(b), `"selection"`) {
		t.Errorf("report without selection marshals a selection key: %s", b)
	}
}
