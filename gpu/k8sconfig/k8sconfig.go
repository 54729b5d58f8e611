// Package k8sconfig writes how Kubernetes should share the GPUs of a
// kpreload VM, as its instance YAML asked (gpu.sharing, gpu.mig), in the
// formats NVIDIA's own components read: the device plugin's config file
// (time-slicing or MPS replicas, MIG strategy) and the MIG manager's
// (mig-parted) config file.
//
// The device plugin's file is built with its project's Go API types
// (github.com/NVIDIA/k8s-device-plugin/api/config/v1) and read back through
// their decoders before it is written. The MIG manager's API package
// (github.com/NVIDIA/mig-parted/api/spec/v1) imports go-nvml, which needs cgo,
// and the kpreload binary is static (images carry it); so the MIG file is
// built with MIGSpec, a copy of mig-parted's v1 schema (its field names and
// YAML shape), and the package's tests read every file it makes back with
// mig-parted's own types and validation. kpreload never changes MIG mode itself: the MIG manager applies
// the layout, and a layout the GPUs cannot take was already refused by the
// boot's decision (gpu/mig), which leaves no MIG file.
package k8sconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	dpv1 "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/kpreload/kpreload/gpu/mig"
	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/report"
)

// Paths of the files, relative to the root.
const (
	DevicePluginFile = "etc/kpreload/k8s/device-plugin.yaml"
	MIGConfigFile    = "etc/kpreload/k8s/mig-config.yaml"
)

// ResourceName is the resource the device plugin advertises for whole GPUs
// (and for MIG devices under the "single" strategy).
const ResourceName = "nvidia.com/gpu"

// migStrategy is the device plugin's MIG strategy for a decision: "single"
// when every GPU has MIG devices of one profile (they are advertised as
// nvidia.com/gpu), "mixed" when profiles differ (nvidia.com/mig-<profile>),
// "none" without MIG.
func migStrategy(m *report.SelectionMIG) (string, []string) {
	if m == nil || m.Refusal != "" {
		return dpv1.MigStrategyNone, nil
	}
	profiles := map[string]bool{}
	enabled := false
	for _, g := range m.GPUs {
		enabled = enabled || g.Enabled
		for p := range g.Devices {
			profiles[p] = true
		}
	}
	switch {
	case !enabled:
		return dpv1.MigStrategyNone, nil
	case len(profiles) == 1:
		return dpv1.MigStrategySingle, nil
	}
	return dpv1.MigStrategyMixed, slices.Sorted(maps.Keys(profiles))
}

// DevicePlugin returns the device plugin configuration the decision asks
// for, or nil when it asks neither sharing nor MIG.
func DevicePlugin(sel *report.Selection) (*dpv1.Config, error) {
	if sel == nil || (sel.Request.Sharing == "" && (sel.MIG == nil || sel.MIG.Refusal != "")) {
		return nil, nil
	}
	strategy, profiles := migStrategy(sel.MIG)
	cfg := &dpv1.Config{Version: dpv1.Version}
	cfg.Flags.MigStrategy = &strategy
	if r := sel.Request; r.Sharing != "" {
		names := []dpv1.ResourceName{ResourceName}
		if strategy == dpv1.MigStrategyMixed {
			names = nil
			for _, p := range profiles {
				names = append(names, dpv1.ResourceName("nvidia.com/mig-"+p))
			}
		}
		if len(names) == 0 {
			// MIG on with no MIG devices planned (all-enabled): the
			// plugin would advertise nothing to share, and a config
			// without resources reads back as no sharing at all.
			return nil, fmt.Errorf("device plugin config: gpu.sharing %s has nothing to share: gpu.mig %s makes no MIG devices (name a layout, such as all-balanced)", r.Sharing, sel.MIG.Request)
		}
		rr := dpv1.ReplicatedResources{}
		for _, n := range names {
			rr.Resources = append(rr.Resources, dpv1.ReplicatedResource{Name: n, Devices: dpv1.ReplicatedDevices{All: true}, Replicas: r.SharingReplicas})
		}
		switch r.Sharing {
		case "time-slicing":
			cfg.Sharing.TimeSlicing = rr
		case "mps":
			cfg.Sharing.MPS = &rr
		default:
			return nil, fmt.Errorf("device plugin config: unknown sharing strategy %q", r.Sharing)
		}
	}
	return cfg, nil
}

// MIGSpecVersion is the version of mig-parted's config schema MIGSpec follows.
const MIGSpecVersion = "v1"

// MIGSpec is mig-parted's v1 config file (api/spec/v1.Spec): named configs,
// each a list of entries for sets of GPUs.
type MIGSpec struct {
	Version    string                     `json:"version"`
	MigConfigs map[string][]MIGConfigSpec `json:"mig-configs"`
}

// MIGConfigSpec is one entry of a MIG config (api/spec/v1.MigConfigSpec):
// the GPUs it applies to (devices "all", narrowed by device-filter, PCI ids
// as "0x<device><vendor>"), MIG mode and the MIG devices to make.
type MIGConfigSpec struct {
	DeviceFilter []string       `json:"device-filter,omitempty"`
	Devices      string         `json:"devices"`
	MigEnabled   bool           `json:"mig-enabled"`
	MigDevices   map[string]int `json:"mig-devices"`
}

// MIGConfig returns the MIG manager's configuration for the decision: one
// config named after the request (the value of the node label
// nvidia.com/mig.config), one entry per GPU model present, filtered by its
// PCI id. It is nil when the decision has no MIG request or refused it.
func MIGConfig(sel *report.Selection) (*MIGSpec, error) {
	if sel == nil || sel.MIG == nil || sel.MIG.Refusal != "" {
		return nil, nil
	}
	var entries []MIGConfigSpec
	seen := map[string]bool{}
	for _, g := range sel.MIG.GPUs {
		if err := checkLayout(g); err != nil {
			return nil, err
		}
		if seen[g.ID] {
			continue
		}
		seen[g.ID] = true
		e := MIGConfigSpec{
			DeviceFilter: []string{mig.DeviceFilter(g.ID)},
			Devices:      "all",
			MigEnabled:   g.Enabled,
			MigDevices:   map[string]int{},
		}
		for p, n := range g.Devices {
			e.MigDevices[p] = n
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return nil, errors.New("MIG config: the decision names no GPU")
	}
	return &MIGSpec{Version: MIGSpecVersion, MigConfigs: map[string][]MIGConfigSpec{sel.MIG.Request: entries}}, nil
}

// pciIDRE matches a PCI vendor:device id in hex, such as "10de:2335".
var pciIDRE = regexp.MustCompile(`^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}$`)

// checkLayout refuses a GPU layout gpu/mig could not have planned (the
// decision is read back from a report file): an id that is not a PCI
// vendor:device, MIG devices with MIG mode off, MIG on a model the table
// does not know, or MIG devices of a profile the model does not offer or
// more of one than fit on a GPU. The MIG manager would refuse such a file,
// or apply what nobody asked for.
func checkLayout(g report.SelectionMIGGPU) error {
	if !pciIDRE.MatchString(g.ID) {
		return fmt.Errorf("MIG config: GPU %s: id %q is not a PCI vendor:device id", g.Address, g.ID)
	}
	switch {
	case !g.Enabled && len(g.Devices) == 0:
		return nil
	case !g.Enabled:
		return fmt.Errorf("MIG config: GPU %s (%s): MIG devices on a GPU whose MIG mode stays off", g.Address, g.ID)
	}
	m, ok := mig.Lookup(g.ID)
	if !ok {
		return fmt.Errorf("MIG config: GPU %s (%s) is not a MIG-capable model kpreload knows", g.Address, g.ID)
	}
	for _, p := range slices.Sorted(maps.Keys(g.Devices)) {
		n := g.Devices[p]
		i := slices.IndexFunc(m.Profiles, func(q mig.Profile) bool { return q.Name == p })
		switch {
		case i < 0:
			return fmt.Errorf("MIG config: GPU %s (%s): the %s has no MIG profile %q", g.Address, g.ID, m.Name, p)
		case n < 0 || n > m.Profiles[i].Max:
			return fmt.Errorf("MIG config: GPU %s (%s): %d MIG devices %s, want 0 to %d", g.Address, g.ID, n, p, m.Profiles[i].Max)
		}
	}
	return nil
}

// MarshalDevicePlugin renders cfg as YAML and reads it back with the device
// plugin's own types (their decoders check the replicas); the strategy read
// back must be the one asked for.
func MarshalDevicePlugin(cfg *dpv1.Config) ([]byte, error) {
	j, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("device plugin config: %w", err)
	}
	// The types marshal an unused sharing strategy as an empty object
	// ("timeSlicing": {}), which their own decoder refuses ("no resources
	// specified"): drop the empty sections, as the plugin's examples do.
	var doc map[string]any
	if err := json.Unmarshal(j, &doc); err != nil {
		return nil, fmt.Errorf("device plugin config: %w", err)
	}
	dropEmpty(doc)
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("device plugin config: %w", err)
	}
	var back dpv1.Config
	if err := yaml.Unmarshal(b, &back); err != nil {
		return nil, fmt.Errorf("device plugin config does not read back with the plugin's types: %w", err)
	}
	if back.Version != dpv1.Version || back.Sharing.SharingStrategy() != cfg.Sharing.SharingStrategy() {
		return nil, fmt.Errorf("device plugin config reads back as version %q, sharing %q (want %q, %q)", back.Version, back.Sharing.SharingStrategy(), dpv1.Version, cfg.Sharing.SharingStrategy())
	}
	return append([]byte(header("NVIDIA k8s-device-plugin (--config-file)")), b...), nil
}

// MarshalMIG renders spec as YAML (the tests read it back with mig-parted's
// own types and validation).
func MarshalMIG(spec *MIGSpec) ([]byte, error) {
	b, err := yaml.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("MIG config: %w", err)
	}
	return append([]byte(header("NVIDIA mig-manager / nvidia-mig-parted (CONFIG_FILE)")), b...), nil
}

// dropEmpty removes empty objects (and the nulls of unset flags) from a
// decoded JSON document, recursively.
func dropEmpty(m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			dropEmpty(v)
			if len(v) == 0 {
				delete(m, k)
			}
		}
	}
}

func header(reader string) string {
	return "# Written by kpreload at boot from the instance YAML's gpu.sharing / gpu.mig\n# (see /run/kpreload/report.json); read by the " + reader + ".\n"
}

// Files returns the files the decision asks for (path relative to the root
// -> content); a file it does not ask for is absent from the map.
func Files(sel *report.Selection) (map[string][]byte, error) {
	out := map[string][]byte{}
	dp, err := DevicePlugin(sel)
	if err != nil {
		return nil, err
	}
	if dp != nil {
		if out[DevicePluginFile], err = MarshalDevicePlugin(dp); err != nil {
			return nil, err
		}
	}
	mc, err := MIGConfig(sel)
	if err != nil {
		return nil, err
	}
	if mc != nil {
		if out[MIGConfigFile], err = MarshalMIG(mc); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Refresh writes the files the decision asks for under root (each to a
// temporary file, synced and renamed) and removes the ones it does not ask
// for, so a file never outlives the request that made it. It returns what it
// wrote and removed.
func Refresh(root string, sel *report.Selection) (written, removed []string, err error) {
	files, err := Files(sel)
	if err != nil {
		return nil, nil, err
	}
	for _, rel := range []string{DevicePluginFile, MIGConfigFile} {
		path := filepath.Join(root, rel)
		b, ok := files[rel]
		if !ok {
			if err := os.Remove(path); err == nil {
				removed = append(removed, path)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return written, removed, err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return written, removed, err
		}
		if err := fileutil.WriteAtomic(path, b, 0o644, true); err != nil {
			return written, removed, err
		}
		written = append(written, path)
	}
	return written, removed, nil
}
