// What the two-level cache (the local store and a remote registry) says of a
// cell, into its Result.

package matrix

import (
	"github.com/kpreload/kpreload/kmodcache/tiered"
)

// cacheCell names cell c with key for the cache.
func cacheCell(c Cell, key map[string]string) tiered.Cell {
	rc := c.Recipe
	return tiered.Cell{
		Key: key, Recipe: rc.Name, Kernel: c.Kernel,
		Driver: rc.Driver.Name, Version: rc.Driver.Version, Flavor: rc.Flavor,
	}
}

// note takes what the cache says of the registry into res: its set, what
// happened there and a failed push.
func (res *Result) note(e tiered.Entry) {
	if e.SetID != "" {
		res.SetID = e.SetID
	}
	if e.Remote != "" {
		res.Remote = e.Remote
	}
	if e.Trust != "" {
		res.Trust = e.Trust
	}
	if e.PushErr != nil {
		res.PushErr = e.PushErr
	}
}
