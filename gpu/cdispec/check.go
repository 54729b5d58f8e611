package cdispec

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/internal/inroot"
)

// The states Verify finds the active driver's spec in.
const (
	// SpecMatches: the file is kpreload's and byte for byte the spec the
	// loaded driver gives now.
	SpecMatches = "matches"
	// SpecMissing: no file where kpreload keeps the active driver's spec.
	SpecMissing = "missing"
	// SpecDiffers: kpreload's file describes something else than the
	// loaded driver (another version, other devices).
	SpecDiffers = "differs"
	// SpecNotOwn: a file kpreload did not write is at kpreload's name.
	SpecNotOwn = "not-kpreload"
	// SpecOff: the configuration turns the active driver's spec off.
	SpecOff = "off"
	// SpecNone: no driver is active, or kpreload writes no spec for it.
	SpecNone = "none"
	// SpecUnchecked: the loaded driver's spec could not be made to compare.
	SpecUnchecked = "unchecked"
)

// Verification says whether the CDI spec files kpreload keeps agree with
// the active driver, as RefreshActive would leave them.
type Verification struct {
	// Driver and Version are the active driver ("" when none is).
	Driver  string `json:"driver,omitempty"`
	Version string `json:"version,omitempty"`
	// File and Kind are where kpreload keeps the active driver's spec and
	// its CDI kind ("" when it keeps none for it).
	File string `json:"file,omitempty"`
	Kind string `json:"kind,omitempty"`
	// State is one of the Spec* states.
	State string `json:"state"`
	// Why says what is wrong, or why nothing was compared.
	Why string `json:"why,omitempty"`
	// Stale are spec files kpreload wrote for a driver that is not active.
	Stale []string `json:"stale,omitempty"`
	// Conflicts are specs kpreload did not write that define the same
	// device names as File, and what container runtimes make of them.
	Conflicts []string `json:"conflicts,omitempty"`
}

// Verify reads the system at root (its /run/kpreload/ready, the CDI
// directories, and what Generate and GenerateEdu read) and says whether the
// spec kpreload keeps for the active driver is the one the loaded driver
// gives now, and which of its other spec files are left over. It changes
// nothing. The spec is made with the hook path the file names, so a spec
// written with --hook-path still matches.
func Verify(root string) (Verification, error) {
	var v Verification
	ready, err := activate.ReadReadyIn(root, activate.RunDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return v, err
	}
	if ready != nil {
		v.Driver, v.Version = ready.Driver, ready.Version
	}
	conf, cerr := ReadConfig(root)
	if cerr != nil {
		return v, cerr
	}
	v.State, v.Why = SpecNone, "no driver is active"
	if ready != nil {
		v.Why = "kpreload writes no CDI spec for driver " + ready.Driver
	}
	for _, k := range specKinds {
		o, err := Check(root, k.file)
		if err != nil {
			return v, err
		}
		if ready == nil || ready.Driver != k.driver {
			if o.Own {
				v.Stale = append(v.Stale, k.file)
			}
			continue
		}
		v.File, v.Kind = k.file, k.kind
		if off := nvidiaOff(conf); k.driver == "nvidia" && off != "" {
			v.State, v.Why = SpecOff, off
			if o.Own {
				v.Stale = append(v.Stale, k.file)
			}
			continue
		}
		v.State, v.Why = compare(root, k, o)
		if v.State == SpecMatches || v.State == SpecDiffers {
			if b, err := inroot.ReadFile(root, k.file, inroot.MaxLarge); err == nil {
				if written, err := cdi.ParseSpec(b); err == nil {
					left, err := foreignSpecs(root, k.file, written)
					if err != nil {
						return v, err
					}
					v.Conflicts = conflicts(k.file, k.kind, left)
				}
			}
		}
	}
	return v, nil
}

// compare says whether the file of kind k, found as o, is the spec the
// loaded driver gives now.
func compare(root string, k specKind, o Ownership) (state, why string) {
	switch {
	case !o.Exists:
		return SpecMissing, "no spec at " + k.file
	case !o.Own:
		return SpecNotOwn, k.file + " is not a spec kpreload wrote (" + o.Why + ")"
	}
	have, err := inroot.ReadFile(root, k.file, inroot.MaxLarge)
	if err != nil {
		return SpecUnchecked, err.Error()
	}
	parsed, perr := cdi.ParseSpec(have)
	opts := Options{}
	if perr == nil {
		opts.HookPath = hookPath(parsed)
	}
	spec, _, err := k.generate(root, opts)
	if errors.Is(err, ErrNoDriver) {
		return SpecDiffers, "the spec describes a driver that is not loaded (" + err.Error() + ")"
	}
	if err != nil {
		return SpecUnchecked, err.Error()
	}
	want, err := Marshal(spec, false)
	if err != nil {
		return SpecUnchecked, err.Error()
	}
	if bytes.Equal(have, Mark(want)) {
		return SpecMatches, ""
	}
	if perr != nil {
		return SpecDiffers, "the spec does not parse: " + perr.Error()
	}
	if got, now := specVersion(parsed), specVersion(spec); got != now && got != "" {
		return SpecDiffers, fmt.Sprintf("the spec describes version %s, the loaded driver is %s", got, now)
	}
	return SpecDiffers, "the spec differs from the one the loaded driver gives now (kpreload cdi generate prints it)"
}

// hookPath is the program the spec's first hook runs ("" when none).
func hookPath(s *specs.Spec) string {
	for _, h := range s.ContainerEdits.Hooks {
		if h != nil && h.Path != "" {
			return h.Path
		}
	}
	return ""
}

// specVersion is the driver version whose userspace a spec mounts (the
// directory under activate.DriversDir its first such mount comes from), ""
// when it mounts none.
func specVersion(s *specs.Spec) string {
	edits := []specs.ContainerEdits{s.ContainerEdits}
	for _, d := range s.Devices {
		edits = append(edits, d.ContainerEdits)
	}
	for _, e := range edits {
		for _, m := range e.Mounts {
			if m == nil {
				continue
			}
			if rest, ok := strings.CutPrefix(m.HostPath, activate.DriversDir+"/"); ok {
				if v, _, _ := strings.Cut(rest, "/"); v != "" {
					return path.Clean(v)
				}
			}
		}
	}
	return ""
}
