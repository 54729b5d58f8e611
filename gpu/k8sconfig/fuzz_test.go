//go:build cgo

package k8sconfig

import (
	"encoding/json"
	"strings"
	"testing"

	dpv1 "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	migv1 "github.com/NVIDIA/mig-parted/api/spec/v1"
	"sigs.k8s.io/yaml"

	"github.com/kpreload/kpreload/report"
)

// FuzzFiles checks what `kpreload k8s refresh` makes of a boot report
// (/run/kpreload/report.json, or any file given with --report): the
// selection's gpu.sharing and gpu.mig sections, which come from the instance
// YAML, become the device plugin's and the MIG manager's config files. No
// panic; an error comes without files; a file is written exactly when the
// decision asks for it; and every file written reads back with NVIDIA's own
// config readers (the device plugin's api/config/v1 and mig-parted's
// api/spec/v1 decoders, which validate it) saying what was asked: the
// sharing strategy and replicas, and one MIG config named after the request
// with one entry per GPU model.
func FuzzFiles(f *testing.F) {
	for _, sel := range []*report.Selection{
		selection("time-slicing", 4, nil), selection("mps", 8, nil),
		selection("", 0, &report.SelectionMIG{Request: "all-1g.18gb", GPUs: []report.SelectionMIGGPU{h200}}),
		selection("time-slicing", 2, &report.SelectionMIG{Request: "all-1g.18gb", GPUs: []report.SelectionMIGGPU{h200, h200}}),
		selection("mps", 2, &report.SelectionMIG{Request: "all-balanced", GPUs: []report.SelectionMIGGPU{h100, h200}}),
		selection("", 0, &report.SelectionMIG{Request: "all-disabled", GPUs: []report.SelectionMIGGPU{{Address: "0000:00:06.0", ID: "10de:2335"}}}),
		selection("", 0, &report.SelectionMIG{Request: "all-1g.10gb", Refusal: "refused"}),
		selection("time-slicing", 0, nil), selection("mps", -1, nil), selection("spatial", 2, nil),
		selection("", 0, &report.SelectionMIG{Request: "x"}), nil,
	} {
		b, err := json.Marshal(report.Report{Format: 1, Selection: sel})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"selection":{"request":{"sharing":"time-slicing","sharing_replicas":2},"mig":{"request":"all-1g.10gb","gpus":[{"id":"10de:2330","enabled":true,"devices":{"1g.10gb":7,"2g.20gb":0}}]}}}`))
	f.Add([]byte(`{"selection":{"mig":{"request":"","gpus":[{"id":"nocolon","enabled":true,"devices":{"bogus":1}}]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var rep report.Report
		if err := json.Unmarshal(data, &rep); err != nil {
			return // refused before k8sconfig sees it
		}
		sel := rep.Selection
		files, err := Files(sel)
		if err != nil {
			if files != nil {
				t.Fatalf("Files returned %v and error %v", files, err)
			}
			return
		}
		mig := sel != nil && sel.MIG != nil && sel.MIG.Refusal == ""
		wantDP := sel != nil && (sel.Request.Sharing != "" || mig)
		if _, ok := files[DevicePluginFile]; ok != wantDP {
			t.Fatalf("device plugin file written = %v for %+v, want %v", ok, sel, wantDP)
		}
		if _, ok := files[MIGConfigFile]; ok != mig || len(files) != btoi(wantDP)+btoi(mig) {
			t.Fatalf("files %v for %+v: MIG file written = %v, want %v", files, sel, ok, mig)
		}
		if b, ok := files[DevicePluginFile]; ok {
			var c dpv1.Config
			if err := yaml.Unmarshal(b, &c); err != nil {
				t.Fatalf("the device plugin's reader refuses\n%s\n: %v", b, err)
			}
			want := map[string]dpv1.SharingStrategy{"": dpv1.SharingStrategyNone, "time-slicing": dpv1.SharingStrategyTimeSlicing, "mps": dpv1.SharingStrategyMPS}[sel.Request.Sharing]
			if c.Version != dpv1.Version || c.Flags.MigStrategy == nil || c.Sharing.SharingStrategy() != want {
				t.Fatalf("device plugin config %+v, want version %s, a MIG strategy, sharing %q", c, dpv1.Version, want)
			}
			for _, r := range c.Sharing.ReplicatedResources().Resources {
				if r.Replicas != sel.Request.SharingReplicas || r.Replicas < 2 && want != dpv1.SharingStrategyNone {
					t.Fatalf("%s: %d replicas, want %d (at least 2)", r.Name, r.Replicas, sel.Request.SharingReplicas)
				}
			}
		}
		if b, ok := files[MIGConfigFile]; ok {
			var s migv1.Spec
			if err := yaml.Unmarshal(b, &s); err != nil {
				t.Fatalf("mig-parted's reader refuses\n%s\n: %v", b, err)
			}
			ids := map[string]bool{}
			for _, g := range sel.MIG.GPUs {
				ids[g.ID] = true
			}
			entries, ok := s.MigConfigs[sel.MIG.Request]
			if s.Version != migv1.Version || len(s.MigConfigs) != 1 || !ok || len(entries) != len(ids) {
				t.Fatalf("MIG spec %+v, want one config %q with %d entries", s, sel.MIG.Request, len(ids))
			}
			for _, e := range entries {
				if err := e.MigDevices.AssertValidFormat(); err != nil {
					t.Fatalf("mig-devices %v: %v", e.MigDevices, err)
				}
				if filter, _ := e.DeviceFilter.([]string); len(filter) != 1 || !strings.HasPrefix(filter[0], "0x") {
					t.Fatalf("entry %+v: device-filter %v, want one PCI id", e, e.DeviceFilter)
				}
			}
		}
	})
}

// TestMIGConfigRefusesLayouts checks that a report's MIG layout that gpu/mig
// could not have planned is refused rather than written for the MIG manager
// (FuzzFiles found these: a profile name mig-parted cannot parse, MIG
// devices with MIG mode off).
func TestMIGConfigRefusesLayouts(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpu  report.SelectionMIGGPU
		want string // "" when the layout is accepted
	}{
		{"planned", h100, ""},
		{"disabled on a GPU the table does not know", report.SelectionMIGGPU{Address: "a", ID: "10de:1eb8"}, ""},
		{"unknown profile", report.SelectionMIGGPU{Address: "a", ID: "10de:2330", Enabled: true, Devices: map[string]int{"1g.10gb": 7, "2g.20gbllllllll": 0}}, `has no MIG profile "2g.20gbllllllll"`},
		{"another model's profile", report.SelectionMIGGPU{Address: "a", ID: "10de:2330", Enabled: true, Devices: map[string]int{"1g.18gb": 1}}, `the H100 80GB has no MIG profile "1g.18gb"`},
		{"too many", report.SelectionMIGGPU{Address: "a", ID: "10de:2335", Enabled: true, Devices: map[string]int{"1g.18gb": 8}}, "8 MIG devices 1g.18gb, want 0 to 7"},
		{"negative", report.SelectionMIGGPU{Address: "a", ID: "10de:2335", Enabled: true, Devices: map[string]int{"1g.18gb": -1}}, "-1 MIG devices 1g.18gb"},
		{"enabled on an unknown model", report.SelectionMIGGPU{Address: "a", ID: "10de:1eb8", Enabled: true}, "not a MIG-capable model"},
		{"devices with MIG off", report.SelectionMIGGPU{Address: "a", ID: "10de:2330", Devices: map[string]int{"1g.10gb": 2}}, "MIG devices on a GPU whose MIG mode stays off"},
		{"bad id", report.SelectionMIGGPU{Address: "a", ID: "nocolon"}, `id "nocolon" is not a PCI vendor:device id`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MIGConfig(selection("", 0, &report.SelectionMIG{Request: "r", GPUs: []report.SelectionMIGGPU{tc.gpu}}))
			switch {
			case tc.want == "" && (err != nil || got == nil):
				t.Errorf("MIGConfig(%+v) = %+v, %v; want a config", tc.gpu, got, err)
			case tc.want != "" && (err == nil || got != nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("MIGConfig(%+v) = %+v, %v; want an error containing %q", tc.gpu, got, err, tc.want)
			}
		})
	}
}

// TestSharingWithoutMIGDevices checks that gpu.sharing with gpu.mig
// all-enabled (MIG on, no MIG devices) is refused: FuzzFiles found that the
// sharing request was silently dropped (a mixed strategy with no resource to
// replicate reads back as no sharing).
func TestSharingWithoutMIGDevices(t *testing.T) {
	enabled := report.SelectionMIGGPU{Address: "0000:00:06.0", ID: "10de:2335", Model: "H200 141GB", Enabled: true, Devices: map[string]int{}}
	for _, sharing := range []string{"time-slicing", "mps"} {
		files, err := Files(selection(sharing, 2, &report.SelectionMIG{Request: "all-enabled", GPUs: []report.SelectionMIGGPU{enabled}}))
		if want := "gpu.sharing " + sharing + " has nothing to share: gpu.mig all-enabled makes no MIG devices"; err == nil || files != nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Files(%s with all-enabled) = %v, %v; want an error containing %q", sharing, files, err, want)
		}
	}
	// Without sharing, all-enabled still writes both files.
	files, err := Files(selection("", 0, &report.SelectionMIG{Request: "all-enabled", GPUs: []report.SelectionMIGGPU{enabled}}))
	if err != nil || len(files) != 2 {
		t.Errorf("Files(all-enabled) = %v, %v; want the device plugin and MIG files", files, err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
