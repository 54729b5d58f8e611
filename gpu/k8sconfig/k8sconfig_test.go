//go:build cgo

package k8sconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	dpv1 "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	migv1 "github.com/NVIDIA/mig-parted/api/spec/v1"
	"sigs.k8s.io/yaml"

	"github.com/kpreload/kpreload/report"
)

func selection(sharing string, replicas int, m *report.SelectionMIG) *report.Selection {
	return &report.Selection{Request: report.SelectionRequest{Sharing: sharing, SharingReplicas: replicas}, MIG: m}
}

var (
	h200 = report.SelectionMIGGPU{Address: "0000:00:06.0", ID: "10de:2335", Model: "H200 141GB", Enabled: true, Devices: map[string]int{"1g.18gb": 7}}
	h100 = report.SelectionMIGGPU{Address: "0000:00:07.0", ID: "10de:2330", Model: "H100 80GB", Enabled: true, Devices: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}
)

// readDevicePlugin parses a written device plugin file with the plugin's types.
func readDevicePlugin(t *testing.T, b []byte) dpv1.Config {
	t.Helper()
	var c dpv1.Config
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("the device plugin's types refuse the file: %v\n%s", err, b)
	}
	return c
}

// readMIG parses a written MIG file with mig-parted's types (its decoders
// validate every field, the devices and each profile name's format).
func readMIG(t *testing.T, b []byte) migv1.Spec {
	t.Helper()
	var s migv1.Spec
	if err := yaml.Unmarshal(b, &s); err != nil {
		t.Fatalf("mig-parted's types refuse the file: %v\n%s", err, b)
	}
	return s
}

func TestFiles(t *testing.T) {
	for _, tc := range []struct {
		name         string
		sel          *report.Selection
		wantSharing  dpv1.SharingStrategy
		wantStrategy string
		wantNames    []string
		wantMIG      map[string]int // per GPU id: the number of entries' devices
	}{
		{"time-slicing alone", selection("time-slicing", 4, nil), dpv1.SharingStrategyTimeSlicing, "none", []string{"nvidia.com/gpu"}, nil},
		{"mps alone", selection("mps", 8, nil), dpv1.SharingStrategyMPS, "none", []string{"nvidia.com/gpu"}, nil},
		{"mig single", selection("", 0, &report.SelectionMIG{Request: "all-1g.18gb", GPUs: []report.SelectionMIGGPU{h200}}), dpv1.SharingStrategyNone, "single", nil, map[string]int{"10de:2335": 7}},
		{"mig single + time-slicing", selection("time-slicing", 2, &report.SelectionMIG{Request: "all-1g.18gb", GPUs: []report.SelectionMIGGPU{h200}}), dpv1.SharingStrategyTimeSlicing, "single", []string{"nvidia.com/gpu"}, map[string]int{"10de:2335": 7}},
		{"mig mixed + mps", selection("mps", 2, &report.SelectionMIG{Request: "all-balanced", GPUs: []report.SelectionMIGGPU{h100}}), dpv1.SharingStrategyMPS, "mixed", []string{"nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"}, map[string]int{"10de:2330": 4}},
		{"mig disabled", selection("", 0, &report.SelectionMIG{Request: "all-disabled", GPUs: []report.SelectionMIGGPU{{Address: "0000:00:06.0", ID: "10de:2335"}}}), dpv1.SharingStrategyNone, "none", nil, map[string]int{"10de:2335": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := Files(tc.sel)
			if err != nil {
				t.Fatal(err)
			}
			dp := readDevicePlugin(t, files[DevicePluginFile])
			if got := dp.Sharing.SharingStrategy(); got != tc.wantSharing {
				t.Errorf("sharing strategy %q, want %q", got, tc.wantSharing)
			}
			if dp.Flags.MigStrategy == nil || *dp.Flags.MigStrategy != tc.wantStrategy {
				t.Errorf("migStrategy %v, want %s", dp.Flags.MigStrategy, tc.wantStrategy)
			}
			var names []string
			for _, r := range dp.Sharing.ReplicatedResources().Resources {
				names = append(names, string(r.Name))
				if r.Replicas != tc.sel.Request.SharingReplicas {
					t.Errorf("%s replicas %d, want %d", r.Name, r.Replicas, tc.sel.Request.SharingReplicas)
				}
			}
			if !reflect.DeepEqual(names, tc.wantNames) {
				t.Errorf("replicated resources %v, want %v", names, tc.wantNames)
			}
			b, ok := files[MIGConfigFile]
			if ok != (tc.wantMIG != nil) {
				t.Fatalf("MIG file written = %v, want %v", ok, tc.wantMIG != nil)
			}
			if !ok {
				return
			}
			spec := readMIG(t, b)
			entries := spec.MigConfigs[tc.sel.MIG.Request]
			if spec.Version != migv1.Version || len(entries) != len(tc.wantMIG) {
				t.Fatalf("MIG spec %+v, want config %s with %d entries", spec, tc.sel.MIG.Request, len(tc.wantMIG))
			}
			for _, e := range entries {
				if e.Devices != "all" {
					t.Errorf("devices %v", e.Devices)
				}
				n := 0
				for _, c := range e.MigDevices {
					n += c
				}
				filter, _ := e.DeviceFilter.([]string)
				found := false
				for id, want := range tc.wantMIG {
					if len(filter) == 1 && strings.EqualFold(filter[0], "0x"+id[5:]+id[:4]) {
						found = true
						if n != want {
							t.Errorf("%s: %d MIG devices, want %d", id, n, want)
						}
					}
				}
				if !found {
					t.Errorf("entry filter %v names no GPU of %v", e.DeviceFilter, tc.wantMIG)
				}
				// mig-parted's own format check of the devices (also run by its decoder).
				if err := e.MigDevices.AssertValidFormat(); err != nil {
					t.Errorf("mig-devices %v: %v", e.MigDevices, err)
				}
			}
		})
	}
}

func TestNothingAsked(t *testing.T) {
	for _, sel := range []*report.Selection{nil, selection("", 0, nil), selection("", 0, &report.SelectionMIG{Request: "all-1g.10gb", Refusal: "refused"})} {
		files, err := Files(sel)
		if err != nil || len(files) != 0 {
			t.Errorf("Files(%+v) = %v, %v; want nothing", sel, files, err)
		}
	}
}

// TestRefresh writes, rewrites and removes: a file never outlives the request.
func TestRefresh(t *testing.T) {
	root := t.TempDir()
	sel := selection("time-slicing", 4, &report.SelectionMIG{Request: "all-1g.18gb", GPUs: []report.SelectionMIGGPU{h200}})
	written, removed, err := Refresh(root, sel)
	if err != nil || len(written) != 2 || len(removed) != 0 {
		t.Fatalf("Refresh = %v, %v, %v; want 2 written", written, removed, err)
	}
	written, removed, err = Refresh(root, selection("mps", 2, nil))
	if err != nil || len(written) != 1 || len(removed) != 1 || removed[0] != filepath.Join(root, MIGConfigFile) {
		t.Fatalf("Refresh without MIG = %v, %v, %v; want the MIG file removed", written, removed, err)
	}
	b, _ := os.ReadFile(filepath.Join(root, DevicePluginFile))
	if dp := readDevicePlugin(t, b); dp.Sharing.SharingStrategy() != dpv1.SharingStrategyMPS {
		t.Errorf("rewritten file says %s", dp.Sharing.SharingStrategy())
	}
	if _, removed, err := Refresh(root, nil); err != nil || len(removed) != 1 {
		t.Errorf("Refresh(nil) removed %v, %v", removed, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "etc/kpreload/k8s")); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}
