package remote

import "slices"

// Filter narrows Select to the cells a pull asks for; an empty field
// matches every cell.
type Filter struct {
	// Kernels are the kernel releases asked for.
	Kernels []string
	// Driver and Flavor are the driver and the flavour asked for.
	Driver, Flavor string
	// Version is the driver version asked for, as VersionRule reads it.
	Version string
	// VersionRule says whether a cell's version is what Version asks for:
	// gpu/selection's MatchVersion, the instance YAML's rule, where "550"
	// is the 550 branch and an exact version is itself. nil takes exact
	// versions only.
	VersionRule func(want, version string) bool
}

// Match reports whether the cell of identity id is one f asks for; it is
// Select's match.
func (f Filter) Match(id Identity) bool {
	return (len(f.Kernels) == 0 || slices.Contains(f.Kernels, id.Kernel)) &&
		(f.Driver == "" || id.Driver == f.Driver) &&
		(f.Flavor == "" || id.Flavor == f.Flavor) &&
		f.matchVersion(id.Version)
}

// matchVersion applies VersionRule, or the exact rule without one.
func (f Filter) matchVersion(version string) bool {
	switch {
	case f.Version == "":
		return true
	case f.VersionRule != nil:
		return f.VersionRule(f.Version, version)
	}
	return version == f.Version
}
