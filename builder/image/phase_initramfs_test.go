package image

import (
	"testing"
)

// TestInitramfsPhase runs the initramfs phase of a plain image: nothing of
// kpreload's is staged (no stand-in initramfs tool built, no drivers) and the
// manifest's driver list is empty, not null.
func TestInitramfsPhase(t *testing.T) {
	f := &fakeRunner{}
	j, _ := fakeJob(t, f, nil)
	if err := runThrough(t, j, PhaseInitramfs); err != nil {
		t.Fatal(err)
	}
	if got := f.ran("dpkg-deb"); len(got) != 0 {
		t.Errorf("a plain image built the stand-in initramfs tool: %q", got)
	}
	if j.m.Drivers == nil || len(j.m.Drivers) != 0 {
		t.Errorf("manifest drivers = %#v, want an empty list", j.m.Drivers)
	}
}
