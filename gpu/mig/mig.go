// Package mig knows which MIG (Multi-Instance GPU) layouts the GPUs present
// can take, from the profile tables of NVIDIA's MIG user guide, and turns a
// gpu.mig request of the instance YAML ("all-1g.18gb", "all-balanced",
// "all-disabled") into one layout per GPU or a refusal that names the GPU and
// what it offers. It decides only: the NVIDIA MIG manager applies the layout
// (kpreload never changes MIG mode); gpu/k8sconfig writes its config file.
package mig

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Layout names that are not "all-<profile>".
const (
	Disabled = "all-disabled"
	Enabled  = "all-enabled"
	Balanced = "all-balanced"
)

// Profile is one MIG profile a GPU model offers and how many instances of it
// alone fit on one GPU.
type Profile struct {
	Name string
	Max  int
}

// Model is a MIG-capable GPU model.
type Model struct {
	// Name is the product, such as "H200 141GB".
	Name string
	// IDs are its PCI vendor:device ids, lower case ("10de:2335").
	IDs []string
	// Profiles are its profiles, smallest first.
	Profiles []Profile
	// Balanced is the "all-balanced" layout of NVIDIA's MIG manager for it.
	Balanced map[string]int
}

// profiles builds the seven-slice profile list shared by every model: the
// memory sizes of the 1/8, 1/4, 3/8(1/2) and whole slices differ per model.
func profiles(m1, m2, m3, m7 string) []Profile {
	return []Profile{
		{"1g." + m1, 7}, {"1g." + m1 + "+me", 1}, {"1g." + m2, 4}, {"2g." + m2, 3},
		{"3g." + m3, 2}, {"4g." + m3, 1}, {"7g." + m7, 1},
	}
}

// Models is the table, from NVIDIA's MIG user guide ("Supported MIG
// Profiles"): A100 40GB and 80GB, H100 80GB and 94GB (NVL), H200 141GB.
var Models = []Model{
	{Name: "A100 40GB", IDs: []string{"10de:20b0", "10de:20f1"}, Profiles: profiles("5gb", "10gb", "20gb", "40gb"),
		Balanced: map[string]int{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}},
	{Name: "A100 80GB", IDs: []string{"10de:20b2", "10de:20b5"}, Profiles: profiles("10gb", "20gb", "40gb", "80gb"),
		Balanced: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
	{Name: "H100 80GB", IDs: []string{"10de:2330", "10de:2331"}, Profiles: profiles("10gb", "20gb", "40gb", "80gb"),
		Balanced: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
	{Name: "H100 NVL 94GB", IDs: []string{"10de:2321"}, Profiles: profiles("12gb", "24gb", "47gb", "94gb"),
		Balanced: map[string]int{"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}},
	{Name: "H200 141GB", IDs: []string{"10de:2335", "10de:233b"}, Profiles: profiles("18gb", "35gb", "71gb", "141gb"),
		Balanced: map[string]int{"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}},
}

// Lookup returns the model of a PCI id ("10de:2335"; case does not matter).
func Lookup(id string) (*Model, bool) {
	id = strings.ToLower(id)
	for i := range Models {
		if slices.Contains(Models[i].IDs, id) {
			return &Models[i], true
		}
	}
	return nil, false
}

// GPU is one GPU present: its PCI address and vendor:device id.
type GPU struct {
	Address string
	ID      string
}

// GPULayout is what a request means for one GPU.
type GPULayout struct {
	Address string `json:"address"`
	ID      string `json:"id"`
	// Model is the table's name for the GPU ("" when MIG stays off on a GPU
	// the table does not know).
	Model string `json:"model,omitempty"`
	// Enabled is MIG mode.
	Enabled bool `json:"enabled"`
	// Devices are the MIG devices to make: profile -> count.
	Devices map[string]int `json:"devices,omitempty"`
}

// Plan returns the layout of every GPU for request (all-disabled,
// all-enabled, all-balanced or all-<profile>), or an error that says which
// GPU cannot take it and what it offers. A request that needs MIG on a GPU
// the table does not know is refused (MIG is A100/H100/H200 and their kin).
func Plan(request string, gpus []GPU) ([]GPULayout, error) {
	if len(gpus) == 0 {
		return nil, fmt.Errorf("gpu.mig %s: no NVIDIA GPU is present", request)
	}
	profile, named := strings.CutPrefix(request, "all-")
	if !named || profile == "" {
		return nil, fmt.Errorf("gpu.mig %q: want all-disabled, all-enabled, all-balanced or all-<profile>", request)
	}
	var out []GPULayout
	var errs []string
	for _, g := range gpus {
		l := GPULayout{Address: g.Address, ID: strings.ToLower(g.ID)}
		m, known := Lookup(g.ID)
		if known {
			l.Model = m.Name
		}
		switch {
		case request == Disabled:
			out = append(out, l)
			continue
		case !known:
			errs = append(errs, fmt.Sprintf("GPU %s (%s) cannot take %s: it is not a MIG-capable GPU kpreload knows (MIG: %s)", g.Address, g.ID, request, knownModels()))
			continue
		}
		l.Enabled = true
		switch request {
		case Enabled:
			l.Devices = map[string]int{}
		case Balanced:
			l.Devices = maps.Clone(m.Balanced)
		default:
			i := slices.IndexFunc(m.Profiles, func(p Profile) bool { return p.Name == profile })
			if i < 0 {
				errs = append(errs, fmt.Sprintf("GPU %s (%s, %s) has no MIG profile %s; it offers %s (e.g. gpu.mig: all-%s)", g.Address, g.ID, m.Name, profile, names(m.Profiles), m.Profiles[0].Name))
				continue
			}
			l.Devices = map[string]int{profile: m.Profiles[i].Max}
		}
		out = append(out, l)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("gpu.mig %s refused: %s", request, strings.Join(errs, "; "))
	}
	return out, nil
}

func names(ps []Profile) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Name)
	}
	return strings.Join(s, ", ")
}

func knownModels() string {
	var s []string
	for _, m := range Models {
		s = append(s, m.Name)
	}
	return strings.Join(s, ", ")
}

// DeviceFilter is the MIG manager's device-filter form of a PCI id:
// "10de:2335" -> "0x233510DE" (device, then vendor).
func DeviceFilter(id string) string {
	vendor, device, ok := strings.Cut(strings.ToUpper(id), ":")
	if !ok {
		return ""
	}
	return "0x" + device + vendor
}
