package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/internal/progress"
)

// TestShowPhases checks each phase shows on the status line while it runs
// and counts as done when it returns, a failure included; a failed phase's
// time does not feed the estimate (with no costs given each phase is 1).
func TestShowPhases(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	l := progress.New(&strings.Builder{}, true, clock)
	var seen []string
	phases := ShowPhases([]Phase{
		{Name: "prepare", Title: "checks", Run: func(context.Context) error {
			now = now.Add(2 * time.Second)
			seen = append(seen, l.Status())
			return nil
		}},
		{Name: "rootfs", Title: "mmdebstrap", Run: func(context.Context) error {
			now = now.Add(time.Minute)
			seen = append(seen, l.Status())
			return errors.New("boom")
		}},
		{Name: "disk", Title: "raw GPT disk", Run: func(context.Context) error { return nil }},
	}, nil, l, clock)
	for _, p := range phases {
		if err := p.Run(context.Background()); err != nil {
			break
		}
	}
	want := []string{"[0/3] prepare: checks · 2s elapsed", "[1/3] rootfs: mmdebstrap · 1m2s elapsed · about 4s left"}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("status lines %q, want %q", seen, want)
	}
	if got, want := l.Status(), "[2/3] · 1m2s elapsed · about 2s left"; got != want {
		t.Errorf("Status() after the failure = %q, want %q", got, want)
	}
}

// TestShowPhasesEstimate checks the line estimates the time left from the
// phases' costs at the rate the finished ones took.
func TestShowPhasesEstimate(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	l := progress.New(&strings.Builder{}, true, clock)
	var seen string
	phases := ShowPhases([]Phase{
		{Name: "rootfs", Title: "mmdebstrap", Run: func(context.Context) error {
			now = now.Add(100 * time.Second)
			return nil
		}},
		{Name: "disk", Title: "raw GPT disk", Run: func(context.Context) error {
			seen = l.Status()
			return nil
		}},
	}, map[string]float64{"rootfs": 10, "disk": 5}, l, clock)
	for _, p := range phases {
		if err := p.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := seen, "[1/2] disk: raw GPT disk · 1m40s elapsed · about 50s left"; got != want {
		t.Errorf("status while the disk phase runs = %q, want %q", got, want)
	}
}

// TestPhaseCosts checks the root filesystem costs an mmdebstrap run unless
// today's tarball for the same inputs is in the rootfs cache, and each
// format beside raw adds to the formats phase.
func TestPhaseCosts(t *testing.T) {
	dir := t.TempDir()
	o := Options{Name: "x", Kernels: []string{"6.1.0-56-cloud-amd64"}, Rootfs: rootfs.Options{Suite: "bookworm", CacheDir: dir}, Formats: []string{formats.Raw, formats.QCOW2}}
	j := NewJob(o)
	costs := j.PhaseCosts()
	if got, want := costs[PhaseRootfs], float64(costMmdebstrap); got != want {
		t.Errorf("rootfs cost with an empty cache = %v, want %v", got, want)
	}
	if got, want := costs[PhaseFormats], float64(1+costPerFormat); got != want {
		t.Errorf("formats cost for raw and qcow2 = %v, want %v", got, want)
	}
	key := rootfs.Key(rootfsSpec(j.Options(), time.Now().UTC().Format("2006-01-02")))
	if err := os.WriteFile(filepath.Join(dir, key+".tar"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := j.PhaseCosts()[PhaseRootfs], float64(costRootfsCached); got != want {
		t.Errorf("rootfs cost with today's tarball cached = %v, want %v", got, want)
	}
	if _, ok := NewJob(Options{Rootfs: rootfs.Options{CacheDir: "off"}}).PhaseCosts()[PhaseRootfs]; !ok {
		t.Error("no rootfs cost with the cache off")
	}
}
