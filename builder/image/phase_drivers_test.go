package image

import (
	"testing"
)

// TestDriversPhase runs the drivers phase of an image with no recipes: the
// module cache needs no cell, so it runs no tool and leaves the cache empty.
func TestDriversPhase(t *testing.T) {
	f := &fakeRunner{}
	j, o := fakeJob(t, f, nil)
	if err := runThrough(t, j, PhasePrepare); err != nil {
		t.Fatal(err)
	}
	before := len(f.cmds)
	if err := j.drivers(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := f.cmds[before:]; len(got) != 0 {
		t.Errorf("drivers ran %q for an image with no recipes", got)
	}
	if ents := dirEntries(t, o.Stage.CacheDir); len(ents) != 0 {
		t.Errorf("drivers put %q into the module cache", ents)
	}
}
