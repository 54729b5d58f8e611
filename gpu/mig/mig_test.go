package mig

import (
	"reflect"
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	h200 := GPU{Address: "0000:00:06.0", ID: "10de:2335"}
	h100 := GPU{Address: "0000:00:07.0", ID: "10de:2330"}
	v100 := GPU{Address: "0000:00:08.0", ID: "10de:1db4"}
	for _, tc := range []struct {
		name    string
		request string
		gpus    []GPU
		want    []map[string]int
		err     string
	}{
		{"h200 1g.18gb", "all-1g.18gb", []GPU{h200}, []map[string]int{{"1g.18gb": 7}}, ""},
		{"h200 3g.71gb", "all-3g.71gb", []GPU{h200}, []map[string]int{{"3g.71gb": 2}}, ""},
		{"h200 media", "all-1g.18gb+me", []GPU{h200}, []map[string]int{{"1g.18gb+me": 1}}, ""},
		{"h100 balanced", "all-balanced", []GPU{h100}, []map[string]int{{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}, ""},
		{"enabled", "all-enabled", []GPU{h200}, []map[string]int{{}}, ""},
		{"disabled anywhere", "all-disabled", []GPU{v100, h200}, []map[string]int{nil, nil}, ""},
		{"h200 asked an h100 profile", "all-1g.10gb", []GPU{h200}, nil,
			"GPU 0000:00:06.0 (10de:2335, H200 141GB) has no MIG profile 1g.10gb; it offers 1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb (e.g. gpu.mig: all-1g.18gb)"},
		{"mixed h100 and h200", "all-1g.10gb", []GPU{h100, h200}, nil, "GPU 0000:00:06.0 (10de:2335, H200 141GB) has no MIG profile 1g.10gb"},
		{"v100", "all-1g.5gb", []GPU{v100}, nil, "GPU 0000:00:08.0 (10de:1db4) cannot take all-1g.5gb: it is not a MIG-capable GPU kpreload knows"},
		{"no gpu", "all-1g.18gb", nil, nil, "no NVIDIA GPU is present"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Plan(tc.request, tc.gpus)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Plan error = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var devs []map[string]int
			for _, l := range got {
				devs = append(devs, l.Devices)
				if l.Enabled != (tc.request != Disabled) {
					t.Errorf("GPU %s enabled = %v", l.Address, l.Enabled)
				}
			}
			if !reflect.DeepEqual(devs, tc.want) {
				t.Errorf("devices = %v, want %v", devs, tc.want)
			}
		})
	}
}

// TestTable checks the table's shape: every model has the seven profiles of
// the guide, a balanced layout made of its own profiles that fits 7 slices.
func TestTable(t *testing.T) {
	slices := map[string]int{"1g": 1, "2g": 2, "3g": 3, "4g": 4, "7g": 7}
	for _, m := range Models {
		if len(m.Profiles) != 7 {
			t.Errorf("%s: %d profiles", m.Name, len(m.Profiles))
		}
		used := 0
		for p, n := range m.Balanced {
			ok := false
			for _, q := range m.Profiles {
				ok = ok || q.Name == p
			}
			if !ok {
				t.Errorf("%s: balanced profile %s is not one of its profiles", m.Name, p)
			}
			used += slices[p[:2]] * n
		}
		if used > 7 {
			t.Errorf("%s: balanced layout uses %d slices", m.Name, used)
		}
		for _, id := range m.IDs {
			if got, ok := Lookup(strings.ToUpper(id)); !ok || got.Name != m.Name {
				t.Errorf("Lookup(%s) = %v", id, got)
			}
		}
	}
	if got := DeviceFilter("10de:2335"); got != "0x233510DE" {
		t.Errorf("DeviceFilter = %s", got)
	}
}
