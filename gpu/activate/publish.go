package activate

import (
	"fmt"
	"path/filepath"

	"github.com/kpreload/kpreload/gpu/devnodes"
	"github.com/kpreload/kpreload/gpu/selection"
)

// Publication is a driver that loaded, to be made usable: what Publish
// needs, with the roots it writes under.
type Publication struct {
	// Ready is the record to write: driver, version, flavour, set, kernel,
	// modules, who activated it and when; Publish fills in DeviceNodes and
	// Userspace.
	Ready Ready
	// RunDir, Root and DriversDir are as for Point and MarkReady.
	RunDir, Root, DriversDir string
	// PlanNodes plans the device nodes of an NVIDIA driver: /init reads the
	// running system directly (devnodes.Plan), the CLI inside its roots
	// (devnodes.PlanIn).
	PlanNodes func() ([]devnodes.Node, error)
	// Ldconfig, if set, refreshes the linker cache once the link points at
	// the new userspace.
	Ldconfig func() error
}

// Publish makes a loaded driver usable and says so, the same way for /init
// and kpreload switch: an NVIDIA driver's device nodes (the only drivers
// with nodes to make), the userspace link, the linker cache, then the
// readiness record. It returns the record and whether it was written, and
// each problem met on the way, named by its step; ErrNoUserspace is among
// them (wrapped) when the image holds no userspace for the version.
func Publish(p Publication) (r Ready, marked bool, problems []error) {
	r = p.Ready
	r.DeviceNodes, r.Userspace = nil, ""
	if selection.IsNVIDIA(r.Driver) && p.PlanNodes != nil {
		nodes, err := p.PlanNodes()
		if err == nil {
			err = devnodes.Create(nodes)
		}
		if err != nil {
			problems = append(problems, fmt.Errorf("device nodes: %w", err))
		} else {
			for _, n := range nodes {
				r.DeviceNodes = append(r.DeviceNodes, n.Path)
			}
		}
	}
	if err := Point(p.RunDir, p.Root, p.DriversDir, r.Version); err != nil {
		problems = append(problems, fmt.Errorf("userspace: %w", err))
	} else {
		r.Userspace = filepath.Join(p.DriversDir, r.Version)
		if p.Ldconfig != nil {
			if err := p.Ldconfig(); err != nil {
				problems = append(problems, fmt.Errorf("ldconfig: %w", err))
			}
		}
	}
	if err := MarkReady(p.RunDir, r); err != nil {
		return r, false, append(problems, err)
	}
	return r, true, problems
}
