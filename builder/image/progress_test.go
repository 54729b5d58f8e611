package image

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/internal/progress"
)

// TestShowPhases checks each phase shows on the status line while it runs
// and counts as done when it returns, a failure included.
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
	}, l, clock)
	for _, p := range phases {
		if err := p.Run(context.Background()); err != nil {
			break
		}
	}
	want := []string{"[0/3] prepare: checks · 2s elapsed", "[1/3] rootfs: mmdebstrap · 1m2s elapsed"}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("status lines %q, want %q", seen, want)
	}
	if got, want := l.Status(), "[2/3] · 1m2s elapsed"; got != want {
		t.Errorf("Status() after the failure = %q, want %q", got, want)
	}
}
