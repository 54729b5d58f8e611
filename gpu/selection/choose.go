package selection

import (
	"errors"
	"fmt"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/internal/none"
	"github.com/kpreload/kpreload/report"
)

// Target is what a switch asks for: Version as the instance YAML's
// resources.driver.version takes it (an exact version, a branch or version
// prefix such as "535" or "2", or "latest"), and optionally the driver and
// the flavour.
type Target struct {
	Version, Driver, Flavor string
	// Force chooses the newest set of the version and flavour asked for
	// even where the decision refuses it; the refusal is kept in
	// Choice.Forced.
	Force bool
}

// Choice is a decision narrowed to the one driver a request is for, and the
// set to load for it.
type Choice struct {
	// Decision is the whole decision, as kpreload plan shows it.
	Decision *Decision
	// Driver is the decision for the driver asked for (nil when the cache
	// has no such driver).
	Driver *report.SelectionDriver
	// Set is the set to load: the chosen one, or under Target.Force the
	// one the decision refused. Nil when there is none.
	Set *Set
	// Forced is the refusal Target.Force overrode ("" when none).
	Forced string
}

// RefusedError is returned when the decision refuses the target, as /init
// would refuse it at boot.
type RefusedError struct {
	// Refusal is the decision's words, the same /init prints.
	Refusal string
}

func (e *RefusedError) Error() string {
	return "switch: refused, as /init would refuse it: " + e.Refusal + " (--force switches anyway)"
}

// Requested returns the decision for the driver a request is for: the GPU
// (NVIDIA) driver when one is cached, else the one driver the request
// applies to; nil when the cache holds no driver the request applies to.
func (d *Decision) Requested() *report.SelectionDriver {
	var want *report.SelectionDriver
	for i := range d.Drivers {
		if dd := &d.Drivers[i]; dd.Requested && (want == nil || IsNVIDIA(dd.Driver)) {
			want = dd
		}
	}
	return want
}

// Choose takes the decision for req with t's version and flavour in place of
// the request's own (its other rules, such as a CUDA minimum, stay) and
// returns the set to load. A version the cache does not hold is an error
// naming what it holds (at boot the same request goes on with the default);
// a refusal is a *RefusedError unless t.Force. The Choice is never nil; it
// holds the decision whenever one was taken, errors included.
func (m *Machine) Choose(req instance.Request, t Target) (*Choice, error) {
	if t.Version == "" {
		return &Choice{}, errors.New("switch: no driver version given")
	}
	if req.Source == "" {
		req.Source, req.Origin = "switch", "kpreload switch "+t.Version
	}
	drv := &req.Instance.Resources.Driver
	drv.Version, drv.Flavor = t.Version, t.Flavor
	req.VersionAt = ""
	c := &Choice{Decision: m.Decide(req)}
	want := t.Version
	if t.Driver != "" {
		want = t.Driver + " " + want
	}
	if t.Flavor != "" {
		want += " (" + t.Flavor + ")"
	}
	absent := fmt.Errorf("switch: no cached driver set %s for kernel %s; the cache has: %s", want, m.Kernel, m.held())
	if t.Driver != "" {
		c.Driver = c.Decision.Driver(t.Driver)
	} else {
		c.Driver = c.Decision.Requested()
	}
	switch {
	case c.Driver == nil:
		return c, absent
	case !c.Driver.Requested:
		return c, fmt.Errorf("switch: the request applies to the GPU driver, not %s (which takes its latest version): %w", t.Driver, absent)
	case c.Driver.Fallback != "":
		return c, absent
	case c.Driver.Chosen != nil:
		c.Set = m.set(c.Driver.Driver, c.Driver.Chosen.ID)
		return c, nil
	}
	if !t.Force {
		return c, &RefusedError{Refusal: c.Driver.Refusal}
	}
	// Forced: the newest set the version and flavour rules keep.
	var best *report.SelectionCandidate
	for i := range c.Driver.Candidates {
		cand := &c.Driver.Candidates[i]
		if !MatchVersion(t.Version, cand.Version) || (t.Flavor != "" && t.Flavor != instance.FlavorAuto && cand.Flavor != t.Flavor) {
			continue
		}
		if best == nil || instance.CompareVersions(cand.Version, best.Version) > 0 {
			best = cand
		}
	}
	if best == nil {
		return c, &RefusedError{Refusal: c.Driver.Refusal}
	}
	c.Set, c.Forced = m.set(c.Driver.Driver, best.ID), c.Driver.Refusal
	return c, nil
}

// ChoiceOf narrows a decision taken on this machine to the driver its
// request is for (Decision.Requested) and that driver's chosen set.
func (m *Machine) ChoiceOf(d *Decision) *Choice {
	c := &Choice{Decision: d, Driver: d.Requested()}
	if c.Driver != nil && c.Driver.Chosen != nil {
		c.Set = m.set(c.Driver.Driver, c.Driver.Chosen.ID)
	}
	return c
}

// set returns the machine's set of a driver with an id.
func (m *Machine) set(driver, id string) *Set {
	for i := range m.Sets {
		if s := &m.Sets[i]; s.Set.Driver == driver && s.Set.ID == id {
			return s
		}
	}
	return nil
}

// held lists the machine's driver sets as "driver version (flavour)".
func (m *Machine) held() string {
	var out []string
	for _, s := range m.Sets {
		if IsKernelSet(s.Set) {
			continue
		}
		h := s.Set.Driver + " " + s.Set.Version
		if s.Set.Flavor != "" {
			h += " (" + s.Set.Flavor + ")"
		}
		out = append(out, h)
	}
	return none.List(out)
}
